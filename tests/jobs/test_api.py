"""The runs REST API (docs/api.md "Training runs"): create, list, detail, cancel, logs, events, manifest."""

from __future__ import annotations

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from billing.models import QuotaHold
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.models import QueuedRequest
from tests.factories import add_member, make_user
from tests.fakes import pod
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def post_run(client, django_capture_on_commit_callbacks=None, **overrides):
    return client.post("/api/v1/runs/", run_payload(**overrides), format="json")


# -- create ---------------------------------------------------------------------------------------


def test_it_creates_an_admitted_run_and_publishes_its_creation(api, quota, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_run(api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "admitted"
    assert body["resource_kind"] == "Job"
    assert body["team"] == "ml-research"
    assert body["created_by"] == "mia"
    assert body["object_name"] == f"run-{body['id']}"
    assert body["namespace"] == "team-ml-research"
    assert body["queue_position"] is None
    assert body["estimated_cost_per_hour"] == "8.2000"  # 2 × 4.10
    assert body["command"] == ["python", "train.py"]
    assert body["env"] == {"WANDB_MODE": "offline"}
    assert published == [("workloads.tasks.apply_workload", ("run", body["id"]))]
    assert QuotaHold.objects.held().get(ref=f"run:{body['id']}").units == 2


def test_it_names_the_kubernetes_objects_object_name_and_keeps_the_old_name_one_release(api, quota, published):
    body = post_run(api).json()
    assert body["object_name"] == f"run-{body['id']}" and body["cluster"] != body["object_name"]
    assert body["cluster_name"] == body["object_name"]  # deprecated (docs/api.md, Deprecated)


def test_it_names_the_resource_kind_resource_kind_and_keeps_the_old_name_one_release(api, quota, published):
    for workers, resource_kind in ((1, "Job"), (2, "PyTorchJob")):
        body = post_run(api, name=f"w{workers}", workers=workers).json()
        assert body["resource_kind"] == resource_kind
        assert body["kind"] == resource_kind  # deprecated (docs/api.md, Deprecated)
        assert api.get(f"/api/v1/runs/{body['id']}/").json()["resource_kind"] == resource_kind


def test_it_makes_a_pytorchjob_of_a_distributed_run(api, quota, published):
    response = post_run(api, workers=2, gpus_per_worker=4)
    assert response.status_code == 201
    assert response.json()["resource_kind"] == "PyTorchJob"
    assert QuotaHold.objects.held().get(ref=f"run:{response.json()['id']}").units == 8


def test_it_queues_what_does_not_fit_now_with_reason_and_position(api, quota, published):
    assert post_run(api, name="big", gpus_per_worker=8).status_code == 201
    first = post_run(api, name="second", gpus_per_worker=4).json()
    second = post_run(api, name="third", gpus_per_worker=2).json()
    assert first["state"] == "queued"
    assert first["reason"] == "waiting for quota: needs 4× a100-80gb, 8 of 8 in use"
    assert first["queue_position"] == 1
    assert second["queue_position"] == 2
    detail = api.get(f"/api/v1/runs/{second['id']}/").json()
    assert detail["queue_position"] == 2


def test_it_rejects_what_can_never_fit_with_a_field_error_and_writes_nothing(api, quota, published):
    response = post_run(api, gpus_per_worker=8, workers=2)
    assert response.status_code == 400
    assert response.json() == {"errors": {"workers": ["needs 16× a100-80gb, more than the team's limit of 8"]}}
    response = post_run(api, flavor="h100-80gb")
    assert response.status_code == 400
    assert "no quota for h100-80gb" in response.json()["errors"]["flavor"][0]
    response = post_run(api, flavor="l4", gpus_per_worker=2)
    assert response.status_code == 400
    assert "largest node has 1" in response.json()["errors"]["gpus_per_worker"][0]
    assert TrainingRun.objects.count() == 0
    assert QuotaHold.objects.count() == 0
    assert published == []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": "x" * 41}, "name"),
        ({"name": ""}, "name"),
        ({"image": "not a ref"}, "image"),
        ({"image": ""}, "image"),
        ({"command": "python train.py"}, "command"),
        ({"command": []}, "command"),
        ({"command": ["python", 3]}, "command"),
        ({"args": "--epochs 3"}, "args"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"OK": 5}}, "env"),
        ({"env": ["A=b"]}, "env"),
        ({"flavor": "nope"}, "flavor"),
        ({"flavor": ""}, "flavor"),
        ({"gpus_per_worker": 0}, "gpus_per_worker"),
        ({"gpus_per_worker": "two"}, "gpus_per_worker"),
        ({"gpus_per_worker": True}, "gpus_per_worker"),
        ({"workers": 0}, "workers"),
        ({"workers": 1000}, "workers"),
        ({"cpu": -1}, "cpu"),
        ({"cpu": "lots"}, "cpu"),
        ({"memory_gb": 100000}, "memory_gb"),
        ({"shm_gb": 0}, "shm_gb"),
        ({"memory_gb": 8, "shm_gb": 16}, "shm_gb"),
        ({"max_retries": 11}, "max_retries"),
        ({"max_runtime_minutes": 0}, "max_runtime_minutes"),
        ({"priority": "urgent"}, "priority"),
        ({"spot": "maybe"}, "spot"),
        ({"volumes": [{"claim": "data", "mount_path": "relative"}]}, "volumes"),
        ({"volumes": [{"claim": "Bad Claim", "mount_path": "/data"}]}, "volumes"),
        ({"volumes": [{"claim": "data", "mount_path": "/dev/shm"}]}, "volumes"),
        ({"volumes": "data:/data"}, "volumes"),
        ({"surprise": 1}, "non_field_errors"),
    ],
)
def test_it_answers_400_with_field_errors_for_bad_input(api, quota, published, overrides, field):
    response = post_run(api, **overrides)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors, errors
    assert all(isinstance(m, str) and m for m in errors[field])
    assert TrainingRun.objects.count() == 0


