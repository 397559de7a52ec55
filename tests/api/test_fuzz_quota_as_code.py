"""Quota as code fuzzed as platform staff (the main fuzzing test runs as a member, to whom these
operations answer 403 or 404 before reading a body): schemathesis' checks on every body and
parameter the staff-only writes take, against a live server of the test database.

``positive_data_acceptance`` is off where a schema-valid body may still be refused on data: a
cohort's ``teams`` must name existing teams, and the quota and team routes' team and flavor are
fixed to real ones so that the bodies, not the lookups, are what is fuzzed.
"""

from __future__ import annotations

import pytest
from schemathesis.config import SchemathesisConfig

from teams.services import create_api_token
from tests.api.test_fuzz import EXAMPLES, SEED, live_server_connections, run_schemathesis  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]  # as tests/api/test_fuzz.py

QUOTA_AS_CODE = r"^/api/v1/(cohorts/|teams/\{slug\}/$|teams/\{slug\}/quotas/)"


def staff_config(token: str) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict({
        "headers": {"Authorization": f"Bearer {token}"},
        "workers": 1,
        "seed": SEED,
        "suppress-health-check": ["all"],
        "cache": {"enabled": False},
        "checks": {"enabled": True},
        "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True},
                   "fuzzing": {"enabled": True}, "stateful": {"enabled": False}},
        "generation": {"max-examples": EXAMPLES, "database": "none", "deterministic": True},
        "operations": [
            {"exclude-path-regex": QUOTA_AS_CODE, "enabled": False},
            {"include-path-regex": r"^/api/v1/teams/\{slug\}/",
             "parameters": {"path.slug": "ml-research", "path.flavor": "a100-80gb"}},
            {"include-path-regex": r"^/api/v1/cohorts/\{name\}/$", "include-method": "PUT",
             "checks": {"positive_data_acceptance": {"enabled": False}}},
        ],
    })


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_quota_as_code_answers_staff_as_its_schema_says(live_server_connections, live_server, staff, quota,  # noqa: F811
                                                       capsys):
    _token, raw = create_api_token(staff, "fuzz")
    operations, cases, mismatches = run_schemathesis(live_server.url, staff_config(raw))
    with capsys.disabled():
        print(f"\nschemathesis (staff, quota as code): {len(operations)} operations, {cases} cases, "
              f"{len(mismatches)} mismatches")
    assert not mismatches, "\n\n".join(f"{' '.join(key)}\n    {how}" for key, how in sorted(mismatches.items()))
    assert len(operations) == 8
    assert cases >= 20 * len(operations)
