"""Issue 50's crash proof with a real worker: a sweep whose worker is SIGKILLed in the middle of launching a
trial leaves no duplicate trial, loses nothing, and finishes once a worker runs again.

The kill lands at one known point. The test holds the team's admission lock (its Team row, ``FOR NO KEY UPDATE``,
as admission takes it) from a connection of its own, so the worker's driver, having asked the study for a trial
— its study trial written, its number taken, in the driver's open transaction — waits in the trial's submission
(:func:`quotas.admission.admit`). The test sees that wait in ``pg_stat_activity``, SIGKILLs the worker and lets
go: the driver's transaction dies with its connection, and with it the study trial, the run and the trial.
A worker started again acts for the sweep from the rows as they are and runs it to its end.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from sweeps.constants import SweepState, TrialState
from sweeps.models import StudyTrial, Sweep, Trial
from tests.e2e.conftest import lend, module_worker, own_connection, wait_for, waiting_for
from tests.factories import make_team, member_api

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def sweep_worker(django_db_setup, tmp_path_factory):
    # The driver and the stdout reader every half second (beat), as the reconcile cycle.
    yield from module_worker(tmp_path_factory, SLIPWAY_SWEEP_SECONDS="0.5", SLIPWAY_RUN_METRICS_READ_SECONDS="0.5")


@pytest.fixture
def worker(transactional_db, sweep_worker):
    yield from lend(sweep_worker)


class TeamLock:
    """The team's admission lock, held from a connection of the test's own."""

    def __init__(self, slug: str) -> None:
        self.conn, self.pid = own_connection()
        assert self.conn.execute("SELECT id FROM portal_team WHERE slug = %s FOR NO KEY UPDATE", [slug]).fetchall()

    def waiting(self) -> list[tuple[int, str]]:
        return waiting_for(self.pid)

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def where(sweep_id: int) -> str:
    """The sweep, its trials and their runs as they are (what a timeout reports)."""
    sweep = Sweep.objects.get(pk=sweep_id)
    trials = [(t.number, t.state, t.step, t.reason) for t in Trial.objects.filter(sweep_id=sweep_id).order_by("number")]
    runs = list(TrainingRun.objects.order_by("pk").values_list("name", "state", "reason_code", "started_at",
                                                               "finished_at", "log_cursor__done"))
    return f"{sweep.state} ({sweep.reason!r}); trials {trials}; runs {runs}"


def test_a_worker_killed_while_launching_a_trial_leaves_no_duplicate_and_the_sweep_finishes(worker):
    seed_flavors()
    team = make_team("vision")
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    locks = TeamLock("vision")
    try:
        created = alice.post("/api/v1/sweeps/", {
            "team": "vision", "name": "crash",
            "run": {"image": "ghcr.io/acme/train:1", "command": ["python", "train.py"], "flavor": "a100-80gb",
                    "max_runtime_minutes": 10,
                    "env": {"SLIPWAY_SIM_DURATION": "8s", "SLIPWAY_SIM_LOG_EVERY": "1",
                            "SLIPWAY_SIM_OPTIMUM": "LR=3e-4"}},
            "parameters": {"lr": {"type": "float", "min": 1e-5, "max": 1e-1, "log": True}},
            "objective": {"metric": "loss", "goal": "minimize"}, "sampler": "tpe", "parallel": 2, "max_trials": 4,
        }, format="json")
        assert created.status_code == 201, created.content
        sweep_id = created.json()["id"]
        waiting = wait_for(locks.waiting, timeout=60, what="the driver to wait for the team's admission lock")
        # The driver asked the study for a trial in its open transaction and waits to submit it.
        assert any("portal_team" in query for _pid, query in waiting), waiting
        worker.kill()
    finally:
        locks.release()
    # Its transaction died with it: no study trial, no run, no trial.
    assert (StudyTrial.objects.count(), TrainingRun.objects.count(), Trial.objects.count()) == (0, 0, 0)
    # What it had no time to remove (its pool's temporary directory) is in its own directory, not the machine's /tmp.
    assert [path.name[:5] for path in worker.tmp.iterdir()] == ["pymp-"]

    worker.start()
    wait_for(lambda: Sweep.objects.get(pk=sweep_id).state == SweepState.COMPLETED, timeout=180,
             what=lambda: f"the sweep to finish; it is {where(sweep_id)}")
    trials = list(Trial.objects.filter(sweep_id=sweep_id).order_by("number"))
    assert [t.number for t in trials] == [1, 2, 3, 4]
    assert sorted(StudyTrial.objects.values_list("number", flat=True)) == [0, 1, 2, 3]
    assert sorted(TrainingRun.objects.values_list("name", flat=True)) == [f"crash-t00{n}" for n in range(1, 5)]
    assert {t.state for t in trials} == {TrialState.COMPLETED} and all(t.value is not None for t in trials)
