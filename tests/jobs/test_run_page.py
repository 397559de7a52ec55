"""The run page's model (:func:`jobs.page.run_page`): one answer per state, from unsaved rows (no database).

Issue 34.4: a preempted run's page said "Running for" while queued, showed attempt 1's placement
and checkpoint as current, and put "Running" before "Admitted" in its timeline.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.page import Step, _in_event_order, run_page, timeline
from workloads.models import Attempt, ReasonCode

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
EAST, WEST = Cluster(pk=1, name="east"), Cluster(pk=2, name="west")
CONTRACT = {"grace_seconds": 60, "volume": None}


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def attempt_one(**fields) -> Attempt:
    """Attempt 1: placed on west at 0:01, started 0:03, preempted 0:20, queued again 0:21; checkpoint at 0:15."""
    values = {"ref": "run:7", "number": 1, "cluster": WEST, "placement_reason": "west: most free a100-80gb (8; east 2)",
              "placed_at": at(1), "admitted_at": at(1), "applied_at": at(2), "started_at": at(3),
              "stopped_at": at(20), "ended_at": at(21), "end_reason_code": ReasonCode.PREEMPTED,
              "end_reason": "preempted: team nlp reclaimed 4\u00d7 a100-80gb of its quota",
              "checkpoint": {"at": at(15).isoformat(), "step": 300, "path": "/ckpt/s300"}, "logs": [{"lines": ["x"]}]}
    return Attempt(**{**values, **fields})


def run(**fields) -> TrainingRun:
    """Run 7 on its second attempt, queued again at 0:21 (``started_at`` is attempt 1's and stays; the requeue
    counted the 18 minutes attempt 1 ran)."""
    values = {"pk": 7, "state": RunState.QUEUED, "created_at": T0, "started_at": at(3), "attempt": 2,
              "earlier_run_seconds": 18 * 60,
              "preemptions": 1, "last_preempted_at": at(20), "checkpoint": CONTRACT, "cluster": EAST,
              "placement_reason": "east: where attempt 1 ran (a run queued again comes back to its cluster)",
              "last_checkpoint_at": at(15), "last_checkpoint_step": 300, "last_checkpoint_path": "/ckpt/s300"}
    return TrainingRun(**{**values, **fields})


def labels(steps: list[Step]) -> list[tuple[str, str]]:
    return [(s.label, s.status) for s in steps]


def test_a_requeued_run_says_queued_since_its_requeue_and_not_how_long_it_ran():
    page = run_page(run(), [attempt_one()], at(30))
    assert page.queued_since == at(21)
    assert (page.time_label, page.time_span) == ("", None)


def test_a_requeued_run_shows_the_current_attempts_placement_and_attempt_ones_under_it():
    page = run_page(run(), [attempt_one()], at(30))
    assert (page.cluster, page.placement_reason, page.show_cluster) == ("east", run().placement_reason, True)
    [first] = page.attempts
    assert (first.number, first.cluster, first.placement_reason) == (1, "west", "west: most free a100-80gb (8; east 2)")
    assert (first.ended, first.ended_at, first.ran_for, first.has_logs) == ("Preempted", at(20), timedelta(minutes=18), True)
    assert first.checkpoint == {"at": at(15), "step": 300, "path": "/ckpt/s300"}


def test_the_checkpoint_of_attempt_one_is_what_attempt_two_resumes_from_not_its_own():
    page = run_page(run(), [attempt_one()], at(30))
    assert page.checkpoint is None and page.checkpoint_empty == "none reported in this attempt yet"
    assert (page.resumes_label, page.resumes_from) == (
        "Resumes from", {"at": at(15), "step": 300, "path": "/ckpt/s300", "attempt": 1})
    # Once attempt 2 reports its own, that is its last checkpoint (and it still resumed from attempt 1's).
    own = run(state=RunState.RUNNING, admitted_at=at(40), applied_at=at(41), attempt_started_at=at(42),
              last_checkpoint_at=at(50), last_checkpoint_step=400, last_checkpoint_path="/ckpt/s400")
    page = run_page(own, [attempt_one()], at(55))
    assert page.checkpoint == {"at": at(50), "step": 400, "path": "/ckpt/s400"}
    assert page.resumes_label == "Resumed from" and page.resumes_from["step"] == 300


def test_a_running_second_attempt_says_how_long_this_attempt_has_run():
    page = run_page(run(state=RunState.RUNNING, admitted_at=at(40), applied_at=at(41), attempt_started_at=at(42)),
                    [attempt_one()], at(50))
    assert (page.queued_since, page.time_label, page.time_span) == (None, "Running for", timedelta(minutes=8))


def test_a_second_attempt_admitted_but_not_started_says_neither_queued_nor_running():
    page = run_page(run(state=RunState.ADMITTED, admitted_at=at(40)), [attempt_one()], at(50))
    assert (page.queued_since, page.time_label) == (None, "")


def test_a_finished_run_ran_for_all_its_attempts_not_the_time_between():
    done = run(state=RunState.SUCCEEDED, admitted_at=at(40), applied_at=at(41), attempt_started_at=at(42),
               finished_at=at(52))
    page = run_page(done, [attempt_one()], at(60))
    assert (page.time_label, page.time_span) == ("Ran for", timedelta(minutes=18 + 10))


def test_the_timeline_of_a_requeued_run_lists_attempt_one_then_waits_again():
    assert labels(run_page(run(), [attempt_one()], at(30)).timeline) == [
        ("Queued", "done"), ("Admitted", "done"), ("Pending", "done"), ("Running", "done"), ("Preempted", "stopped"),
        ("Queued again", "current"), ("Admitted", "todo"), ("Pending", "todo"), ("Running", "todo"),
        ("Succeeded", "todo")]


def test_the_timeline_puts_attempt_twos_admission_after_attempt_ones_start():
    steps = timeline(run(state=RunState.RUNNING, admitted_at=at(40), applied_at=at(41), attempt_started_at=at(42)),
                     [attempt_one()])
    assert [(s.label, s.at) for s in steps] == [
        ("Queued", T0), ("Admitted", at(1)), ("Pending", at(2)), ("Running", at(3)), ("Preempted", at(20)),
        ("Queued again", at(21)), ("Admitted", at(40)), ("Pending", at(41)), ("Running", at(42)), ("Succeeded", None)]


def test_the_timeline_sorts_what_happened_by_time_whatever_the_order_of_the_columns():
    # Its apply recorded after its pods were seen running (a worker died before saving it): event order.
    late = TrainingRun(state=RunState.SUCCEEDED, created_at=T0, admitted_at=at(1), applied_at=at(5), started_at=at(3),
                       finished_at=at(9))
    assert [(s.label, s.at) for s in timeline(late)] == [
        ("Queued", T0), ("Admitted", at(1)), ("Running", at(3)), ("Pending", at(5)), ("Succeeded", at(9))]


def test_a_step_without_a_time_keeps_its_place_after_the_one_before_it():
    steps = [Step("a", "A", at(5), "done"), Step("b", "B", None, "done"), Step("c", "C", at(1), "done")]
    assert [s.label for s in _in_event_order(steps)] == ["C", "A", "B"]


def test_a_run_requeued_before_attempts_were_kept_never_says_running_while_queued():
    legacy = run(cluster=None, placement_reason="")
    page = run_page(legacy, [], at(30))
    assert page.queued_since == at(20)  # its last preemption
    assert (page.time_label, page.attempts, page.cluster, page.show_cluster) == ("", [], "", True)
    assert page.checkpoint is None and page.resumes_from == {"at": at(15), "step": 300, "path": "/ckpt/s300",
                                                             "attempt": None}
    assert labels(page.timeline)[0] == ("Queued again", "current")


def test_a_first_attempt_keeps_its_single_timeline_and_rows():
    first = TrainingRun(state=RunState.QUEUED, created_at=T0, attempt=1)
    page = run_page(first, [], at(3))
    assert (page.queued_since, page.time_label, page.show_cluster, page.show_attempt, page.show_checkpoint) == (
        T0, "", False, False, False)
    assert labels(page.timeline) == [("Queued", "current"), ("Admitted", "todo"), ("Pending", "todo"),
                                     ("Running", "todo"), ("Succeeded", "todo")]
    running = TrainingRun(state=RunState.RUNNING, created_at=T0, admitted_at=at(1), applied_at=at(2), started_at=at(3),
                          attempt=1, checkpoint=CONTRACT)
    page = run_page(running, [], at(13))
    assert (page.time_label, page.time_span, page.checkpoint_empty) == (
        "Running for", timedelta(minutes=10), "none reported yet")


def test_a_run_cancelled_while_queued_again_ends_its_timeline_there():
    cancelled = run(state=RunState.CANCELLED, finished_at=at(25))
    assert labels(timeline(cancelled, [attempt_one()]))[-2:] == [("Queued again", "done"), ("Cancelled", "bad")]
    assert run_page(cancelled, [attempt_one()], at(30)).time_label == "Ran for"


def test_steps_within_one_second_keep_their_order():
    # The cluster reports a container's start in whole seconds: 09:00:05 is not before an apply at 09:00:05.7.
    run = TrainingRun(state=RunState.SUCCEEDED, created_at=T0, admitted_at=T0 + timedelta(seconds=5.2),
                      applied_at=T0 + timedelta(seconds=5.7), started_at=T0 + timedelta(seconds=5), attempt=1,
                      finished_at=at(9))
    assert [s.label for s in timeline(run)] == ["Queued", "Admitted", "Pending", "Running", "Succeeded"]
