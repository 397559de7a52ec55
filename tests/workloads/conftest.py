"""Workload machinery tests reuse the training tests' cluster fake, flavors, quota and publish capture."""

from tests.jobs.conftest import fake_backend, flavors, published, quota  # noqa: F401
