"""API fuzzing with schemathesis against the served OpenAPI schema, as a team member.

The test runs schemathesis' own engine — what ``st run`` runs — against a live server of the
test database: the examples, coverage (boundary values, wrong types, missing and empty
parameters) and fuzzing phases, on every operation, with every check that applies to a
stateless run: no 5xx, status codes, content types, headers and bodies as the schema documents
them, invalid input rejected (``negative_data_rejection``), valid input accepted
(``positive_data_acceptance``), authentication not ignored, allowed methods. It counts the
mismatches over the whole run and fails on any, listing each with the request to replay it.

``positive_data_acceptance`` is off for the few operations whose refusals rest on data or on
several fields together, which no JSON Schema can state: a POST or PATCH names a flavor of the
catalogue, a pullable image and a quota the team holds; a usage report's ``until`` must come
after its ``since``; the command line's sign-in polls with a device code the server issued. Their 400s are still checked against the schema (shape, content type).

The API is fuzzed in parts (:data:`PARTS`: one per kind with an API — runs, endpoints, workspaces —, read
from the kind registry and the router, so a new kind's API gets its own part without a touch here; then
the rest), each its own test, so that pytest-xdist spreads them over its workers; each part must reach
every operation of its paths in the schema, and the last part is every path the others leave.
"""

from __future__ import annotations

import gc
import re

import pytest
import schemathesis
from django.db import DEFAULT_DB_ALIAS, connections
from drf_spectacular.generators import SchemaGenerator
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

from inference import services as endpoints
from jobs.services import submit_run
from portal.api_urls import router
from teams.services import create_api_token
from tests.e2e.conftest import wait_for
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from tests.test_kind_boundaries import project_kinds

# Thousands of requests through a live server: minutes on a busy 2-core machine, past the suite's 300 s default.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

#: Generated examples per operation in the fuzzing phase (the coverage phase adds its own
#: deterministic cases): enough to find a 500 or a mismatch, few enough for CI on 2 cores.
EXAMPLES = 5
#: The same on the real objects (valid input only, where the deep paths are). 15 reached no (operation, status)
#: pair that 5 does not, measured part by part on 2026-11-27 (pairs at 5 / 15: runs 27 / 25, endpoints 54 / 50,
#: workspaces 13 / 13, the rest 28 / 29 — its one more, a 404 of a random key id, is the random-id run's anyway),
#: for 762 cases instead of 1,386.
OBJECT_EXAMPLES = 5
SEED = 21

#: The kinds with an API: a kind's viewset is registered under its plural (portal/api_urls.py).
API_KINDS = [kind.plural for kind in project_kinds() if kind.plural in {prefix for prefix, *_ in router.registry}]
#: Operations whose valid-by-the-schema input may still be refused on data (see the docstring).
DATA_DEPENDENT = [
    {"include-path-regex": rf"^/api/v1/({'|'.join(API_KINDS)})/(\{{id\}}/)?$", "include-method": ["POST", "PATCH"]},
    {"include-path": "/api/v1/usage/", "include-method": "GET"},
    # The command line's sign-in: a device code is only good if the server issued it, and an address
    # may hold only so many waiting logins (429).
    {"include-path-regex": r"^/api/v1/auth/(device|token)/$", "include-method": "POST"},
]


#: The parts the API is fuzzed in, by path: each a test of its own (xdist spreads them). The last
#: part is every path the others leave.
PARTS = {**{plural: rf"^/api/v1/{plural}/" for plural in API_KINDS}, "the rest": None}
#: The paths of the parts before the last.
WORKLOADS = "|".join(pattern for pattern in PARTS.values() if pattern)
#: Operations on one object (on the ``ids`` fixture's run, endpoint and team; on random ids elsewhere).
ON_OBJECTS = r"\{(id|slug)\}"


def in_part(part: str, path: str) -> bool:
    pattern = PARTS[part]
    return bool(re.search(pattern, path)) if pattern else not re.search(WORKLOADS, path)


def part_filter(part: str) -> dict:
    """The operations entry that turns off every operation outside ``part``."""
    pattern = PARTS[part]
    return {"exclude-path-regex": pattern, "enabled": False} if pattern else \
        {"include-path-regex": WORKLOADS, "enabled": False}


def schema_operations() -> dict[str, set[str]]:
    """Each part's operations in the schema Slipway serves ("GET /api/v1/runs/"), as schemathesis labels them."""
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    labels = {f"{method.upper()} {path}" for path, item in paths.items() for method in item
              if method in ("get", "put", "post", "patch", "delete")}
    return {part: {label for label in labels if in_part(part, label.split(" ", 1)[1])} for part in PARTS}