def test_it_answers_400_for_a_body_that_is_not_an_object(api, quota):
    response = api.post("/api/v1/runs/", ["a", "list"], format="json")
    assert response.status_code == 400
    assert "non_field_errors" in response.json()["errors"]


def test_it_rejects_a_second_active_run_with_the_same_name(api, quota, published):
    assert post_run(api).status_code == 201
    response = post_run(api)
    assert response.status_code == 400
    assert "already has an active run" in response.json()["errors"]["name"][0]


def test_it_enforces_the_image_registry_allow_list(api, quota, published, settings):
    settings.SLIPWAY_ALLOWED_REGISTRIES = ["registry.example.com"]
    assert post_run(api, name="ok").status_code == 201
    response = post_run(api, name="hub", image="pytorch/pytorch:2.4.0")
    assert response.status_code == 400
    assert "allowed registry" in response.json()["errors"]["image"][0]


def test_it_answers_403_to_viewers_and_404_for_other_teams(api_client_for, viewer, outsider, quota):
    assert post_run(api_client_for(viewer)).status_code == 403
    response = post_run(api_client_for(outsider))
    assert response.status_code == 404
    assert TrainingRun.objects.count() == 0


def test_it_answers_401_without_credentials(quota):
    assert APIClient().post("/api/v1/runs/", run_payload(), format="json").status_code == 401
    assert APIClient().get("/api/v1/runs/").status_code == 401


def test_it_replays_the_first_response_for_a_repeated_idempotency_key(api, quota, published):
    first = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="abc-123")
    again = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="abc-123")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert TrainingRun.objects.count() == 1
    other = api.post("/api/v1/runs/", run_payload(name="other"), format="json", HTTP_IDEMPOTENCY_KEY="xyz")
    assert other.status_code == 201
    assert TrainingRun.objects.count() == 2


def test_a_key_reused_for_another_body_or_endpoint_is_a_400_not_the_first_response(api, quota, published):
    first = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="once")
    assert first.status_code == 201
    # The same request in another key order is the same request: replayed.
    reordered = dict(reversed(list(run_payload().items())))
    assert api.post("/api/v1/runs/", reordered, format="json", HTTP_IDEMPOTENCY_KEY="once")["Idempotent-Replayed"]
    other_body = api.post("/api/v1/runs/", run_payload(name="other"), format="json", HTTP_IDEMPOTENCY_KEY="once")
    other_path = api.post(f"/api/v1/runs/{first.json()['id']}/cancel/", HTTP_IDEMPOTENCY_KEY="once")
    for answer in (other_body, other_path):
        assert answer.status_code == 400  # bad input, as docs/api.md says (security review 4: it was a 422)
        assert "another request" in answer.json()["errors"]["Idempotency-Key"][0]
        assert "Idempotent-Replayed" not in answer
    assert TrainingRun.objects.count() == 1
    assert TrainingRun.objects.get().state != "cancelled"


