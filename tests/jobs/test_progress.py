"""The one ETA rule (jobs.progress): rate from the reports, restarts, staleness, done."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.progress import STALE_AFTER, TrainerReport, advance, earlier_attempt, eta, pick, trainer_eta

T0 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_steady_run_gets_its_true_end():
    state = None
    for second in range(0, 601, 10):  # 2 steps a second, of 4000
        state = advance(state, 2 * second, 4000, at(second))
    found = eta(state, at(600))
    assert found.rate == pytest.approx(2.0)
    assert found.at == at(2000) and found.percent == pytest.approx(30.0)
    assert not found.done and not found.stale


def test_one_report_has_no_eta_and_reports_within_a_second_make_a_provisional_one():
    state = advance(None, 100, 1000, at(0))
    assert eta(state, at(0)).at is None
    state = advance(state, 110, 1000, at(1))  # within the minimum window: the open window's own rate
    assert state.rate is None
    assert eta(state, at(1)).at == at(1 + 890 / 10)


def test_the_rate_follows_a_slowdown_within_minutes():
    state = None
    for second in range(0, 301, 10):
        state = advance(state, 2 * second, 10_000, at(second))
    for second in range(310, 1501, 10):  # from 2 to 1 step a second
        state = advance(state, state.step + 10, 10_000, at(second))
    assert eta(state, at(1500)).rate == pytest.approx(1.0, rel=0.05)


def test_a_restart_from_a_lower_step_keeps_the_rate_and_counts_from_there():
    state = None
    for second in range(0, 101, 10):
        state = advance(state, 2 * second, 1000, at(second))
    restarted = advance(state, 40, 1000, at(200))
    assert (restarted.step, restarted.window_step, restarted.rate) == (40, 40, state.rate)
    assert eta(restarted, at(200)).at == at(200 + 960 / 2)


def test_done_stale_and_late():
    done = advance(advance(None, 0, 10, at(0)), 10, 10, at(60))
    assert eta(done, at(70)).done and eta(done, at(70)).at == at(60) and eta(done, at(70)).percent == 100
    steady = advance(advance(None, 0, 100, at(0)), 10, 100, at(10))
    assert eta(steady, at(10) + STALE_AFTER + timedelta(seconds=1)).stale
    assert eta(steady, at(500)).at == at(100)  # late: not moved to now (its readers say so)
    assert eta(None, at(0)) is None


def test_an_older_report_does_not_move_the_rate_and_a_stalled_run_has_no_eta():
    state = advance(advance(None, 0, 100, at(0)), 10, 100, at(10))
    assert advance(state, 5, 100, at(5)).rate == state.rate
    stalled = advance(advance(None, 50, 100, at(0)), 50, 100, at(30))
    assert eta(stalled, at(30)).at is None and eta(stalled, at(30)).rate == 0


def test_a_new_attempt_resumed_after_a_queue_wait_starts_a_window_at_its_first_report():
    """Issue 46: a run preempted at step 600 waits 20 min in the queue and resumes from its checkpoint:
    the wait is no progress, so the rate is not its steps divided across it."""
    state = None
    for second in range(0, 301, 30):  # 2 steps a second
        state = advance(state, 2 * second, 2400, at(second))
    assert state.rate == pytest.approx(2.0)
    resumed = at(300 + 20 * 60)  # the next attempt's pods start
    state = advance(state, 600, 2400, resumed, attempt_started=resumed)  # it says where it resumes, at once
    assert (state.step, state.window_step, state.window_at) == (600, 600, resumed)
    state = advance(state, 660, 2400, resumed + timedelta(seconds=30), attempt_started=resumed)
    assert state.rate == pytest.approx(2.0)  # not 60 steps over 20.5 minutes
    found = eta(state, resumed + timedelta(seconds=30))
    assert found.at == resumed + timedelta(seconds=30 + (2400 - 660) / 2.0)


def test_progress_from_before_the_current_attempt_has_no_eta():
    """Issue 46: a run queued again (attempt 2, no pods) or whose new attempt has not reported yet shows its last
    attempt's step and percent, without a rate or an ETA; the first attempt's progress is its own."""
    state = advance(advance(None, 100, 1000, at(0)), 200, 1000, at(100))
    assert earlier_attempt(state, 1, at(0)) is False
    assert earlier_attempt(state, 2, None) is True  # queued again: no pods
    assert earlier_attempt(state, 2, at(500)) is True  # its pods started, nothing reported since
    assert earlier_attempt(state, 2, at(50)) is False  # reported since its pods started
    assert earlier_attempt(None, 2, None) is False
    found = eta(state, at(600), earlier=True)
    assert (found.at, found.percent, found.rate, found.done, found.stale, found.earlier) == (
        None, 20.0, None, False, False, True)
    assert eta(state, at(600)).at is not None


# -- the trainer's word (Trainer v2's trainerStatus) and the one rule that picks (issue 51 point 5) ------------


def test_the_trainers_report_gives_an_eta_from_when_it_said_it():
    said = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    found = trainer_eta(TrainerReport(said, 40, 600), said + timedelta(seconds=30))
    assert (found.at, found.percent, found.done, found.stale) == (said + timedelta(seconds=600), 40.0, False, False)
    assert trainer_eta(TrainerReport(said, 40), said).at is None  # no remaining time: a percentage, no ETA
    assert trainer_eta(TrainerReport(said, 100, 0), said).done
    assert trainer_eta(TrainerReport(said, None, 600), said) is None  # no percentage: nothing to show
    assert trainer_eta(TrainerReport(said, 40, 600), said + STALE_AFTER + timedelta(seconds=1)).stale


def test_the_runs_own_reports_win_while_fresh_then_the_trainers():
    t0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    own_state = advance(advance(None, 100, 1000, t0), 200, 1000, t0 + timedelta(seconds=100))
    now = t0 + timedelta(seconds=110)
    own, trainer = eta(own_state, now), trainer_eta(TrainerReport(now, 30, 900), now)
    assert pick(own, trainer) == (own, "run")
    later = t0 + STALE_AFTER + timedelta(minutes=2)  # the run stopped reporting; its trainer did not
    stale_own, fresh_trainer = eta(own_state, later), trainer_eta(TrainerReport(later, 35, 800), later)
    assert pick(stale_own, fresh_trainer) == (fresh_trainer, "trainer")
    assert pick(stale_own, trainer_eta(TrainerReport(t0, 30, 900), later)) == (stale_own, "run")  # both stale: its own
    assert pick(None, fresh_trainer) == (fresh_trainer, "trainer")
    assert pick(None, None) == (None, "")
    earlier = eta(own_state, later, earlier=True)  # queued again: the last attempt's step yields to a fresh trainer
    assert pick(earlier, fresh_trainer) == (fresh_trainer, "trainer")
