"""The clusters API fuzzed as platform staff (issue 52: its ``pools``, and what staff PATCH): schemathesis' checks
on every body the PATCH takes and every answer, against a live server of the test database. The main fuzzing test
runs as a member, to whom clusters answer 404 before a body is read.

The cluster is fixed to a real one (random names find nothing), which has an elastic pool, so that the answers'
``pools`` are checked too. ``positive_data_acceptance`` is off for the PATCH: a schema-valid pool may still name a
flavor the catalogue does not have, or a ``min`` above its ``max`` (no JSON Schema says either).
"""

from __future__ import annotations

import pytest
from schemathesis.config import SchemathesisConfig

import fleet.services as fleet
from fleet.models import NodePool
from teams.services import create_api_token
from tests.api.test_fuzz import EXAMPLES, SEED, live_server_connections, run_schemathesis  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]  # as tests/api/test_fuzz.py

CLUSTERS = r"^/api/v1/clusters/"


def staff_config(token: str, cluster: str) -> SchemathesisConfig:
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
            {"exclude-path-regex": CLUSTERS, "enabled": False},
            {"include-path-regex": r"^/api/v1/clusters/\{name\}/$", "parameters": {"path.name": cluster}},
            {"include-path-regex": r"^/api/v1/clusters/\{name\}/$", "include-method": "PATCH",
             "checks": {"positive_data_acceptance": {"enabled": False}}},
        ],
    })


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_clusters_api_answers_staff_as_its_schema_says(live_server_connections, live_server, staff,  # noqa: F811
                                                         flavors, capsys):
    cluster = fleet.clusters()[0]
    NodePool.objects.create(cluster=cluster, flavor=flavors["a100-80gb"], min_nodes=0, max_nodes=3)
    _token, raw = create_api_token(staff, "fuzz")
    operations, cases, mismatches = run_schemathesis(live_server.url, staff_config(raw, cluster.name))
    with capsys.disabled():
        print(f"\nschemathesis (staff, clusters): {len(operations)} operations, {cases} cases, "
              f"{len(mismatches)} mismatches")
    assert not mismatches, "\n\n".join(f"{' '.join(key)}\n    {how}" for key, how in sorted(mismatches.items()))
    assert operations == {"GET /api/v1/clusters/", "GET /api/v1/clusters/{name}/", "PATCH /api/v1/clusters/{name}/"}
    assert cases >= 20
