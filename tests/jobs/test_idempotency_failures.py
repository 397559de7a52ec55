"""Idempotency-Key when the request that holds the key dies or is slow: never a second object.

The view's writes and the record of its response commit together, and the key's placeholder
stays row-locked while its request runs, so a retry either replays the response or (if the
first request died before committing) runs on a clean slate.
"""

from __future__ import annotations

import threading

import pytest

from jobs import api as jobs_api
from jobs.models import TrainingRun
from teams import idempotency
from teams.models import IdempotencyRecord
from tests.jobs.conftest import run_payload
from tests.threads import in_thread, wait_until_lock_waiter

pytestmark = pytest.mark.django_db


def test_a_request_that_dies_after_creating_the_run_leaves_nothing_and_the_retry_creates_one(
        api, quota, published, monkeypatch):
    real_serialize = jobs_api.RunViewSet.serialize
    calls = []

    def dies_once(self, run):
        if not calls:
            calls.append(run.pk)
            raise RuntimeError("worker killed while writing the response")
        return real_serialize(self, run)

    monkeypatch.setattr(jobs_api.RunViewSet, "serialize", dies_once)
    with pytest.raises(RuntimeError):
        api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="k-die")
    assert calls and not TrainingRun.objects.exists()  # the run it created was rolled back
    assert not IdempotencyRecord.objects.exists()  # and the key is free again

    retry = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="k-die")
    assert retry.status_code == 201
    assert TrainingRun.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_retry_while_a_slow_first_request_still_runs_never_creates_a_second_run(
        api, quota, published, monkeypatch):
    # The first request takes longer than a placeholder is presumed alive.
    monkeypatch.setattr(idempotency, "ABANDONED_AFTER", idempotency.timedelta(seconds=0))
    inside, go = threading.Event(), threading.Event()
    real_serialize = jobs_api.RunViewSet.serialize

    def slow(self, run):
        if threading.current_thread() is not threading.main_thread() and not inside.is_set():
            inside.set()
            go.wait(10)
        return real_serialize(self, run)

    monkeypatch.setattr(jobs_api.RunViewSet, "serialize", slow)
    responses, errors = {}, []

    def post(name: str):
        responses[name] = api.post("/api/v1/runs/", run_payload(), format="json", HTTP_IDEMPOTENCY_KEY="k-slow")

    first = in_thread(lambda: post("first"), errors)
    assert inside.wait(10)
    try:
        retrying = in_thread(lambda: post("retry"), errors)
        # The retry presumes the placeholder abandoned and deletes it, which waits for the row
        # lock the first request holds until it commits.
        assert '"portal_idempotencyrecord"' in wait_until_lock_waiter(retrying).query
    finally:
        go.set()  # also when the assertion fails: the first request must not wait on
    first.join(30)
    retrying.join(30)
    assert errors == []

    assert responses["first"].status_code == 201
    retry = responses["retry"]
    assert retry.status_code in (201, 409)
    if retry.status_code == 201:
        assert retry["Idempotent-Replayed"] == "true"
        assert retry.json() == responses["first"].json()
    assert TrainingRun.objects.count() == 1


def test_a_retried_cancel_with_its_key_replays_the_202(api, member, team, quota, published):
    created = api.post("/api/v1/runs/", run_payload(), format="json").json()
    first = api.post(f"/api/v1/runs/{created['id']}/cancel/", HTTP_IDEMPOTENCY_KEY="c-1")
    again = api.post(f"/api/v1/runs/{created['id']}/cancel/", HTTP_IDEMPOTENCY_KEY="c-1")
    assert first.status_code == again.status_code == 202
    assert again["Idempotent-Replayed"] == "true" and again.json()["state"] == "cancelled"
    # Without the key, cancelling a finished run is the documented 409.
    assert api.post(f"/api/v1/runs/{created['id']}/cancel/").status_code == 409


def test_a_key_sent_again_for_another_run_of_a_path_longer_than_the_record_column_is_a_400(api, quota, published):
    """Ids may be padded with zeros (int() drops them); the request's hash took the path as its column keeps it (300
    characters), so a cancel of another run, its path alike in those, with the key replayed the first one's 202."""
    first, second = (api.post("/api/v1/runs/", run_payload(name=name), format="json").json()["id"]
                     for name in ("bert-a", "bert-b"))
    padding = "0" * 300
    cancelled = api.post(f"/api/v1/runs/{padding}{first}/cancel/", HTTP_IDEMPOTENCY_KEY="c-1")
    assert cancelled.status_code == 202
    again = api.post(f"/api/v1/runs/{padding}{second}/cancel/", HTTP_IDEMPOTENCY_KEY="c-1")
    assert again.status_code == 400 and "Idempotency-Key" in again.json()["errors"]
    assert TrainingRun.objects.get(pk=second).state != "cancelled"
