"""Fixtures of the billing tests: the quotas tests' team with quota (billing counts what admitted work holds)."""

from tests.quotas.conftest import quota_team  # noqa: F401 - a fixture, used by name
