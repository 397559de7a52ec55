"""The start-estimate simulation (workloads.estimates.simulate), pure: unsaved rows, a fixed clock.

Issue 34's honesty rules: "now" only for work admitted now, never for work that waits (an
overdue end is expected at the next cycle), "unknown" naming the work without a runtime limit,
and a cohort's borrowing and reclaim decided by admission's and reclaim's own rules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.priority import Priority
from fleet.models import GpuFlavor
from quotas.facts import CohortFigures
from quotas.models import QueuedRequest, TeamQuota
from quotas.reclaim import Rules
from workloads.estimates import Holding, Sharing, Start, Waiting, simulate

NOW = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
CYCLE = timedelta(seconds=5)
FLAVOR = GpuFlavor(pk=1, name="a100-80gb", active=True, max_units_per_node=8)
A, B = 1, 2  # team ids


def quota(team: int, limit: int) -> TeamQuota:
    return TeamQuota(team_id=team, flavor=FLAVOR, limit=limit)


def entry(ref: str, units: int, team: int = A, pk: int = 1, since: datetime = NOW) -> QueuedRequest:
    return QueuedRequest(pk=pk, ref=ref, team_id=team, flavor=FLAVOR, units=units, units_per_node=units,
                         priority=Priority.NORMAL.rank, created_at=since)


def holding(ref: str, units: int, ends_in: timedelta | None, team: int = A, borrowed: int = 0,
            since: timedelta = timedelta(hours=1)) -> Holding:
    return Holding(ref, team, FLAVOR.pk, units, NOW + ends_in if ends_in is not None else None, borrowed,
                   Priority.NORMAL.rank, NOW - since, entry(ref, units, team, pk=99, since=NOW - since))


def cohort(rules: Rules | None = None) -> Sharing:
    figures = CohortFigures(slugs={A: "nlp", B: "vision"}, quotas={(A, 1): quota(A, 4), (B, 1): quota(B, 4)},
                            usage={})
    return Sharing(figures, {}, rules, timedelta(seconds=30))


def test_it_gives_now_only_to_work_admitted_now():
    starts = simulate(NOW, [holding("run:1", 6, timedelta(minutes=10))],
                      [Waiting(entry("run:2", 2, pk=1), timedelta(minutes=5)),
                       Waiting(entry("run:3", 4, pk=2), timedelta(minutes=5)),
                       Waiting(entry("run:4", 1, pk=3), timedelta(minutes=30))],
                      {(A, 1): quota(A, 8)}, CYCLE)
    assert starts["run:2"] == Start(NOW)
    # run:2 ends at 5 min and frees 2 (run:4 fits, run:3 does not); run:1 ends at 10 min.
    assert starts["run:4"] == Start(NOW + timedelta(minutes=5), ("run:2",))
    assert starts["run:3"] == Start(NOW + timedelta(minutes=10), ("run:2", "run:1"))


def test_it_never_says_now_for_work_behind_an_overdue_end():
    # The estimated_start_at == now: the work ahead was past its expected end.
    starts = simulate(NOW, [holding("run:1", 8, -timedelta(minutes=3))],
                      [Waiting(entry("run:2", 4), None)], {(A, 1): quota(A, 8)}, CYCLE)
    assert starts["run:2"] == Start(NOW + CYCLE, ("run:1",))


def test_it_says_unknown_and_names_the_work_without_a_runtime_limit():
    starts = simulate(NOW, [holding("run:1", 4, None), holding("run:5", 4, timedelta(minutes=20))],
                      [Waiting(entry("run:2", 8), timedelta(minutes=5))], {(A, 1): quota(A, 8)}, CYCLE)
    assert starts["run:2"] == Start(None, unknown=("run:1",))


def test_it_starts_a_cohort_member_at_once_on_what_the_cohort_lends():
    # nlp holds its 4; vision lends its idle 4: the fair-share order admits nlp's 2 now, borrowed.
    starts = simulate(NOW, [holding("run:1", 4, timedelta(hours=2))], [Waiting(entry("run:2", 2), None)],
                      cohort().figures.quotas, CYCLE, cohort())
    assert starts["run:2"] == Start(NOW)


def test_it_reclaims_borrowed_work_after_the_delay_and_the_grace():
    rules = Rules("any", min_runtime=timedelta(minutes=10), delay=timedelta(seconds=30))
    # nlp borrows vision's 4 for two more hours; vision queues 4 of its own now.
    running = [holding("run:1", 4, timedelta(hours=2)), holding("run:9", 4, timedelta(hours=2), borrowed=4)]
    starts = simulate(NOW, running, [Waiting(entry("run:2", 4, team=B), None)], cohort().figures.quotas, CYCLE,
                      cohort(rules), wanted={"run:2"})
    # Reclaim waits its delay (30 s), then the victim holds its units for the grace (30 s).
    assert starts["run:2"] == Start(NOW + timedelta(seconds=60), ("run:9",))
    # Without reclaim it waits for the borrowed run's end.
    starts = simulate(NOW, running, [Waiting(entry("run:2", 4, team=B), None)], cohort().figures.quotas, CYCLE,
                      cohort(None))
    assert starts["run:2"] == Start(NOW + timedelta(hours=2), ("run:1", "run:9"))