def test_it_frees_an_idempotency_key_after_a_failed_request(api, quota, published):
    bad = api.post("/api/v1/runs/", run_payload(name="BAD"), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert bad.status_code == 400
    good = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert good.status_code == 201


# -- list and detail ------------------------------------------------------------------------------


def _make_runs(user, team, count, **overrides):
    from jobs.services import submit_run

    return [submit_run(user, team, {**run_payload(**overrides), "name": f"r{i}-{user.username}"}) for i in range(count)]


def test_it_lists_the_callers_runs_newest_first_with_filters(api, member, team, other_team, quota, published):
    dora = make_user("dora")
    add_member(team, dora)
    runs = _make_runs(member, team, 2, gpus_per_worker=1) + _make_runs(dora, team, 1, gpus_per_worker=1)
    body = api.get("/api/v1/runs/").json()
    assert body["count"] == 3
    assert [r["id"] for r in body["results"]] == [r.pk for r in reversed(runs)]
    assert api.get("/api/v1/runs/?created_by=dora").json()["count"] == 1
    assert api.get("/api/v1/runs/?state=admitted").json()["count"] == 3
    assert api.get("/api/v1/runs/?state=running").json()["count"] == 0
    assert api.get("/api/v1/runs/?team=vision").status_code == 404  # another team: as if it did not exist
    assert api.get("/api/v1/runs/?state=bogus").status_code == 400
    assert api.get("/api/v1/runs/?state=").status_code == 400  # the schema's enum has no empty state


def test_it_says_which_set_of_states_a_run_is_in_and_lists_by_set(api, member, team, quota, published):
    """``is_final``, ``holds_quota`` and ``?state=active|holding|unfinished``: the glossary's sets, so that a client
    (the CLI) keeps no list of a kind's states of its own."""
    kept, ended = _make_runs(member, team, 2, gpus_per_worker=1)
    assert api.post(f"/api/v1/runs/{ended.pk}/cancel/").status_code == 202
    body = {r["id"]: r for r in api.get("/api/v1/runs/").json()["results"]}
    assert (body[kept.pk]["is_final"], body[kept.pk]["holds_quota"]) == (False, True)
    assert (body[ended.pk]["is_final"], body[ended.pk]["holds_quota"]) == (True, False)
    assert api.get(f"/api/v1/runs/{ended.pk}/").json()["is_final"] is True
    for name in ("active", "holding", "unfinished"):
        assert [r["id"] for r in api.get(f"/api/v1/runs/?state={name}").json()["results"]] == [kept.pk], name
    refused = api.get("/api/v1/runs/?state=live")
    assert refused.status_code == 400
    assert refused.json()["errors"]["state"][0].endswith("cancelled, pruned, active, holding, unfinished.")


def test_it_hides_other_teams_runs_from_list_and_detail(api_client_for, member, outsider, team, quota, published):
    run = _make_runs(member, team, 1)[0]
    client = api_client_for(outsider)
    assert client.get("/api/v1/runs/").json()["count"] == 0
    for suffix in ("", "logs/", "events/", "manifest/"):
        assert client.get(f"/api/v1/runs/{run.pk}/{suffix}").status_code == 404
    assert client.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 404
    assert api_client_for(member).get("/api/v1/runs/abc/").status_code == 404


def test_it_paginates_with_page_size(api, member, team, quota, published):
    _make_runs(member, team, 5, gpus_per_worker=1)
    body = api.get("/api/v1/runs/?page_size=2").json()
    assert body["count"] == 5
    assert len(body["results"]) == 2
    assert body["next"] is not None


@pytest.mark.parametrize("count", [9, 30])
def test_it_lists_in_a_constant_number_of_queries(api, member, team, quota, published, count,
                                                  django_assert_num_queries):
    # A mix of admitted and queued runs: queue positions and start estimates cost a constant
    # number of queries per team with queued work on the page.
    _make_runs(member, team, count, gpus_per_worker=1)
    # token (1) + its first last-used write (1) + count (1) + page (1) + the page's quota holds, their
    # money (1: Workload.segment) + queue positions (1) +
    # start estimates: queue, holds, their runs, quotas, finished runs' durations, the
    # platform's limit use (6: workloads.estimates.forecast.platform_limit_spans, one per kind with a limit),
    # whether an elastic pool offers the queued flavors (1: workloads.estimates.provisioning.Pools; none here) +
    # what holds queued work beyond its quota: the budget, the month's spend (ledger rows, open
    # segments: billing.ledger.month_spend), committed money (4) + the clusters, for work that waits for one
    # (quotas.facts.ClusterWaits) (1) + reserved windows: the team's windows not over (quotas.facts.Windows), the
    # flavors any window holds (ClusterWaits, for work a window may keep off every cluster) (2) +
    # the names of secret env (1) + the clusters and their
    # prices, for the one price of each row (billing.pricing.PriceBook, shared by the page) (2). Runs that
    # started cost one more, for their progress (jobs.metrics.progress_answers), one more for their GPUs now
    # (workloads.telemetry.series.now_figures), and running work one more for its progress ETAs: none has
    # started here
    with django_assert_num_queries(23):
        response = api.get("/api/v1/runs/")
    assert response.json()["count"] == count


# -- cancel, logs, events, manifest ---------------------------------------------------------------


def test_it_cancels_a_run_releases_quota_and_deletes_its_objects(api, member, team, quota, published,
                                                                 django_capture_on_commit_callbacks):
    run = _make_runs(member, team, 1)[0]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "cancelled"
    assert response.json()["reason"] == "cancelled by mia"
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    assert ("workloads.tasks.delete_workload", ("run", run.pk)) in published
    again = api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert again.status_code == 409
    assert "already finished" in again.json()["errors"]["detail"][0]


def test_it_admits_the_next_queued_run_when_one_is_cancelled(api, member, team, quota, published):
    big = post_run(api, name="big", gpus_per_worker=8).json()
    waiting = post_run(api, name="waiting", gpus_per_worker=4).json()
    assert waiting["state"] == "queued"
    api.post(f"/api/v1/runs/{big['id']}/cancel/")
    assert api.get(f"/api/v1/runs/{waiting['id']}/").json()["state"] == "admitted"
    assert not QueuedRequest.objects.exists()


def test_it_forbids_viewers_to_cancel(api_client_for, member, viewer, team, quota, published):
    run = _make_runs(member, team, 1)[0]
    assert api_client_for(viewer).post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED


def test_it_renders_the_manifest_as_json_and_yaml(api, member, team, quota, published):
    run = _make_runs(member, team, 1)[0]
    objects = api.get(f"/api/v1/runs/{run.pk}/manifest/").json()
    assert [o["kind"] for o in objects] == ["Job"]
    assert objects[0]["metadata"]["name"] == run.object_name
    response = api.get(f"/api/v1/runs/{run.pk}/manifest/?format=yaml")
    assert response["Content-Type"].startswith("application/yaml")
    # One YAML document, a Kubernetes List: any YAML reader takes it whole, kubectl applies it.
    assert yaml.safe_load(response.content) == {"apiVersion": "v1", "kind": "List", "items": objects}
    assert api.get(f"/api/v1/runs/{run.pk}/manifest/?format=xml").status_code == 400


def test_it_serves_logs_and_events_from_the_cluster(api, member, team, quota, published, fake_backend):
    run = _make_runs(member, team, 1)[0]
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING)
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2)]
    name = f"{run.object_name}-abcde"
    assert api.get(f"/api/v1/runs/{run.pk}/logs/?tail=2").json() == {
        "lines": ["log line 1", "log line 2"], "pod": name, "pods": [{"name": name, "label": name}], "attempt": 1,
        "saved_at": None}
    events = api.get(f"/api/v1/runs/{run.pk}/events/").json()
    assert events[0]["reason"] == "Scheduled"
    assert api.get(f"/api/v1/runs/{run.pk}/logs/?tail=0").status_code == 400
    assert api.get(f"/api/v1/runs/{run.pk}/logs/?tail=x").status_code == 400


