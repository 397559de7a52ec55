"""Bad input that used to make Slipway answer 500, print a traceback or keep garbage.

The rule (docs/design.md "Reliability rules", docs/api.md "Auth and errors"): bad input gets a clear error — a 400 with
field errors in the API, a form error in the portal, a CommandError for management commands —
never a 500, and nothing half-written. Every test here reproduces a problem found by a review
that probed the API, the portal and the commands with odd values. Tests marked ``postgres``
are PostgreSQL-only failures (NUL bytes, time-zone offsets, column lengths).
"""

from __future__ import annotations

import contextlib
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.models import TrainingRun
from sandbox.backend import SandboxBackend
from sandbox.models import SimLoad
from teams.models import ApiToken, IdempotencyRecord
from tests.jobs.conftest import run_payload
from tests.sandbox.helpers import A100, at, endpoint, team_objects
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

#: Flavors, quota and recorded task publishes (fixtures of tests/jobs/conftest.py).
with_quota = pytest.mark.usefixtures("quota", "published")


def post_run(api, payload, **headers):
    return api.post("/api/v1/runs/", json.dumps(payload), content_type="application/json", **headers)


def assert_field_error(response, field: str) -> None:
    assert response.status_code == 400, response.content[:300]
    assert field in response.json()["errors"], response.json()


# -- POST /api/v1/runs/ -----------------------------------------------------------------------------


@with_quota
@pytest.mark.parametrize("field", ["cpu", "memory_gb", "shm_gb"])
def test_it_rejects_an_integer_too_large_for_a_float(api, field):
    # JSON integers are unbounded; float(10**400) raises OverflowError, which
    # _Collector.number does not catch (it catches TypeError and ValueError only).
    response = post_run(api, run_payload(**{field: 10**400}))
    assert_field_error(response, field)
    assert not TrainingRun.objects.exists()


@with_quota
def test_it_rejects_a_json_body_nested_too_deeply(api):
    # json.loads raises RecursionError (not ValueError) past ~1000 levels: DRF's JSONParser
    # lets it through. The body is 20 kB, far below DATA_UPLOAD_MAX_MEMORY_SIZE.
    body = '{"team": "ml-research", "args": ' + "[" * 10_000 + "]" * 10_000 + "}"
    response = api.post("/api/v1/runs/", body, content_type="application/json")
    assert response.status_code == 400
    assert "non_field_errors" in response.json()["errors"]
    assert not TrainingRun.objects.exists()


@with_quota
@pytest.mark.parametrize("field, value", [
    ("name", "bert\n"),
    ("image", "busybox\n"),
    ("env", {"WANDB_MODE\n": "offline"}),
    ("volumes", [{"claim": "datasets\n", "mount_path": "/data"}]),
])
def test_it_rejects_a_trailing_newline_in_names_checked_by_pattern(api, field, value):
    # The patterns of jobs/validation.py end in "$", which also matches before a final "\n":
    # "bert\n" passes as a DNS-1123 label and is stored, to be refused later by the cluster.
    response = post_run(api, run_payload(**{field: value}))
    assert_field_error(response, field)
    assert not TrainingRun.objects.exists()


@with_quota
@pytest.mark.parametrize("field, value", [
    ("env", {"WANDB_MODE": "off\x00line"}),
    ("volumes", [{"claim": "datasets", "mount_path": "/data\x00"}]),
])
def test_it_rejects_nul_bytes_in_env_values_and_mount_paths(api, field, value):
    # argv items are checked for NUL, env values and mount paths are not: SQLite stores them
    # (a container spec cannot carry them), PostgreSQL's jsonb refuses them with a DataError (500).
    response = post_run(api, run_payload(**{field: value}))
    assert_field_error(response, field)
    assert not TrainingRun.objects.exists()


@with_quota
@pytest.mark.postgres
@pytest.mark.parametrize("field", ["flavor", "team"])
def test_it_answers_a_nul_byte_in_a_looked_up_field_without_a_500(api, field):
    # The flavor and team slug go straight into a WHERE clause; PostgreSQL text cannot hold NUL.
    response = post_run(api, run_payload(**{field: "ml\x00research"}))
    assert response.status_code in (400, 404)
    assert "errors" in response.json()
    assert not TrainingRun.objects.exists()


# -- Other API routes ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, method", [
    ("", "get"), ("cancel/", "post"), ("logs/", "get"), ("events/", "get"), ("manifest/", "get"),
])
def test_it_answers_404_for_a_run_id_of_unicode_digits(api, suffix, method):
    # "²".isdigit() is True but int("²") raises ValueError (RunViewSet.get_object).
    response = getattr(api, method)(f"/api/v1/runs/²/{suffix}")
    assert response.status_code == 404
    assert "errors" in response.json()


