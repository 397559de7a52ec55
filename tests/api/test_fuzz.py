"""API fuzzing with schemathesis against the served OpenAPI schema, as a team member.

Every operation gets generated input (within and outside the schema); a bounded number of
examples keeps the run short. Checked on every response: no 5xx, a status code and content
type the schema documents, and a body that conforms to it.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from inference import services as endpoints
from jobs.services import submit_run
from portal.services import create_api_token
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def objects(member, team, quota, ep_quota, published, fake_backend) -> dict[str, str]:
    """Real objects for the operations that take an id or a team: path parameter values per path prefix."""
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload())
    return {"/api/v1/runs/": str(run.pk), "/api/v1/endpoints/": str(endpoint.pk), "/api/v1/teams/": team.slug}


@pytest.fixture
def api_schema(objects):
    # Requests go straight to the WSGI application, not through Django's test client: keep its
    # end-of-request handler from closing the test's database connection (the client does the same).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


CHECKS = (status_code_conformance, content_type_conformance, response_schema_conformance)


@pytest.fixture
def bearer(member) -> dict[str, str]:
    _token, raw = create_api_token(member, "fuzz")
    return {"Authorization": f"Bearer {raw}"}


#: Generated examples per operation: enough to find a 500 or a schema mismatch, few enough for CI.
EXAMPLES = 8


def test_every_operation_answers_within_its_schema(api_schema, bearer, objects):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 15  # every route of API.md is in the schema

    # 1. Each operation on the real objects (random ids mostly find nothing): the success bodies.
    for operation in operations:
        if operation.method.upper() in ("DELETE", "PATCH", "POST"):
            continue  # their bodies are generated below; a real DELETE first would leave little to read
        found = next((value for prefix, value in objects.items() if operation.path.startswith(prefix)), None)
        names = [p.name for p in operation.path_parameters]
        if not names or found is None:
            continue
        case = operation.Case(path_parameters=dict.fromkeys(names, found))
        response = case.call(headers=bearer)
        assert response.status_code == 200, (operation.path, response.text[:300])
        case.validate_response(response, checks=CHECKS)

    # 2. Generated input for every operation: valid by the schema, and invalid (which must be a 4xx).
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode, bearer)


def fuzz(operation, mode: GenerationMode, bearer: dict[str, str]) -> None:
    """``EXAMPLES`` generated cases of ``operation`` in ``mode``: never a 5xx, always as documented."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call(headers=bearer)
        assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
        case.validate_response(response, checks=CHECKS)

    check()
