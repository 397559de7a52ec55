"""Queue start estimates on a scripted timeline: the estimate against when the work really started."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.formatting import format_clock
from jobs.models import TrainingRun
from quotas import admission
from quotas.models import QueuedRequest
from tests.jobs.conftest import submit_run_as
from workloads import estimates
from workloads.cycle import reconcile as rec
from workloads.estimates.forecast import Ahead, StartEstimate, estimated_starts
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def submit_limited(member, team, name: str, gpus: int, minutes: int | None = None, image: str = "t:1") -> TrainingRun:
    """A run of ``gpus`` A100s with the runtime limit ``minutes`` (none: no limit), of the job ``name``
    and ``image`` — what the forecast reads."""
    limit = {"max_runtime_minutes": minutes} if minutes else {}
    return submit_run_as(member, team, name=name, image=f"registry.example.com/ml/{image}", gpus_per_worker=gpus,
                         **limit)


def test_estimates_follow_the_expected_ends_and_match_when_the_work_really_starts(
        member, team, quota, fake_backend, published):
    t0 = timezone.now().replace(microsecond=0)
    a = submit_limited(member, team, "a", 8, minutes=30)
    assert apply_workload("run", a.pk) == "applied"
    fake_backend.set_running(NS, a.object_name, units=8, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    b = submit_limited(member, team, "b", 4, minutes=20)
    c = submit_limited(member, team, "c", 8)  # no limit and no history: its own end is unknown
    estimates = estimated_starts(team, now=t0 + timedelta(seconds=5))
    # No run has ended yet: nothing says how much of their limits runs use, so every end is a limit —
    # the estimate is a bound and says so (issue 46), with no range below it.
    at_b, at_c = t0 + timedelta(minutes=30), t0 + timedelta(minutes=50)
    assert estimates[b.ref] == StartEstimate(at_b, (Ahead("a", f"/runs/{a.pk}/"),), earliest=at_b, latest=at_b)
    assert estimates[c.ref] == StartEstimate(at_c, (Ahead("a", f"/runs/{a.pk}/"), Ahead("b", f"/runs/{b.pk}/")),
                                             earliest=at_c, latest=at_c)
    # By the time of day (and the date too when the bound is tomorrow: near midnight).
    words = estimates[b.ref].words(t0 + timedelta(minutes=10))
    assert words.startswith("starts within 20 min, when a ends, by ")
    assert words.endswith(f"{format_clock(at_b)} {timezone.localtime(at_b).tzname()} at the latest")

    # The timeline: a ends on time; the cycle after admits b.
    end = t0 + timedelta(minutes=30)
    fake_backend.set_finished(NS, a.object_name, ok=True, started=iso(t0), finished=iso(end))
    report = rec.reconcile(fake_backend, now=end + timedelta(seconds=5))
    assert report.admitted == [b.ref]
    interval = timedelta(seconds=5)
    assert abs((end + timedelta(seconds=5)) - estimates[b.ref].at) <= interval  # within one cycle


def test_a_run_without_a_limit_uses_the_median_of_the_same_job(member, team, quota, fake_backend):
    t0 = timezone.now().replace(microsecond=0)
    for minutes in (10, 20, 60):  # earlier runs of the same job (name, flavor, image): median 20 min
        done = submit_limited(member, team, "now", 1, image="same:1")
        TrainingRun.objects.filter(pk=done.pk).update(state="succeeded", started_at=t0 - timedelta(hours=5),
                                                        finished_at=t0 - timedelta(hours=5, minutes=-minutes))
        admission.release(done.ref)
    # Other jobs of that flavor and image, and the same job cancelled, say nothing about it.
    for name, state, hours in (("pretrain", "succeeded", 9), ("sft", "failed", 7), ("now", "cancelled", 30)):
        other = submit_limited(member, team, name, 1, image="same:1")
        TrainingRun.objects.filter(pk=other.pk).update(state=state, started_at=t0 - timedelta(hours=40),
                                                         finished_at=t0 - timedelta(hours=40 - hours))
        admission.release(other.ref)
    running = submit_limited(member, team, "now", 8, image="same:1")
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)


def test_without_the_jobs_history_a_limit_counts_as_much_as_the_platforms_runs_use_of_theirs(member, team, quota):
    """Issue 34.5: limits are set with room to spare, so ending every run at its limit put estimates
    late (40 % off at the median in bench/estimates.py). Once 20 runs with a limit have ended on
    their own, a limit counts as the median share of it they used; past that, the limit itself."""
    t0 = timezone.now().replace(microsecond=0)
    for i in range(estimates.LIMIT_USE_MIN):  # earlier runs of other jobs: half of a 60 min limit
        done = submit_limited(member, team, f"done-{i}", 1, minutes=60, image=f"other-{i}:1")
        TrainingRun.objects.filter(pk=done.pk).update(state="succeeded", started_at=t0 - timedelta(hours=5),
                                                        finished_at=t0 - timedelta(hours=5, minutes=-30))
        admission.release(done.ref)
    running = submit_limited(member, team, "busy", 8, minutes=40)
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2, minutes=10)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)  # 40 min x 0.5
    # Past its typical time, a run is expected at its limit; never "now" for work that waits.
    assert estimated_starts(team, now=t0 + timedelta(minutes=25))[waiting.ref].at == t0 + timedelta(minutes=40)


def test_pruned_trials_are_no_runs_that_ended_on_their_own(member, team, quota):
    """A sweep's pruner cuts a trial short (docs/sweeps.md "Pruning"): how long it ran says what the pruner
    decided, not how long the job takes, so neither the job's median nor the platform's limit use counts it."""
    t0 = timezone.now().replace(microsecond=0)

    def ended(name: str, state: str, minutes: int, limit: int | None = None, image: str = "same:1") -> None:
        done = submit_limited(member, team, name, 1, minutes=limit, image=image)
        TrainingRun.objects.filter(pk=done.pk).update(state=state, started_at=t0 - timedelta(hours=5),
                                                        finished_at=t0 - timedelta(hours=5, minutes=-minutes))
        admission.release(done.ref)

    for minutes in (10, 20, 60):  # the job's runs that ended on their own: median 20 min
        ended("trial", "succeeded", minutes)
    for minutes in (2, 3, 4):  # pruned early: with them the median was 7 min
        ended("trial", "pruned", minutes)
    running = submit_limited(member, team, "trial", 8, image="same:1")
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)

    # The platform's limit use: runs that ended on their own used half of their 60 min limits; as many pruned
    # trials a tenth of theirs (with them the median was 0.3).
    for i in range(estimates.LIMIT_USE_MIN):
        ended(f"done-{i}", "succeeded", 30, limit=60, image=f"other-{i}:1")
        ended(f"cut-{i}", "pruned", 6, limit=60, image=f"other-{i}:1")
    TrainingRun.objects.filter(pk=running.pk).update(state="succeeded", finished_at=t0)
    admission.release(running.ref)
    busy = submit_limited(member, team, "busy", 8, minutes=40)
    TrainingRun.objects.filter(pk=busy.pk).update(state="running", started_at=t0)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)  # 40 min x 0.5


def test_the_limit_use_rule_is_pure_and_needs_enough_runs():
    assert estimates.limit_use([(1800.0, 3600.0)] * (estimates.LIMIT_USE_MIN - 1)) is None
    spans = [(900.0, 3600.0)] * 10 + [(3600.0, 3600.0)] * 9 + [(7200.0, 3600.0)] * 2  # overruns count as 1
    assert estimates.limit_use(spans) == 1.0
    assert estimates.limit_use([(900.0, 3600.0)] * 11 + [(3600.0, 3600.0)] * 10) == 0.25
    hour = timedelta(hours=1)
    assert estimates.typical_time(hour, None, 0.5) == hour / 2
    assert estimates.typical_time(hour, timedelta(minutes=5), 0.5) == timedelta(minutes=5)  # the job's own median
    assert estimates.typical_time(None, None, 0.5) is None
    t0 = timezone.now()
    assert estimates.expected_end(t0, t0, hour, hour / 2) == t0 + hour / 2
    assert estimates.expected_end(t0, t0 + hour * 0.75, hour, hour / 2) == t0 + hour
    assert estimates.expected_end(t0, t0 + hour * 2, hour, hour / 2) == t0 + hour * 2  # overdue: not in the past
    assert estimates.expected_end(t0, t0, None, None) is None


def test_it_says_unknown_rather_than_guess(member, team, quota):
    t0 = timezone.now()
    running = submit_limited(member, team, "open-ended", 8, image="never-seen:1")
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 1)
    estimate = estimated_starts(team, now=t0)[waiting.ref]
    assert estimate.at is None
    assert estimate.words(t0) == "start time unknown: open-ended, holding a100-80gb, has no runtime limit"


def test_work_waiting_out_its_provisioning_backoff_is_told_so_not_a_minute(member, team, quota):
    """docs/pools.md "Waiting for nodes": a run whose nodes could not be provisioned is not admitted before its
    backoff ends, whatever quota is free; its estimate says what its reason says, not "starts in about a minute"."""
    t0 = timezone.now().replace(microsecond=0)
    first = submit_limited(member, team, "first", 8, minutes=30)
    waiting = submit_limited(member, team, "gang", 8, minutes=30)
    TrainingRun.objects.filter(pk=first.pk).update(state="succeeded", started_at=t0, finished_at=t0)
    admission.release(first.ref)  # its quota is free; the queued run waits out its backoff
    QueuedRequest.objects.filter(ref=waiting.ref).update(not_before=t0 + timedelta(minutes=2))
    estimate = estimated_starts(team, now=t0)[waiting.ref]
    assert estimate.at is None
    assert "its nodes could not be provisioned; it tries again after" in estimate.words(t0)


def test_the_api_shows_the_estimate(api, member, team, quota):
    t0 = timezone.now()
    running = submit_limited(member, team, "busy", 8, minutes=45)
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2)
    body = api.get(f"/api/v1/runs/{waiting.pk}/").json()
    assert body["queue_position"] == 1
    assert abs(timezone.datetime.fromisoformat(body["estimated_start_at"]) - (t0 + timedelta(minutes=45))) < timedelta(
        seconds=1)
    assert api.get(f"/api/v1/runs/{running.pk}/").json()["estimated_start_at"] is None


def test_the_run_page_says_when_it_should_start(client, member, team, quota):
    t0 = timezone.now()
    running = submit_limited(member, team, "busy", 8, minutes=40)
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2)
    client.force_login(member)
    page = client.get(f"/runs/{waiting.pk}/").content.decode()
    assert f'starts within 40 min, when <a href="/runs/{running.pk}/">busy</a> ends, by ' in page


def test_work_of_a_kind_without_estimates_runs_to_its_limit_and_a_run_to_its_typical_time():
    """A runtime limit predicts a run's end through the platform's limit use (Estimates); the block kind's limit
    is its window, which it holds to the end: nothing learnt of runs shortens it."""
    from tests.workloads.holdkind.models import UnitBlock
    from workloads.estimates.forecast import _expected_end

    start = timezone.now()
    half = 0.5  # the platform's runs use half their limit
    assert _expected_end(UnitBlock(minutes=60), start, start, {}, use=half) == start + timedelta(minutes=60)
    run = TrainingRun(name="r", flavor_id=1, image="x", max_runtime_minutes=60)
    assert _expected_end(run, start, start, {}, use=half) == start + timedelta(minutes=30)


def test_a_run_on_a_later_attempt_ends_by_what_its_earlier_attempts_left_of_its_limit(member, team, quota):
    """Its limit counts every attempt (docs/glossary.md "Runtime limit"), from its current attempt's start: its
    first start, hours ago, says nothing of when it ends (it read as "ends now", the wait as none)."""
    t0 = timezone.now().replace(microsecond=0)
    busy = submit_limited(member, team, "busy", 8, minutes=60)
    TrainingRun.objects.filter(pk=busy.pk).update(state="running", attempt=2, started_at=t0 - timedelta(hours=3),
                                                  attempt_started_at=t0, earlier_run_seconds=40 * 60)
    waiting = submit_limited(member, team, "next", 2)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)


def test_a_jobs_runs_count_the_time_their_attempts_ran_not_the_waits_between(member, team, quota):
    """A run of the job preempted and queued again for five hours ran 20 minutes in all, not 5 h 20 min: the median
    of the job's runs (10, 20, 60 min) is 20 minutes; over first start to end it was 60."""
    t0 = timezone.now().replace(microsecond=0)
    for minutes, attempts in ((10, None), (20, (10, timedelta(hours=5))), (60, None)):
        done = submit_limited(member, team, "now", 1, image="same:1")
        started, finished = t0 - timedelta(hours=8), t0 - timedelta(hours=8, minutes=-minutes)
        fields = {"state": "succeeded", "started_at": started, "finished_at": finished}
        if attempts:  # its first attempt ran 10 minutes, then it waited five hours; its second ran 10 more
            earlier, wait = attempts
            finished = started + wait + timedelta(minutes=minutes)
            fields |= {"attempt": 2, "earlier_run_seconds": earlier * 60, "finished_at": finished,
                       "attempt_started_at": finished - timedelta(minutes=minutes - earlier)}
        TrainingRun.objects.filter(pk=done.pk).update(**fields)
        admission.release(done.ref)
    running = submit_limited(member, team, "now", 8, image="same:1")
    TrainingRun.objects.filter(pk=running.pk).update(state="running", started_at=t0)
    waiting = submit_limited(member, team, "next", 2)
    assert estimated_starts(team, now=t0)[waiting.ref].at == t0 + timedelta(minutes=20)
    page = TrainingRun.objects.filter(team=team, state="succeeded", attempt=2).get()
    assert page.ran_in_all == timedelta(minutes=20)  # what the run page's "Ran for" says: one rule