#: More digits than int() converts (4300): a URL line of 8190 bytes (gunicorn.conf.py) carries them.
DIGITS_PAST_INT = "9" * 4400


@pytest.mark.parametrize("suffix, method", [("", "get"), ("cancel/", "post"), ("logs/", "get")])
def test_it_answers_404_for_a_run_id_of_more_digits_than_int_converts(api, suffix, method):
    # pk_of checked the digits, not their number: int() raised ValueError (a 500).
    response = getattr(api, method)(f"/api/v1/runs/{DIGITS_PAST_INT}/{suffix}")
    assert response.status_code == 404
    assert "errors" in response.json()


@with_quota
def test_a_run_id_padded_with_more_zeros_than_int_converts_is_the_run(api):
    # pk_of bounded the digits after the zeros but gave int() all of them: a ValueError (a 500).
    run = post_run(api, run_payload()).json()
    response = api.get(f"/api/v1/runs/{'0' * 4400}{run['id']}/")
    assert response.status_code == 200 and response.json()["id"] == run["id"]


@pytest.mark.parametrize("query, status", [({"page": DIGITS_PAST_INT}, 404), ({"page_size": DIGITS_PAST_INT}, 200)])
def test_a_page_or_page_size_of_more_digits_than_int_converts_is_no_page_or_the_largest(api, query, status):
    # int() of them raised ValueError (a 500). No such page is a 404; a page size larger than the largest is served
    # as the largest, as any larger number is.
    assert api.get("/api/v1/runs/", query).status_code == status


@pytest.mark.parametrize("path", [f"/api/v1/sweeps/{DIGITS_PAST_INT}/", f"/api/v1/sweeps/{DIGITS_PAST_INT}/trials/"])
def test_sweep_routes_answer_404_for_an_id_of_more_digits_than_int_converts(api, path):
    # The route took any digits: the id reached the query's int() (ValueError, a 500).
    response = api.get(path)
    assert response.status_code == 404
    assert "errors" in response.json()


def test_the_new_run_page_answers_404_for_a_from_of_more_digits_than_int_converts(client, member):
    client.force_login(member)
    assert client.get(f"/runs/new/?from={DIGITS_PAST_INT}").status_code == 404


@with_quota
def test_it_rejects_a_log_tail_of_unicode_digits(api):
    run = post_run(api, run_payload()).json()
    response = api.get(f"/api/v1/runs/{run['id']}/logs/?tail=²")  # _tail(): isdigit() then int()
    assert_field_error(response, "tail")


@with_quota
def test_it_rejects_a_log_tail_of_more_digits_than_int_converts(api):
    run = post_run(api, run_payload()).json()
    response = api.get(f"/api/v1/runs/{run['id']}/logs/?tail={DIGITS_PAST_INT}")  # int() raised ValueError
    assert_field_error(response, "tail")


@pytest.mark.postgres
@pytest.mark.parametrize("param", ["team", "created_by"])
def test_it_answers_a_nul_byte_in_a_run_list_filter_without_a_500(api, param):
    response = api.get(f"/api/v1/runs/?{param}=ml%00research")
    assert response.status_code in (200, 400)


@pytest.mark.postgres
def test_it_answers_404_for_a_nul_byte_in_a_team_slug_path(api):
    response = api.get("/api/v1/teams/ml%00research/usage/")
    assert response.status_code == 404


@pytest.mark.postgres
def test_it_answers_a_utc_offset_beyond_postgresqls_range_without_a_500(api, team):
    # Python accepts offsets up to ±23:59, PostgreSQL only up to ±15:59: the aware datetime
    # reaches the query with its own offset and PostgreSQL refuses it (DataError).
    response = api.get("/api/v1/usage/?since=2026-01-01T00:00:00%2B20:00")
    assert response.status_code in (200, 400)


@with_quota
@pytest.mark.postgres
def test_it_answers_a_nul_byte_in_the_idempotency_key_without_a_500(api):
    response = post_run(api, run_payload(), HTTP_IDEMPOTENCY_KEY="key\x00one")
    assert response.status_code in (201, 400)
    assert not IdempotencyRecord.objects.filter(status_code=0).exists()