@pytest.mark.postgres  # PostgreSQL's statements (data-modifying CTEs) and locks
def test_a_submission_reads_nothing_back_for_its_response_and_writes_under_the_teams_lock_once(
        api, member, team, quota, published):
    # The response says what admission decided (borrowed units included) from the run as written:
    # after the admission's writes, the only statement left is the transaction's end. Under the
    # team's lock: the lock, the facts, the month's open segments (the team has a budget), then
    # the hold, the run's state move and its audit row as one statement (PostgreSQL's
    # data-modifying CTEs), then the end.
    api.get("/api/v1/flavors/")  # the token's first last-used write is behind us
    with CaptureQueriesContext(connection) as ctx:
        response = api.post("/api/v1/runs/", run_payload(name="fresh", gpus_per_worker=1), format="json")
    assert response.status_code == 201 and response.json()["borrowed_units"] == 0
    statements = [query["sql"] for query in ctx.captured_queries]
    lock = next(i for i, sql in enumerate(statements) if sql.endswith("FOR NO KEY UPDATE"))
    held = statements[lock + 1:]
    assert [sql.split()[0] for sql in held] == ["SELECT", "SELECT", "WITH", "RELEASE"], held
    assert all(f'INSERT INTO "{table}"' in held[2] for table in ("quotas_quotahold", "portal_auditevent"))
    assert 'UPDATE "workloads_workload" SET' in held[2]  # the run's state move, on the one table