def schemathesis_config(token: str, part: str, ids: dict[str, str] | None = None) -> SchemathesisConfig:
    """Every check and phase of a stateless run on one part of the API, bounded and reproducible.

    With ``ids``: only the operations on one object, on the real objects (random ids find
    nothing), with valid input only — a fixed id would turn every invalid id into a valid one.
    """
    operations: list[dict] = [{**selector, "checks": {"positive_data_acceptance": {"enabled": False}}}
                              for selector in DATA_DEPENDENT]
    operations.append(part_filter(part))
    config: dict = {
        "headers": {"Authorization": f"Bearer {token}"},
        "workers": 1,
        "seed": SEED,
        "suppress-health-check": ["all"],
        # No replay of failures a former run stored: the same cases every time, nothing written.
        "cache": {"enabled": False},
        "checks": {"enabled": True},
        "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True},
                   "fuzzing": {"enabled": True}, "stateful": {"enabled": False}},
        # The same cases on every run and machine: no example database, no randomness past the seed.
        "generation": {"max-examples": EXAMPLES, "database": "none", "deterministic": True},
    }
    if ids is not None:
        config["generation"]["mode"] = "positive"
        config["generation"]["max-examples"] = OBJECT_EXAMPLES
        operations += [
            {"include-path-regex": r"^/api/v1/runs/\{id\}/", "parameters": {"path.id": ids["run"]}},
            {"include-path-regex": r"^/api/v1/endpoints/\{id\}/", "parameters": {"path.id": ids["endpoint"]}},
            {"include-path-regex": r"^/api/v1/teams/\{slug\}/", "parameters": {"path.slug": ids["team"]}},
            {"exclude-path-regex": ON_OBJECTS, "enabled": False},
        ]
    config["operations"] = operations
    return SchemathesisConfig.from_dict(config)


@pytest.fixture
def live_server_connections(monkeypatch):
    """The live server's database connections end with the test.

    Each keep-alive HTTP connection is served by a thread of its own, whose database connection
    is built from this dict: it lasts as long as the HTTP connection (``CONN_MAX_AGE`` None) and
    is closed with it (Django's ``ThreadedWSGIServer.close_request``). A connection per request
    (``CONN_MAX_AGE`` 0, as before) cost a third of the server's time — a PostgreSQL backend forked
    for each of thousands of requests. After the test, every other backend on the test database
    is gone: the engine's HTTP sessions close when collected (their sockets with them); one still
    open after a few seconds is ended, so that none keeps the test database from being dropped.
    """
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", None)
    yield
    close_server_connections()


def close_server_connections(timeout: float = 5.0) -> None:
    """Wait until no other connection is open on the test database; end those left after ``timeout``."""
    others = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "postgresql":
        return
    gc.collect()  # the engine's HTTP sessions (and so their sockets) may wait in reference cycles
    with connection.cursor() as cursor:
        def none_left() -> bool:
            cursor.execute(others)
            return not cursor.fetchall()

        try:
            wait_for(none_left, timeout=timeout, interval=0.05, what="the live server's connections to close")
        except AssertionError:
            cursor.execute(f"SELECT pg_terminate_backend(pid) FROM ({others}) AS left_open")


@pytest.fixture
def ids(member, team, quota, ep_quota, published, fake_backend) -> dict[str, str]:
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload())
    return {"run": str(run.pk), "endpoint": str(endpoint.pk), "team": team.slug}


#: Seconds the schema's one fetch may take (tests/cli/test_cli.py gives its own fetches as long).
SCHEMA_TIMEOUT = 60


def run_schemathesis(url: str, config: SchemathesisConfig) -> tuple[set[str], int, dict[tuple, str]]:
    """Operations tested, cases sent, and the mismatches found: (operation, check, title) → how to replay it."""
    # The live server builds the whole schema for this request: 10 s (the default) ran out once while a slow boot's
    # suite loaded both cores (2026-11-29). A bound for a hang, not a promise.
    schema = schemathesis.openapi.from_url(f"{url}/api/schema/", config=config, timeout=SCHEMA_TIMEOUT)
    operations: set[str] = set()
    cases = 0
    mismatches: dict[tuple, str] = {}
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            operations.add(recorder.label)
            cases += len(recorder.cases)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status != Status.FAILURE or check.failure_info is None:
                        continue
                    info = check.failure_info
                    response = recorder.interactions.get(case_id)
                    body = response.response.content[:300] if response and response.response else b""
                    mismatches.setdefault((recorder.label, check.name, info.failure.title),
                                          f"{info.code_sample}\n    -> {body!r}")
        elif isinstance(event, events.NonFatalError | events.FatalError):
            # An error of the run itself (e.g. a body its declared content type cannot parse).
            mismatches.setdefault(("run", "error", str(getattr(event, "label", ""))), repr(event))
    return operations, cases, mismatches


# A response the engine cannot read (e.g. a YAML stream where one document is declared) kills its
# worker thread and silently ends the run early: that is a failure too.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("part", list(PARTS))
def test_every_operation_answers_as_its_schema_says(part, live_server_connections, live_server, member, ids, capsys):
    _token, raw = create_api_token(member, "fuzz")
    parts = schema_operations()
    expected = parts[part]
    # The real objects first (the whole run below may cancel and delete them).
    on_objects, object_cases, mismatches = run_schemathesis(live_server.url, schemathesis_config(raw, part, ids))
    operations, cases, more = run_schemathesis(live_server.url, schemathesis_config(raw, part))
    mismatches.update(more)
    with capsys.disabled():
        print(f"\nschemathesis, {part}: {len(operations)} operations, {cases + object_cases} cases "
              f"({object_cases} on the real objects of {len(on_objects)}), {len(mismatches)} mismatches")
    assert not mismatches, "\n\n".join(f"{' '.join(key)}\n    {how}" for key, how in sorted(mismatches.items()))
    assert len(set().union(*parts.values())) >= 20  # every route of docs/api.md is in the schema
    assert len(operations) >= 5 and operations == expected  # every operation of the part's paths
    assert on_objects == {label for label in expected if re.search(ON_OBJECTS, label)}
    assert object_cases >= OBJECT_EXAMPLES * len(on_objects)
    assert cases >= 20 * len(operations)
