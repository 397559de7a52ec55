"""The run page's logs, events and waiting reasons: the pod/attempt picker, the full-log
download, the events that refresh with the state, and the scheduler's words behind a capacity
reason. The cluster is the scriptable fake (tests/fakes.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml
from django.utils import timezone

from cluster.backends.base import ClusterEvent
from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from tests.cluster.samples import pod, running_container, terminated
from tests.jobs.conftest import submit_run_as

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
CAPACITY = "waiting for capacity: needs 4\u00d7 a100-80gb on one node; the largest free block is 2 (node a100-1)"
RAW = "0/8 nodes are available: 6 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint."


def on_cluster(run: TrainingRun, state: str = RunState.RUNNING, **fields) -> TrainingRun:
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(state=state, applied_at=now, started_at=now, **fields)
    run.refresh_from_db()
    return run


def pytorch_pods(run: TrainingRun) -> list[dict]:
    def replica(role: str, index: int) -> dict:
        return pod(f"{run.object_name}-{role}-{index}", run.object_name, namespace=run.namespace, extra_labels={
            "training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(index)})

    return [replica("master", 0), replica("worker", 0), replica("worker", 1)]


def attempts(run: TrainingRun) -> list[dict]:
    job = {"batch.kubernetes.io/job-name": run.object_name}
    first = pod(f"{run.object_name}-bcdfg", run.object_name, namespace=run.namespace, phase="Failed",
                container_statuses=[terminated("Error", 1)], extra_labels=job)
    second = pod(f"{run.object_name}-hjklm", run.object_name, namespace=run.namespace,
                 container_statuses=[running_container()], extra_labels=job)
    second["metadata"]["creationTimestamp"] = "2026-01-01T10:01:00Z"
    return [first, second]


@pytest.fixture
def distributed(member, team, quota, published, fake_backend):
    run = on_cluster(submit_run_as(member, team, workers=3))
    fake_backend.pod_lists[(run.namespace, run.object_name)] = pytorch_pods(run)
    fake_backend.log_lines[f"{run.object_name}-master-0"] = [f"master step {i}" for i in range(500)]
    fake_backend.log_lines[f"{run.object_name}-worker-1"] = ["worker 1 says hello"]
    return run


# -- the pod picker ------------------------------------------------------------------------------


def test_it_offers_every_pod_of_a_pytorchjob_and_shows_the_master_first(client, member, distributed):
    client.force_login(member)
    html = client.get(f"/runs/{distributed.pk}/").content.decode()
    name = distributed.object_name
    assert f'<option value="{name}-master-0" selected>master-0</option>' in html
    assert f'<option value="{name}-worker-0">worker-0</option>' in html
    assert f'<option value="{name}-worker-1">worker-1</option>' in html
    # The newest lines at the bottom: the tail, oldest first.
    assert html.index("master step 300") < html.index("master step 499")
    assert "master step 299" not in html  # a tail of 200 lines on the page
    assert f'href="/runs/{distributed.pk}/logs/download/?pod={name}-master-0"' in html
    assert 'src="/static/js/logs.js"' in html and "data-log-follow" in html and "data-log-box" in html


def test_it_shows_the_picked_pod_and_keeps_polling_it(client, member, distributed):
    client.force_login(member)
    name = distributed.object_name
    response = client.get(f"/runs/{distributed.pk}/logs/?pod={name}-worker-1", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert "worker 1 says hello" in html and "master step" not in html
    assert f'hx-get="/runs/{distributed.pk}/logs/?pod={name}-worker-1"' in html
    # The detail page takes ?pod= too (the picker's form works without JavaScript).
    assert "worker 1 says hello" in client.get(f"/runs/{distributed.pk}/?pod={name}-worker-1").content.decode()


@pytest.mark.parametrize("pod_name", ["nope", "{other}", "../../etc/passwd", "x" * 300, "\u00e9"])
def test_it_answers_404_for_a_pod_that_is_not_the_runs(client, member, team, distributed, fake_backend, pod_name):
    other = on_cluster(submit_run_as(member, team, name="other-run"))
    fake_backend.pod_lists[(other.namespace, other.object_name)] = pytorch_pods(other)
    pod_name = pod_name.format(other=f"{other.object_name}-master-0")
    client.force_login(member)
    for path in ("/", "/logs/", "/logs/download/"):
        response = client.get(f"/runs/{distributed.pk}{path}", {"pod": pod_name})
        assert response.status_code == 404, path


def test_it_offers_every_attempt_of_a_retried_job_newest_first(client, member, team, quota, published,
                                                               fake_backend):
    run = on_cluster(submit_run_as(member, team), reason="attempt 2 of 3; attempt 1 ended: Error (exit 1)")
    fake_backend.pod_lists[(run.namespace, run.object_name)] = attempts(run)
    fake_backend.log_lines[f"{run.object_name}-bcdfg"] = ["RuntimeError: NCCL error"]
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "attempt 2 of 3; attempt 1 ended: Error (exit 1)" in html
    assert html.index("attempt 2 (running)") < html.index("attempt 1 (Error (exit 1))")
    earlier = client.get(f"/runs/{run.pk}/logs/?pod={run.object_name}-bcdfg", **HTMX).content.decode()
    assert "RuntimeError: NCCL error" in earlier


def test_it_shows_no_picker_and_no_lines_before_the_run_is_on_the_cluster(client, member, team, quota, published,
                                                                         fake_backend):
    run = submit_run_as(member, team)
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<label id="log-picker" data-log-picker hidden>' in html and "No log lines yet." in html
    assert client.get(f"/runs/{run.pk}/logs/", {"pod": "anything"}).status_code == 404


# -- download ------------------------------------------------------------------------------------


def test_it_downloads_the_whole_log_as_a_text_file(client, member, distributed):
    client.force_login(member)
    name = distributed.object_name
    response = client.get(f"/runs/{distributed.pk}/logs/download/?pod={name}-master-0")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{name}-master-0.log"'
    body = response.content.decode()
    assert body.splitlines() == [f"master step {i}" for i in range(500)]  # all of it, not the page's tail
    assert body.endswith("master step 499\n")


def test_it_downloads_the_default_pod_without_a_pick(client, member, distributed):
    client.force_login(member)
    response = client.get(f"/runs/{distributed.pk}/logs/download/")
    assert response["Content-Disposition"] == f'attachment; filename="{distributed.object_name}-master-0.log"'


# -- the API's download: the same file ---------------------------------------------------------


def test_the_api_downloads_the_whole_log_as_the_page_does(client, api, member, team, distributed, fake_backend):
    name = distributed.object_name
    client.force_login(member)
    for query in ({"pod": f"{name}-worker-1"}, {}):
        response = api.get(f"/api/v1/runs/{distributed.pk}/logs/download/", query)
        page = client.get(f"/runs/{distributed.pk}/logs/download/", query)
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response.content == page.content and response["Content-Disposition"] == page["Content-Disposition"]
    assert response.content.decode().splitlines() == [f"master step {i}" for i in range(500)]  # not the 200 tail
    other = on_cluster(submit_run_as(member, team, name="other-run"))
    fake_backend.pod_lists[(other.namespace, other.object_name)] = pytorch_pods(other)
    for pod_name in (f"{other.object_name}-master-0", "nope"):
        response = api.get(f"/api/v1/runs/{distributed.pk}/logs/download/", {"pod": pod_name})
        assert response.status_code == 404 and "errors" in response.json()


def test_the_api_download_is_for_the_team_only_and_staff_read_it(api_client_for, outsider, staff, distributed):
    path = f"/api/v1/runs/{distributed.pk}/logs/download/"
    assert api_client_for(outsider).get(path).status_code == 404
    assert api_client_for(staff).get(path).content.decode().endswith("master step 499\n")


def test_the_schema_declares_the_download_as_text(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    for kind in ("runs", "endpoints"):
        operation = schema["paths"][f"/api/v1/{kind}/{{id}}/logs/download/"]["get"]
        assert set(operation["responses"]["200"]["content"]) == {"text/plain"}
        assert [p["name"] for p in operation["parameters"] if p["in"] == "query"] == ["attempt", "pod"]


# -- who may read --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/logs/", "/logs/download/", "/events/"])
def test_it_lets_viewers_read_but_not_post(client, viewer, distributed, path):
    client.force_login(viewer)
    assert client.get(f"/runs/{distributed.pk}{path}").status_code == 200
    assert client.post(f"/runs/{distributed.pk}{path}").status_code == 405


@pytest.mark.parametrize("path", ["/logs/", "/logs/download/", "/events/"])
def test_it_hides_another_teams_logs_and_events(client, outsider, distributed, path):
    client.force_login(outsider)
    name = distributed.object_name
    assert client.get(f"/runs/{distributed.pk}{path}").status_code == 404
    assert client.get(f"/runs/{distributed.pk}{path}", {"pod": f"{name}-master-0"}).status_code == 404


@pytest.mark.parametrize("path", ["/logs/download/", "/events/"])
def test_it_asks_anonymous_users_to_log_in(client, distributed, path):
    response = client.get(f"/runs/{distributed.pk}{path}")
    assert response.status_code == 302 and "/login/" in response["Location"]


# -- events refresh with the state ---------------------------------------------------------------


def test_it_refreshes_events_while_active_and_stops_once_final(client, member, distributed, fake_backend):
    fake_backend.warnings[(distributed.namespace, distributed.object_name)].append(
        ClusterEvent("Warning", "BackOff", "Back-off restarting failed container", "Pod/x", "2026-11-22T10:01:00Z"))
    client.force_login(member)
    response = client.get(f"/runs/{distributed.pk}/events/", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert "Back-off restarting failed container" in html and 'hx-trigger="every 3s"' in html
    on_cluster(distributed, RunState.FAILED, finished_at=timezone.now())
    response = client.get(f"/runs/{distributed.pk}/events/", **HTMX)
    assert response.status_code == 286 and "hx-trigger" not in response.content.decode()
    assert "Back-off restarting failed container" in response.content.decode()  # the last events still show


def test_it_polls_events_on_the_page_of_an_active_run(client, member, distributed):
    client.force_login(member)
    html = client.get(f"/runs/{distributed.pk}/").content.decode()
    assert f'hx-get="/runs/{distributed.pk}/events/"' in html


# -- why it waits --------------------------------------------------------------------------------


def test_it_explains_a_capacity_wait_in_words_with_the_schedulers_message_behind_it(
        client, member, team, quota, published, fake_backend):
    run = on_cluster(submit_run_as(member, team), RunState.PENDING, reason=CAPACITY,
                     reason_code="waiting_for_capacity")
    fake_backend.warnings[(run.namespace, run.object_name)].append(
        ClusterEvent("Warning", "FailedScheduling", RAW, f"Pod/{run.object_name}-abcde", "2026-11-22T10:00:01Z"))
    client.force_login(member)
    for response in (client.get(f"/runs/{run.pk}/"), client.get(f"/runs/{run.pk}/", **HTMX)):
        html = response.content.decode()
        assert f"<strong>Reason:</strong> {CAPACITY}" in html
        assert "<summary>scheduler message</summary>" in html and RAW in html


def test_it_asks_the_cluster_for_no_scheduler_message_unless_waiting_for_capacity(
        client, member, team, quota, published, fake_backend):
    run = on_cluster(submit_run_as(member, team), RunState.RUNNING, reason="")
    client.force_login(member)
    fake_backend.calls.clear()
    html = client.get(f"/runs/{run.pk}/", **HTMX).content.decode()
    assert "scheduler message" not in html and "events" not in fake_backend.calls


def test_it_explains_a_budget_wait_in_words(client, member, team, flavors, published):
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("10"))
    run = submit_run_as(member, team, max_runtime_minutes=120)  # 2 A100s for 2 h: est. 16.40 USD
    assert run.state == RunState.QUEUED
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "<strong>Reason:</strong> waiting for budget: est. 16.40 would exceed the 10.00 USD left this month" in html


# -- the API reads the same logs -----------------------------------------------------------------


def test_the_api_reads_any_pods_log_and_answers_404_for_others(api, distributed):
    name = distributed.object_name
    body = api.get(f"/api/v1/runs/{distributed.pk}/logs/", {"tail": 2}).json()
    assert body["lines"] == ["master step 498", "master step 499"] and body["pod"] == f"{name}-master-0"
    assert [p["label"] for p in body["pods"]] == ["master-0", "worker-0", "worker-1"]
    body = api.get(f"/api/v1/runs/{distributed.pk}/logs/", {"pod": f"{name}-worker-1"}).json()
    assert body["lines"] == ["worker 1 says hello"]
    assert api.get(f"/api/v1/runs/{distributed.pk}/logs/", {"pod": "nope"}).status_code == 404


def test_a_poll_brings_a_new_attempt_into_the_picker(client, member, team, quota, published, fake_backend):
    run = on_cluster(submit_run_as(member, team))
    first, second = attempts(run)
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [first]
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "attempt 1 (Error (exit 1))" in page and "hx-swap-oob" not in page  # the page itself swaps nothing
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [first, second]
    html = client.get(f"/runs/{run.pk}/logs/", **HTMX).content.decode()
    assert 'id="log-picker" data-log-picker hx-swap-oob="true"' in html
    # Nothing picked: the poll shows the newest attempt, and the picker offers both.
    assert f'<option value="{second["metadata"]["name"]}" selected>attempt 2 (running)</option>' in html
    assert "attempt 1 (Error (exit 1))" in html


def test_after_a_cancel_the_logs_card_says_how_the_run_ended_not_that_it_runs(client, member, team, quota, published,
                                                                              fake_backend):
    run = on_cluster(submit_run_as(member, team))
    first, second = attempts(run)  # the second attempt's pod still says Running: its deletion is under way
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [first, second]
    client.force_login(member)
    assert "refreshing while it is active" in client.get(f"/runs/{run.pk}/").content.decode()
    services.cancel_run(member, run)
    poll = client.get(f"/runs/{run.pk}/logs/", **HTMX)
    html = poll.content.decode()
    assert poll.status_code == 286  # the last poll: what it swaps in must be the final word
    assert f'<option value="{second["metadata"]["name"]}" selected>attempt 2 (cancelled)</option>' in html
    assert "(running)" not in html and "attempt 1 (Error (exit 1))" in html
    assert '<span class="muted small" id="log-hint" hx-swap-oob="true">tail</span>' in html
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "refreshing while it is active" not in page and "(running)" not in page
