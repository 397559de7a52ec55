"""The alert state machine (workloads.telemetry.alert_rules): hysteresis, one message per episode, never a flood.

A signal is fed to :func:`step` minute by minute, as the reconcile cycle would; the moves it
returns are what the database would see, and ``OPEN`` is the only move that sends a message.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.backends.base import GpuReading, WorkloadTelemetry
from workloads.telemetry.alert_rules import AlertKind, Episode, Move, Rule, figure, step, tighter, tightest, worst_gpu

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
#: Idle: under 10 % for 30 min; closed after 10 min clear.
IDLE = Rule(AlertKind.IDLE, 10.0, False, timedelta(minutes=30), timedelta(minutes=10))
MEMORY = Rule(AlertKind.MEMORY, 95.0, True, timedelta(minutes=5), timedelta(minutes=10))


def run(rule: Rule, values: list[float | None]) -> list[tuple[int, Move]]:
    """Feed one value a minute; returns (minute, move) of every move that is not NONE."""
    episode, moves = None, []
    for minute, value in enumerate(values):
        episode, move = step(episode, rule.holds(value), T0 + timedelta(minutes=minute), rule)
        if move != Move.NONE:
            moves.append((minute, move))
        if episode is not None and episode.closed_at is not None:
            episode = None  # closed: the next step starts afresh, as the database's active episode does
    return moves


def opens(moves) -> list[int]:
    return [minute for minute, move in moves if move == Move.OPEN]


def test_it_opens_once_the_condition_held_for_the_duration():
    moves = run(IDLE, [2.0] * 40)
    assert moves == [(0, Move.START), (30, Move.OPEN)]


def test_a_flapping_signal_gives_one_alert():
    # Idle for 30 min, then flapping every 3 minutes between busy and idle for two hours:
    # every recovery is shorter than the 10-minute clear duration, so the episode stays open.
    flapping = [2.0] * 31 + ([50.0] * 3 + [2.0] * 3) * 20
    moves = run(IDLE, flapping)
    assert opens(moves) == [30]
    assert [move for _m, move in moves].count(Move.CLEARING) == 20
    assert [move for _m, move in moves].count(Move.RESUME) == 20
    assert Move.CLOSE not in [move for _m, move in moves]


def test_a_recovery_shorter_than_the_clear_duration_keeps_the_same_episode():
    episode, _ = step(None, True, T0, IDLE)
    episode, move = step(episode, True, T0 + timedelta(minutes=30), IDLE)
    assert move == Move.OPEN and episode.opened_at == T0 + timedelta(minutes=30)
    opened = episode
    episode, move = step(episode, False, T0 + timedelta(minutes=31), IDLE)
    assert move == Move.CLEARING and episode.clearing_since == T0 + timedelta(minutes=31)
    episode, move = step(episode, False, T0 + timedelta(minutes=40), IDLE)  # 9 min clear: not yet
    assert move == Move.NONE
    episode, move = step(episode, True, T0 + timedelta(minutes=41), IDLE)
    assert move == Move.RESUME
    assert episode == opened  # the same episode: same start, same opening, holding again


def test_a_real_clear_closes_it_and_the_next_idle_stretch_is_a_new_episode():
    signal = [2.0] * 31 + [60.0] * 11 + [2.0] * 31  # busy from minute 31 to 41: 10 min clear
    moves = run(IDLE, signal)
    assert moves == [(0, Move.START), (30, Move.OPEN), (31, Move.CLEARING), (41, Move.CLOSE),
                     (42, Move.START), (72, Move.OPEN)]
    assert len(opens(moves)) == 2


def test_the_close_happens_after_exactly_the_clear_duration():
    episode, _ = step(None, True, T0, MEMORY)
    episode, _ = step(episode, True, T0 + timedelta(minutes=5), MEMORY)
    episode, _ = step(episode, False, T0 + timedelta(minutes=6), MEMORY)
    episode, move = step(episode, False, T0 + timedelta(minutes=15, seconds=59), MEMORY)
    assert move == Move.NONE and episode.closed_at is None
    episode, move = step(episode, False, T0 + timedelta(minutes=16), MEMORY)
    assert move == Move.CLOSE and episode.closed_at == T0 + timedelta(minutes=16)


def test_a_blip_before_the_duration_drops_the_pending_episode_without_a_message():
    moves = run(IDLE, [2.0] * 20 + [50.0] + [2.0] * 20)
    assert moves == [(0, Move.START), (20, Move.DROP), (21, Move.START)]
    assert opens(moves) == []


def test_unmeasured_cycles_move_nothing():
    # A pending episode survives a metrics gap; an open one is not cleared by one either.
    moves = run(IDLE, [2.0] * 10 + [None] * 30 + [2.0] * 25)
    assert moves == [(0, Move.START), (40, Move.OPEN)]  # the gap is no evidence: held since minute 0
    moves = run(IDLE, [2.0] * 31 + [None] * 60)
    assert moves == [(0, Move.START), (30, Move.OPEN)]


def test_memory_and_temperature_alert_above_their_thresholds_idle_under_its():
    assert MEMORY.holds(95.5) and not MEMORY.holds(95.0) and MEMORY.holds(None) is None
    assert IDLE.holds(9.9) and not IDLE.holds(10.0)
    hot = Rule(AlertKind.HOT, 85.0, True, timedelta(minutes=5), timedelta(minutes=10))
    assert run(hot, [80.0, 86.0, 87.0, 90.0, 88.0, 86.0, 91.0]) == [(1, Move.START), (6, Move.OPEN)]


def test_a_zero_duration_opens_at_once_and_a_zero_clear_closes_at_once():
    rule = Rule(AlertKind.MEMORY, 95.0, True, timedelta(0), timedelta(0))
    episode, move = step(None, True, T0, rule)
    assert move == Move.OPEN and episode == Episode(since=T0, opened_at=T0)
    episode, move = step(episode, False, T0 + timedelta(minutes=1), rule)
    assert move == Move.CLOSE and episode.closed_at == T0 + timedelta(minutes=1)


def test_each_kind_reads_its_figure_and_names_its_gpu():
    telemetry = WorkloadTelemetry((GpuReading("GPU-a", 2.0, 40000.0, 40000.0, 88.0, 120.0),
                                   GpuReading("GPU-b", 4.0, 77600.0, 2400.0, 70.0, 110.0),
                                   GpuReading("GPU-c", None, None, None, None, None)))
    assert figure(AlertKind.IDLE, telemetry) == 3.0  # the mean of the GPUs that reported one
    assert figure(AlertKind.MEMORY, telemetry) == pytest.approx(97.0)  # the fullest GPU, in percent
    assert figure(AlertKind.HOT, telemetry) == 88.0  # the hottest
    assert (worst_gpu(AlertKind.MEMORY, telemetry), worst_gpu(AlertKind.HOT, telemetry)) == ("GPU-b", "GPU-a")
    assert worst_gpu(AlertKind.IDLE, telemetry) == ""
    nothing = WorkloadTelemetry((GpuReading("GPU-c", None, None, None, None, None),))
    assert figure(AlertKind.MEMORY, nothing) is None and worst_gpu(AlertKind.HOT, nothing) == ""


@pytest.mark.parametrize(("kind", "part", "value", "than", "tight"), [
    (AlertKind.IDLE, "threshold", 20.0, 10.0, True),  # idle: a higher threshold alerts sooner
    (AlertKind.IDLE, "threshold", 5.0, 10.0, False),
    (AlertKind.MEMORY, "threshold", 90.0, 95.0, True),  # memory: a lower one does
    (AlertKind.MEMORY, "threshold", 99.0, 95.0, False),
    (AlertKind.HOT, "threshold", 80.0, 85.0, True),
    (AlertKind.IDLE, "after", 15, 30, True),  # any duration: shorter is tighter
    (AlertKind.MEMORY, "after", 10, 5, False),
    (AlertKind.IDLE, "threshold", 10.0, 10.0, True),  # equal is allowed (no looser)
])
def test_tighter_knows_each_kinds_direction(kind, part, value, than, tight):
    assert tighter(kind, part, value, than) is tight


def test_tightest_picks_what_alerts_soonest():
    assert tightest(AlertKind.IDLE, "threshold", [10.0, 25.0, 15.0]) == 25.0
    assert tightest(AlertKind.MEMORY, "threshold", [95.0, 80.0, 90.0]) == 80.0
    assert tightest(AlertKind.IDLE, "after", [30, 5, 10]) == 5
