"""Each attempt keeps its logs and placement (issue 34.4): ``?attempt=`` on the run page, its logs box,
its download and the API, with their errors; what a preemption saves before the pods go, and what
the requeue records of the attempt. The cluster is the scriptable fake (tests/fakes.py), which
deletes pods (and so their logs) at once, as a real cluster does once the grace is over."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.errors import Transient
from core.formatting import format_duration
from fleet import services as fleet
from jobs import services
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.queue import queue_positions
from tests.fakes import pod
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from workloads import attempts, lifecycle
from workloads.cycle.placement import KEPT_PLACEMENT
from workloads.cycle.preemption import PREEMPTED_LABEL
from workloads.models import Attempt, ReasonCode
from workloads.registry import kind_for

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def running(member, team, fake_backend, lines: list[str]) -> TrainingRun:
    """A run placed on the default cluster and running there, its pod logging ``lines``."""
    run = services.submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    cluster = fleet.default_cluster()
    started = timezone.now() - timedelta(minutes=30)
    TrainingRun.objects.filter(pk=run.pk).update(
        state=RunState.RUNNING, applied_at=started, started_at=started, attempt_started_at=started, cluster=cluster,
        placement_reason=f"{cluster.name}: most free a100-80gb at 4.10/h (8)", placed_at=started)
    run.refresh_from_db()
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2)]
    fake_backend.log_lines[f"{run.object_name}-abcde"] = lines
    return run


def preempt_and_requeue(run: TrainingRun, fake_backend) -> TrainingRun:
    """What a preemption does to ``run``: its logs saved, its pods deleted, then queued again."""
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(preempting_since=now, reason_code=ReasonCode.PREEMPTING)
    run.refresh_from_db()
    attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, now)
    fake_backend.pod_lists.pop((run.namespace, run.object_name))  # the pods and their logs are gone
    assert lifecycle.requeue(kind_for("run"), run, now)
    return TrainingRun.objects.get(pk=run.pk)


@pytest.fixture
def requeued(member, team, quota, published, fake_backend) -> TrainingRun:
    run = running(member, team, fake_backend, [f"epoch 1 step {i}" for i in range(1500)])
    return preempt_and_requeue(run, fake_backend)


# -- what is kept --------------------------------------------------------------------------------


def test_the_requeue_keeps_the_attempts_placement_and_the_next_one_says_why_it_stays(requeued):
    attempt = Attempt.objects.get(ref=requeued.ref, number=1)
    cluster = fleet.default_cluster()
    assert (attempt.cluster_id, attempt.placement_reason) == (cluster.pk, f"{cluster.name}: most free a100-80gb at 4.10/h (8)")
    assert attempt.started_at is not None and attempt.stopped_at is not None and attempt.ended_at is not None
    assert attempt.end_reason_code == ReasonCode.PREEMPTED
    # The current attempt (2) stays where attempt 1 ran, and its reason says so, not attempt 1's figures.
    assert (requeued.attempt, requeued.cluster_id, requeued.attempt_started_at) == (2, cluster.pk, None)
    assert requeued.placement_reason == KEPT_PLACEMENT.format(cluster=cluster.name, attempt=1, noun="run")


def test_a_preemption_keeps_the_tail_of_each_pods_log(requeued):
    saved = Attempt.objects.get(ref=requeued.ref, number=1).logs
    assert [(s["pod"], s["label"]) for s in saved] == [(f"{requeued.object_name}-abcde", f"{requeued.object_name}-abcde")]
    assert len(saved[0]["lines"]) == attempts.SAVED_LINES and saved[0]["lines"][-1] == "epoch 1 step 1499"


def test_a_later_read_keeps_what_an_earlier_one_saved_of_a_pod_gone_since(member, team, quota, published,
                                                                           fake_backend):
    run = running(member, team, fake_backend, ["first words"])
    now = timezone.now()
    assert attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, now)
    second = pod(run.object_name, "Running", 2)
    second["metadata"]["name"] = f"{run.object_name}-1"
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [second]
    fake_backend.log_lines[f"{run.object_name}-1"] = ["other pod"]
    assert attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, now)
    assert [s["lines"] for s in Attempt.objects.get(ref=run.ref, number=1).logs] == [["other pod"], ["first words"]]
    # A cluster that does not answer keeps what was saved.
    fake_backend.pod_lists.clear()
    assert not attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, now)
    assert len(Attempt.objects.get(ref=run.ref, number=1).logs) == 2


def test_a_cluster_that_fails_the_read_loses_nothing_already_saved(member, team, quota, published, fake_backend,
                                                                   monkeypatch):
    run = running(member, team, fake_backend, ["kept"])
    assert attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, timezone.now())

    def unreachable(address):
        raise Transient("connection refused")

    monkeypatch.setattr(fake_backend, "pods", unreachable)
    assert not attempts.save_logs(run, fake_backend, PREEMPTED_LABEL, timezone.now())
    assert Attempt.objects.get(ref=run.ref, number=1).logs[0]["lines"] == ["kept"]


def test_a_run_taken_off_a_lost_cluster_records_its_attempt_without_logs(member, team, quota, published,
                                                                         fake_backend):
    run = running(member, team, fake_backend, ["never read"])
    cluster = run.cluster_id
    assert lifecycle.requeue(kind_for("run"), run, timezone.now(), reason="cluster default unreachable",
                             code=ReasonCode.CLUSTER_LOST, place_again=True)
    attempt = Attempt.objects.get(ref=run.ref, number=1)
    assert (attempt.cluster_id, attempt.end_reason_code, attempt.logs, attempt.stopped_at) == (
        cluster, ReasonCode.CLUSTER_LOST, [], None)
    run.refresh_from_db()
    assert (run.cluster_id, run.placement_reason) == (None, "")


# -- ?attempt= on the page, its box, its download and the API ------------------------------------------


def test_the_page_shows_attempt_one_saved_lines_and_links_each_attempt(client, member, requeued):
    client.force_login(member)
    html = client.get(f"/runs/{requeued.pk}/?attempt=1").content.decode()
    assert "epoch 1 step 1499" in html and "epoch 1 step 1299" not in html  # the page's tail of 200
    assert f'<a href="/runs/{requeued.pk}/?attempt=1#logs" aria-current="true" class="shown">attempt 1 (preempted)' in html
    assert '<input type="hidden" name="attempt" value="1">' in html
    current = client.get(f"/runs/{requeued.pk}/").content.decode()
    assert "epoch 1 step 1499" not in current and "No log lines yet." in current
    # The box (the pod picker's htmx target) and the download take ?attempt= too.
    box = client.get(f"/runs/{requeued.pk}/logs/?attempt=1", **HTMX)
    assert box.status_code == 200 and "epoch 1 step 1499" in box.content.decode()
    download = client.get(f"/runs/{requeued.pk}/logs/download/?attempt=1")
    assert download.content.decode().splitlines()[-1] == "epoch 1 step 1499"
    assert download["Content-Disposition"] == f'attachment; filename="{requeued.object_name}-abcde-attempt-1.log"'


def test_a_first_attempt_has_no_attempt_picker(client, member, team, quota, published, fake_backend):
    run = running(member, team, fake_backend, ["hello"])
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<nav class="attempt-picker" id="attempt-picker" aria-label="Attempts" hidden>' in html
    assert "?attempt=" not in html and 'id="attempts"' not in html


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "1.5", "\u00b2", " 1"])
def test_the_api_answers_400_with_a_field_error_for_a_malformed_attempt(api, requeued, raw):
    for path in ("logs/", "logs/download/"):
        response = api.get(f"/api/v1/runs/{requeued.pk}/{path}", {"attempt": raw})
        assert response.status_code == 400, (path, raw)
        assert response.json() == {"errors": {"attempt": ["Must be a whole number from 1 to 2 (the current attempt)."]}}


def test_the_api_answers_404_for_an_attempt_the_run_never_had(api, requeued):
    for path in ("logs/", "logs/download/"):
        response = api.get(f"/api/v1/runs/{requeued.pk}/{path}", {"attempt": "3"})
        assert response.status_code == 404, path
        assert response.json() == {"errors": {"detail": ["No attempt 3: its attempts are 1 to 2."]}}
    missing_pod = api.get(f"/api/v1/runs/{requeued.pk}/logs/", {"attempt": "1", "pod": "nope"})
    assert missing_pod.status_code == 404 and missing_pod.json() == {"errors": {"detail": ["No such pod."]}}


@pytest.mark.parametrize("digits", [25, 4400])
def test_an_attempt_of_more_digits_than_int_converts_is_one_the_run_never_had(api, client, member, requeued, digits):
    # int() refuses over 4300 digits with a ValueError, which attempt_of's callers took for its own: a 400 (the API) and
    # a page whose words were Python's ("Exceeds the limit (4300 digits) for integer string conversion…").
    raw = "9" * digits
    for path in ("logs/", "logs/download/"):
        response = api.get(f"/api/v1/runs/{requeued.pk}/{path}", {"attempt": raw})
        assert response.status_code == 404, path
        named = raw if digits <= 20 else raw[:20] + "…"  # the words repeated all 4,400 digits
        assert response.json() == {"errors": {"detail": [f"No attempt {named}: its attempts are 1 to 2."]}}
    client.force_login(member)
    assert client.get(f"/runs/{requeued.pk}/", {"attempt": raw}).status_code == 404


def test_the_api_reads_an_earlier_attempt_and_names_the_one_it_read(api, requeued):
    body = api.get(f"/api/v1/runs/{requeued.pk}/logs/", {"attempt": "1", "tail": "3"}).json()
    assert body["attempt"] == 1 and body["saved_at"] is not None
    assert body["lines"] == ["epoch 1 step 1497", "epoch 1 step 1498", "epoch 1 step 1499"]
    assert body["pods"] == [{"name": f"{requeued.object_name}-abcde", "label": f"{requeued.object_name}-abcde"}]
    assert api.get(f"/api/v1/runs/{requeued.pk}/logs/", {"attempt": "2"}).json()["attempt"] == 2


def test_the_pages_answer_400_and_404_for_a_bad_attempt(client, member, requeued):
    client.force_login(member)
    for path in ("", "logs/", "logs/download/"):
        bad = client.get(f"/runs/{requeued.pk}/{path}", {"attempt": "x"})
        assert bad.status_code == 400, path
        missing = client.get(f"/runs/{requeued.pk}/{path}", {"attempt": "7"})
        assert missing.status_code == 404, path
    page = client.get(f"/runs/{requeued.pk}/", {"attempt": "x"}).content.decode()
    assert "attempt: Must be a whole number from 1 to 2 (the current attempt)." in page


def test_an_outsider_reads_no_attempt(api_client_for, outsider, requeued):
    assert api_client_for(outsider).get(f"/api/v1/runs/{requeued.pk}/logs/", {"attempt": "1"}).status_code == 404


def test_an_endpoint_has_only_its_first_attempt(api, ep_quota, fake_backend, published):
    created = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload()}, format="json")
    assert created.status_code == 201, created.content
    assert api.get(f"/api/v1/endpoints/{created.json()['id']}/logs/", {"attempt": "2"}).json() == {
        "errors": {"detail": ["No attempt 2: it has had only attempt 1."]}}


def test_admission_requeue_keeps_queue_order(requeued):
    """The requeue still queues the run at its old place (nothing of the attempt record moved it)."""
    assert queue_positions(requeued.team) == {requeued.ref: 1}


def test_the_api_lists_earlier_attempts_with_their_placement(api, requeued):
    cluster = fleet.default_cluster()
    [first] = api.get(f"/api/v1/runs/{requeued.pk}/attempts/").json()
    assert (first["number"], first["cluster"], first["placement_reason"], first["ended"]) == (
        1, cluster.name, f"{cluster.name}: most free a100-80gb at 4.10/h (8)", "preempted")
    assert first["started_at"] and first["stopped_at"] and first["ended_at"] and first["logs_saved_at"]
    # The current attempt is the run's own fields.
    body = api.get(f"/api/v1/runs/{requeued.pk}/").json()
    assert (body["attempt"], body["placement_reason"]) == (2, KEPT_PLACEMENT.format(cluster=cluster.name, attempt=1,
                                                                                   noun="run"))


def test_a_first_attempt_lists_no_earlier_attempts(api, member, team, quota, published, fake_backend):
    run = running(member, team, fake_backend, ["hello"])
    assert api.get(f"/api/v1/runs/{run.pk}/attempts/").json() == []


# -- the runs list says the same as the page -----------------------------------------------------


def test_the_runs_list_does_not_call_a_run_queued_again_running(client, member, requeued):
    client.force_login(member)
    assert f'<span id="run-{requeued.pk}-ran">—</span>' in client.get("/runs/").content.decode()
    polled = client.get(f"/runs/{requeued.pk}/state/").content.decode()
    assert f'<span id="run-{requeued.pk}-ran" hx-swap-oob="true">—</span>' in polled
    assert f'<span id="run-{requeued.pk}-ran">—</span>' in client.get("/").content.decode()  # the dashboard


def test_a_finished_run_ran_for_its_attempts_not_the_wait_between(client, member, requeued):
    attempt = Attempt.objects.get(ref=requeued.ref, number=1)
    again = attempt.ended_at + timedelta(hours=5)  # five hours queued: not running time
    TrainingRun.objects.filter(pk=requeued.pk).update(
        state=RunState.SUCCEEDED, admitted_at=again, applied_at=again, attempt_started_at=again,
        finished_at=again + timedelta(minutes=10))
    client.force_login(member)
    expected = format_duration(attempt.ran_for + timedelta(minutes=10))
    assert f'<span id="run-{requeued.pk}-ran">ran {expected}</span>' in client.get("/runs/").content.decode()
    assert f'<dt>Ran for</dt><dd id="run-time">{expected}</dd>' in client.get(f"/runs/{requeued.pk}/").content.decode()