@with_quota
@pytest.mark.parametrize("key", ["key\tone", "caf\u00e9", "key\x01one"])
def test_a_malformed_idempotency_key_that_reaches_django_is_the_apis_json_400(api, key):
    """Review 5 #9d: wherever the header reaches Django (a tab and non-ASCII pass gunicorn; a control
    character does only without it), the API names it in its JSON error, and nothing is created."""
    response = post_run(api, run_payload(), HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert "Idempotency-Key" in response.json()["errors"]
    assert not IdempotencyRecord.objects.exists()


@with_quota
@pytest.mark.postgres
def test_it_honours_an_idempotency_key_on_a_path_longer_than_the_record_column(api):
    # /runs/000…0042/cancel/ is the same run (int() drops the zeros), but the placeholder row
    # stores request.path in a varchar(300): PostgreSQL raises DataError before the view runs.
    run = post_run(api, run_payload()).json()
    response = api.post(f"/api/v1/runs/{'0' * 400}{run['id']}/cancel/", HTTP_IDEMPOTENCY_KEY="cancel-1")
    assert response.status_code == 202
    assert TrainingRun.objects.get(pk=run["id"]).state == "cancelled"


# -- Portal pages ----------------------------------------------------------------------------------


@with_quota
@pytest.mark.postgres
@pytest.mark.parametrize("method, url, data", [
    # The form rejects the NUL itself, but run_new then previews form.data (raw) for the page.
    ("post", "/runs/new/", {"name": "bert", "image": "busybox", "command": "python", "flavor": "a100\x00",
                            "gpus_per_worker": "1", "workers": "1", "priority": "normal"}),
    ("post", "/runs/preview/", {"flavor": "a100\x00", "gpus_per_worker": "1"}),
    ("get", "/runs/?q=bert%00", None),
    ("post", "/team/switch/", {"team": "ml\x00research"}),
])
def test_portal_answers_nul_bytes_without_a_500(client, member, method, url, data):
    client.force_login(member)
    response = client.post(url, data) if method == "post" else client.get(url)
    assert response.status_code in (200, 400, 404)
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("target", ["run-detail", "tokens", "foo"])
def test_team_switch_ignores_a_next_that_is_not_a_path(client, member, team, target):
    # switch_team hands "next" to redirect(), which reverses anything without "/" or "." as
    # a URL name and raises NoReverseMatch when that fails.
    client.force_login(member)
    response = client.post("/team/switch/", {"team": team.slug, "next": target})
    assert response.status_code == 302


# -- Management commands ---------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("args", [["mi\x00a"], ["mia", "--name", "ci\x00pipeline"]])
def test_create_api_token_rejects_nul_bytes_with_a_command_error(member, args):
    with pytest.raises(CommandError):
        call_command("create_api_token", *args)
    assert not ApiToken.objects.filter(name__startswith="ci").exists()


@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00"])
def test_sandbox_tick_rejects_a_time_at_the_calendars_start(db, moment):
    # Tick(now).run() / "now - EVENT_TTL" overflow: OverflowError instead of a CommandError.
    with pytest.raises(CommandError):
        call_command("sandbox", "tick", "--at", moment)


@pytest.mark.postgres
def test_sandbox_tick_does_not_store_a_clock_it_cannot_read_back(db):
    # 9999-12-31T23:59:59-01:00 is year 10000 in UTC: PostgreSQL stores it, psycopg cannot load
    # it into a datetime, and every later status/tick/observe fails until "sandbox reset".
    with contextlib.suppress(CommandError):
        call_command("sandbox", "tick", "--at", "9999-12-31T23:59:59-01:00")
    call_command("sandbox", "status")


def test_sandbox_tick_rejects_a_number_of_seconds_beyond_timedelta(db):
    call_command("sandbox", "tick", "--at", "2026-11-22T10:00:00Z")
    with pytest.raises(CommandError):
        call_command("sandbox", "tick", "--seconds", str(10**20), "--step", str(10**20))


@pytest.mark.parametrize("value", ["inf", "1e400", "nan"])
def test_sandbox_load_does_not_accept_a_value_that_breaks_the_next_tick(db, value):
    # inf is stored and the next tick dies in desired_replicas (math.ceil(inf)); NaN is stored
    # as NULL by SQLite (IntegrityError) and as NaN by PostgreSQL (ValueError at the next tick).
    backend = SandboxBackend()
    backend.apply(team_objects() + endpoint("ep-1", flavor=A100, min_replicas=1, max_replicas=4, target=70),
                  resource_kinds(), now=at(0))
    try:
        call_command("sandbox", "load", "team-ml/ep-1", value)
    except CommandError:
        assert not SimLoad.objects.exists()
    backend.tick(at(10))


@pytest.mark.parametrize("ref", ["team-ml/ep\x001", "team-ml/" + "e" * 100])
def test_sandbox_load_rejects_a_reference_that_is_not_a_namespace_and_workload_name(db, ref):
    # NUL: PostgreSQL DataError; > 63 characters: DataError (varchar(63)) on PostgreSQL.
    with pytest.raises(CommandError):
        call_command("sandbox", "load", ref, "10")
    assert not SimLoad.objects.exists()


@with_quota
@pytest.mark.parametrize("field, value", [
    ("gpus_per_worker", "1_0"),  # int() reads it as 10
    ("workers", "٣"),  # an Arabic-Indic three: int() takes it too
    ("priority", []),  # was taken for "no priority given"
    ("priority", {}),
    ("cpu", 1e-9),  # passed "greater than 0" and rendered as "0" in the manifest
    ("memory_gb", 1e-9),
])
def test_it_rejects_values_that_used_to_pass_as_something_else(api, field, value):
    response = post_run(api, run_payload(**{field: value}))
    assert_field_error(response, field)
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/runs/1.0/logs/", "/api/v1/nothing-here/"])
def test_an_api_url_that_matches_no_route_answers_json(api, path, settings):
    settings.DEBUG = False  # with DEBUG on Django shows its technical 404 page instead
    response = api.get(path)
    assert response.status_code == 404
    assert response.json() == {"errors": {"detail": ["Not found."]}}


def test_a_portal_url_that_matches_no_route_is_still_a_page(client, settings):
    settings.DEBUG = False
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_sandbox_tick_refuses_more_ticks_than_a_command_should_run(db):
    call_command("sandbox", "tick", "--at", "2026-11-22T10:00:00Z")
    with pytest.raises(CommandError, match="larger --step"):
        call_command("sandbox", "tick", "--seconds", str(365 * 24 * 3600), "--step", "1")


@pytest.mark.parametrize("path", ["/api/v1/runs/?team=ml%00research", "/api/v1/endpoints/?state=%00",
                                  "/api/v1/usage/?team=%00", "/api/v1/runs/?ordering=-created_at%00",
                                  "/runs/?team=ml%00research", "/usage/?month=2026-11%00",
                                  "/api/v1/endpoints/1/traffic/?since=2026%00", "/endpoints/1/traffic/?x=%00"])
def test_a_nul_in_a_query_parameter_is_a_400_never_a_500(api, member, path):
    """Security review 4 #11 (fuzz minors): PostgreSQL text cannot hold NUL; refused at the door."""
    api.force_login(member)
    response = api.get(path)
    assert response.status_code == 400, (path, response.status_code)


# -- API keys (docs/api.md "API keys") ---------------------------------------------------------------


@pytest.fixture
def keyed_endpoint(member, team, ep_quota, published):
    from inference import services as endpoint_services
    from tests.inference.conftest import endpoint_payload

    return endpoint_services.create_endpoint(member, team, endpoint_payload())


@pytest.mark.postgres
@pytest.mark.parametrize("body, field", [
    ({"name": "app\x00"}, "name"),  # PostgreSQL text cannot hold NUL
    ({"name": "app", "expires_at": "9999-12-31T23:59:59-10:00"}, "expires_at"),  # past the calendar in UTC
    ({"name": ["app"]}, "name"),
    ({"name": "app", "requests_per_minute": 10**40}, "requests_per_minute"),
])
def test_a_bad_api_key_is_a_400_and_no_key(api, keyed_endpoint, body, field):
    from inference.models import ApiKey

    response = api.post(f"/api/v1/endpoints/{keyed_endpoint.pk}/keys/", body, format="json")
    assert_field_error(response, field)
    assert not ApiKey.objects.exists()


@pytest.mark.postgres
def test_an_api_keys_expiry_beyond_postgresqls_offsets_is_stored_in_utc(api, keyed_endpoint):
    response = api.post(f"/api/v1/endpoints/{keyed_endpoint.pk}/keys/",
                        {"name": "app", "expires_at": "2099-01-01T00:00:00+20:00"}, format="json")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["expires_at"].startswith("2098-12-31T04:00:00")


@pytest.mark.postgres
@pytest.mark.parametrize("path", ["keys/²/", "keys/²/disable/", "keys/usage/?since=2026%00", "keys/usage/?format=%00"])
def test_api_key_routes_answer_odd_ids_and_queries_without_a_500(api, keyed_endpoint, path):
    response = api.get(f"/api/v1/endpoints/{keyed_endpoint.pk}/{path}")
    assert response.status_code in (400, 404, 405) and "errors" in response.json()
