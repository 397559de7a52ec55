"""Alerts on a workload's GPUs, as a pure state machine with hysteresis: one episode, one message.

Three alert kinds watch the figures the reconcile cycle reads once per cycle from the DCGM
exporter (:class:`cluster.backends.base.WorkloadTelemetry`; docs/notifications.md "Alerts"):

* ``gpu_idle`` — utilization under a threshold (10 %) for a duration (30 min): money wasted;
* ``gpu_memory`` — frame-buffer memory over 95 % used (on the fullest GPU): a risk of running
  out of memory (OOM);
* ``gpu_hot`` — temperature over 85 °C (the hottest GPU): throttling, a hardware matter for
  platform staff.

Per workload and alert kind an **episode** is the unit of alerting, and the only thing a
message is sent about:

1. *pending* — the condition holds now; nothing is said yet;
2. *open* — it has held without a break for the rule's ``after`` duration: the one message of
   the episode is sent at this move;
3. *clearing* — open, and the condition stopped holding; a recovery shorter than the rule's
   ``clear_after`` (the condition back before it passed) leaves the same episode open, so a
   flapping signal is one episode and one message, never a flood;
4. *closed* — the condition stayed clear for ``clear_after``. The next time it holds, a new
   episode starts from pending.

A pending episode whose condition stops holding is dropped (a blip is not an alert). A cycle
that measures nothing for the workload (``None``) moves nothing: unmeasured is no evidence
either way.

Nothing here reads the database or the clock: :func:`step` takes the episode as it was, what
this cycle measured and ``now``, and returns the episode as it is and the move that took it
there. :mod:`workloads.telemetry.alerts` persists the moves (conditional updates) and sends the message.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cluster.backends.base import WorkloadTelemetry


class AlertKind(enum.StrEnum):
    """What an alert is about (each has its own rule, settings and event kind)."""

    IDLE = "gpu_idle"
    MEMORY = "gpu_memory"
    HOT = "gpu_hot"


#: How people call each alert kind (admin lists, pages).
LABELS = {AlertKind.IDLE: "GPUs idle", AlertKind.MEMORY: "GPU memory nearly full (OOM risk)",
          AlertKind.HOT: "GPU too hot"}


def figure(kind: AlertKind, telemetry: WorkloadTelemetry) -> float | None:
    """The figure ``kind``'s rule compares with its threshold: utilization (percent, the mean over the
    workload's GPUs), memory used (percent of the fullest GPU's frame buffer), temperature (the hottest
    GPU, °C); None when not reported. Idle's is measured against the workload's unit by the caller
    (:func:`workloads.idle.of_units`: a shared GPU's share busy is busy)."""
    if kind == AlertKind.IDLE:
        return telemetry.util_pct
    if kind == AlertKind.MEMORY:
        fraction = telemetry.fb_used_fraction
        return None if fraction is None else fraction * 100
    return telemetry.temp_c


def worst_gpu(kind: AlertKind, telemetry: WorkloadTelemetry) -> str:
    """The GPU the figure of ``kind`` is about, as the exporter names it: the fullest (memory), the
    hottest (temperature); "" for idle (the mean of all) or when none reported it."""
    if kind == AlertKind.MEMORY:
        known = [(g.fb_used_fraction, g.gpu) for g in telemetry.gpus if g.fb_used_fraction is not None]
    elif kind == AlertKind.HOT:
        known = [(g.temp_c, g.gpu) for g in telemetry.gpus if g.temp_c is not None]
    else:
        known = []
    return max(known)[1] if known else ""


class Move(enum.StrEnum):
    """What one :func:`step` did to an episode (what :mod:`workloads.telemetry.alerts` writes)."""

    NONE = "none"  #: nothing changed
    START = "start"  #: a pending episode began
    DROP = "drop"  #: a pending episode ended before it opened (nothing was said)
    OPEN = "open"  #: the episode opened: its one message goes out
    CLEARING = "clearing"  #: an open episode's condition stopped holding
    RESUME = "resume"  #: it holds again before the clear duration passed: the same episode goes on
    CLOSE = "close"  #: it stayed clear for the clear duration: the episode is over


@dataclass(frozen=True)
class Rule:
    """When an alert kind's condition holds, and how long it must hold (or stay clear).

    ``above``: the condition is "value over threshold" (memory, temperature); otherwise "under"
    (idle). ``threshold`` is in the figure's unit: percent of utilization, percent of memory
    used, degrees Celsius.
    """

    kind: AlertKind
    threshold: float
    above: bool
    after: timedelta
    clear_after: timedelta

    def holds(self, value: float | None) -> bool | None:
        """Whether ``value`` is in alert (None: not measured, no evidence either way)."""
        if value is None:
            return None
        return value > self.threshold if self.above else value < self.threshold


@dataclass(frozen=True)
class Episode:
    """The state of one (workload, alert kind) episode: what :func:`step` reads and returns.

    ``since``: when the condition began to hold (the pending start); ``opened_at``: when the
    episode opened (None while pending); ``clearing_since``: when an open episode's condition
    stopped holding (None while it holds); ``closed_at``: when it closed.
    """

    since: datetime
    opened_at: datetime | None = None
    clearing_since: datetime | None = None
    closed_at: datetime | None = None

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None and self.closed_at is None


def step(episode: Episode | None, holds: bool | None, now: datetime, rule: Rule) -> tuple[Episode | None, Move]:
    """The episode after one measurement (``holds``: :meth:`Rule.holds` of this cycle's figure).

    ``episode`` is the workload's active (pending or open) episode of ``rule.kind``, None when it
    has none; the result is None when none is active after the step (a drop, or nothing began).
    A closed episode comes back as it closed (``closed_at`` set); a later step starts afresh.
    """
    if holds is None:
        return episode, Move.NONE
    if episode is None:
        if not holds:
            return None, Move.NONE
        episode, started = Episode(since=now), True
    else:
        started = False
    if episode.opened_at is None:  # pending
        if not holds:
            return None, Move.DROP
        if now - episode.since >= rule.after:
            return replace(episode, opened_at=now), Move.OPEN
        return episode, Move.START if started else Move.NONE
    if holds:  # open, in alert
        if episode.clearing_since is not None:
            return replace(episode, clearing_since=None), Move.RESUME
        return episode, Move.NONE
    if episode.clearing_since is None:  # open, and the condition just stopped holding
        if rule.clear_after <= timedelta(0):
            return replace(episode, clearing_since=now, closed_at=now), Move.CLOSE
        return replace(episode, clearing_since=now), Move.CLEARING
    if now - episode.clearing_since >= rule.clear_after:
        return replace(episode, closed_at=now), Move.CLOSE
    return episode, Move.NONE


def tighter(kind: AlertKind, field: str, value: float, than: float) -> bool:
    """Whether ``value`` of a rule's ``field`` ("threshold" or "after") alerts at least as soon as
    ``than`` does: a higher idle threshold, a lower memory or temperature threshold, a shorter
    duration. The one direction rule of tightening (team settings may only tighten)."""
    if field == "after":
        return value <= than
    above = kind != AlertKind.IDLE
    return value <= than if above else value >= than


def tightest(kind: AlertKind, field: str, values: list[float]) -> float:
    """Of ``values`` of a rule's ``field``, the one that alerts soonest (:func:`tighter`)."""
    best = values[0]
    for value in values[1:]:
        if tighter(kind, field, value, best):
            best = value
    return best
