"""A preempted run's page in a real browser: its state says queued and who took its units back,
and the Preemptions card lists the preemption (issue #23's browser journey, victim side).

The preemption is made by the real reclaim code (``workloads.cycle.preemption.reclaim``) on the
shared fake cluster and the real reconcile cycle; the browser only reads.
"""

from __future__ import annotations

from datetime import UTC

import pytest
from django.utils import timezone

from jobs.models import TrainingRun
from jobs.services import submit_run
from teams.models import Role
from tests.browser.support import BROWSER_MARKS
from tests.factories import add_member, cohort_pair, make_user
from workloads.cycle import preemption
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

pytestmark = BROWSER_MARKS


def spec(name: str, gpus: int) -> dict:
    return {"name": name, "image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"],
            "flavor": "a100-80gb", "gpus_per_worker": gpus}


@pytest.fixture
def preempted(transactional_db, flavors, fake_backend, published):
    """Vision's borrowed run, preempted for nlp-platform and back in the queue."""
    staff = make_user("root", staff=True)
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    submit_run(alice, vision, spec("own", 4))
    borrowed = submit_run(alice, vision, spec("borrowed", 4))
    submit_run(noor, nlp, spec("mine", 4))
    assert preemption.reclaim(timezone.now()) == [borrowed.ref]
    rec.reconcile(fake_backend)  # its objects are gone (the fake deleted them): it queues again
    return TrainingRun.objects.get(pk=borrowed.pk)


def test_the_victims_page_says_who_took_its_units_back(live_server, preempted, browser):
    assert preempted.state == "queued"
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "alice")
    browser.fill("#id_password", "pw-Slipway-123")
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/*")
    browser.goto(f"{live_server.url}/runs/{preempted.pk}/")
    status = browser.inner_text("#run-status")
    assert "Queued" in status
    assert "preempted: team nlp-platform reclaimed 4\u00d7 a100-80gb of its quota" in status
    card = browser.inner_text("#preemptions")
    assert "nlp-platform" in card and "4\u00d7 a100-80gb" in card and "GPU-h" in card


@pytest.fixture
def preempted_after_running(transactional_db, flavors, fake_backend, published):
    """Vision's borrowed run, applied and running with a log on the fake cluster, then preempted for
    nlp-platform: its pods (and so their logs) go, and it is queued again as attempt 2."""
    staff = make_user("root", staff=True)
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    submit_run(alice, vision, spec("own", 4))
    borrowed = submit_run(alice, vision, spec("borrowed", 4))
    for name, args in published:
        if name == "workloads.tasks.apply_workload":
            apply_workload(*args)
    published.clear()
    started = timezone.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_backend.set_running(borrowed.namespace, borrowed.object_name, 4, started=started)
    fake_backend.log_lines[f"{borrowed.object_name}-abcde"] = [f"epoch 1 step {i} loss 0.{i}" for i in range(50)]
    rec.reconcile(fake_backend)
    assert TrainingRun.objects.get(pk=borrowed.pk).state == "running"
    submit_run(noor, nlp, spec("mine", 4))
    assert preemption.reclaim(timezone.now()) == [borrowed.ref]
    rec.reconcile(fake_backend)  # its objects are gone (the fake deleted them): it queues again
    run = TrainingRun.objects.get(pk=borrowed.pk)
    assert (run.state, run.attempt) == ("queued", 2)
    return run


def test_a_requeued_runs_page_describes_its_current_attempt_and_keeps_attempt_ones_logs(
        live_server, preempted_after_running, browser):
    run = preempted_after_running
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "alice")
    browser.fill("#id_password", "pw-Slipway-123")
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/*")
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    status = browser.locator("#run-status")
    labels = status.locator("dl.kv dt").all_inner_texts()
    assert labels.count("Cluster") == 1 and "Queued since" in labels and "Running for" not in labels
    steps = status.locator("ol.timeline .step-label").all_inner_texts()
    assert steps[:6] == ["Queued", "Admitted", "Pending", "Running", "Preempted", "Queued again"]
    assert browser.locator("#attempt-1").is_visible() and "Preempted" in browser.inner_text("#attempt-1")
    assert "No log lines yet." in browser.inner_text("#workload-logs")
    # The attempt picker: attempt 1's log, saved before its pods went.
    browser.click("#attempt-picker >> text=attempt 1 (preempted)")
    browser.wait_for_url(f"{live_server.url}/runs/{run.pk}/?attempt=1#logs")
    assert "epoch 1 step 49 loss 0.49" in browser.inner_text("#workload-logs")
    assert "attempt 1, saved" in browser.inner_text("#log-hint")
