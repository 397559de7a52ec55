"""Alerts on a workload's GPUs, once per reconcile cycle: the episodes of :mod:`workloads.telemetry.alert_rules`, kept in the database.

The cycle hands :func:`observe` what it measured of each running workload of one cluster
(utilization, memory, temperature). For each workload and alert kind the pure
:func:`~workloads.telemetry.alert_rules.step` says how its episode moves, with the team's rules
(:func:`workloads.telemetry.alert_settings.rules_for`); the move is written here:

* every move is a conditional update on the episode's state (and ``clearing_since``), so a
  cycle replayed, or racing another, moves an episode once; a new pending episode is an insert
  that the one-active-episode constraint turns into a no-op when a racing cycle wrote it first;
* the move to *open* sends :data:`workloads.events.alert_opened` inside its transaction: the
  receiver (notifications) records the episode's one message with it, and nothing else ever
  sends one for the episode;
* a workload that no longer holds its quota (it ended, or was queued again) has its episode
  closed (a pending one dropped), silently: the alert was about work that is no longer there;
  so has one that now runs on another cluster (another attempt), by the cycle of the cluster it
  left.

Cost per cycle: two queries when nothing is in alert (the team rules, the active episodes),
whatever the number of workloads; then one query per kind to load the workloads that are, and
writes only when an episode moves (a workload idle for hours writes nothing per cycle).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Q

from cluster.backends.base import WorkloadTelemetry
from workloads import idle
from workloads.events import alert_opened
from workloads.identity import WorkloadId
from workloads.models import AlertEpisode, TeamAlertSettings
from workloads.registry import Bursts, kind_of, pks_by_kind
from workloads.telemetry.alert_rules import AlertKind, Episode, Move, Rule, figure, step, tightest, worst_gpu
from workloads.telemetry.alert_settings import platform_rules, rules_for

logger = logging.getLogger(__name__)

State = AlertEpisode.State


def observe(cluster, telemetry: Mapping[WorkloadId, WorkloadTelemetry], now: datetime) -> list[tuple[str, AlertKind, Move]]:
    """Move the alert episodes of ``cluster``'s workloads by this cycle's figures; returns the moves written.

    ``telemetry``: the figures of each workload measured this cycle (absent: not measured, which
    moves nothing); figures of workloads placed on another cluster are that cluster's to judge
    (a cycle's report may carry several clusters' readings). Episodes of workloads that stopped
    holding quota are closed.
    """
    # 1. The rules: the platform's, and each team's that tightened them (a small table, read whole).
    platform = platform_rules()
    own = {row.team_id: row for row in TeamAlertSettings.objects.all()}
    # 2. Which workloads are in alert under the most sensitive rule of any team, and the active
    #    episodes (this cluster's, and any of those workloads'): only these are loaded.
    sensitive = _most_sensitive(platform, own.values())
    candidates = {wid for wid, figures in telemetry.items()
                  if any(sensitive[kind].holds(figure(kind, figures)) for kind in AlertKind)}
    active = list(AlertEpisode.objects.filter(Q(cluster=cluster) | Q(ref__in=[w.ref for w in candidates]))
                  .exclude(state=State.CLOSED))
    episodes = {(e.ref, e.alert_kind): e for e in active}
    refs = {w.ref for w in candidates} | {e.ref for e in active}
    workloads = _load(refs)
    # 3. Each workload's episodes, kind by kind.
    moves: list[tuple[str, AlertKind, Move]] = []
    for ref in sorted(refs):
        workload = workloads.get(ref)
        gone = workload is None or workload.state not in workload.HOLDING_STATES
        here = not gone and workload.cluster_id == cluster.pk
        rules = rules_for(own.get(workload.team_id), platform) if here else {}
        figures = telemetry.get(WorkloadId.from_ref(ref)) if here else None
        for kind in AlertKind:
            row = episodes.get((ref, kind))
            if not here:
                # Ended or queued again: its episodes are over. Running on another cluster (placed
                # there since, or read by that cluster's cycle): only what this cluster followed ends.
                if row is not None and (gone or row.cluster_id == cluster.pk) and _end(row, now):
                    moves.append((ref, kind, Move.CLOSE if row.state == State.OPEN else Move.DROP))
                continue
            value = _value(kind, figures, workload)
            rule = rules[kind]
            after, move = step(_episode(row), rule.holds(value), now, rule)
            if move != Move.NONE and _write(move, row, after, workload, kind, rule, value, figures, now, cluster):
                moves.append((ref, kind, move))
    return moves


def _most_sensitive(platform: dict[AlertKind, Rule], rows) -> dict[AlertKind, Rule]:
    """Per kind, the platform's rule with the threshold of whichever team alerts soonest: a figure no
    team's rule holds for passes this one too (and is not looked at further)."""
    teams = [rules_for(row, platform) for row in rows]
    rules = {}
    for kind, rule in platform.items():
        threshold = tightest(kind, "threshold", [rule.threshold, *(team[kind].threshold for team in teams)])
        rules[kind] = Rule(kind, threshold, rule.above, rule.after, rule.clear_after)
    return rules


def _value(kind: AlertKind, figures: WorkloadTelemetry | None, workload) -> float | None:
    """``kind``'s figure of ``workload`` this cycle (None: not measured). Idle is measured against the
    workload's unit (:func:`workloads.idle.of_units`), as idle waste is."""
    if figures is None:
        return None
    value = figure(kind, figures)
    if kind == AlertKind.IDLE and value is not None:
        return idle.of_units(value, workload.flavor)
    return value


def _load(refs) -> dict:
    """``ref -> workload`` (with team and flavor) of the workloads among ``refs`` that exist: one query per kind."""
    found = {}
    for kind, pks in pks_by_kind(refs).items():
        for workload in kind.model.objects.filter(pk__in=pks).select_related("team", "flavor"):
            found[workload.ref] = workload
    return found


def _episode(row: AlertEpisode | None) -> Episode | None:
    if row is None:
        return None
    return Episode(since=row.since, opened_at=row.opened_at, clearing_since=row.clearing_since)


def _write(move: Move, row: AlertEpisode | None, episode: Episode, workload, kind: AlertKind, rule: Rule,
           value: float | None, figures: WorkloadTelemetry, now: datetime, cluster) -> bool:
    """Write one move (steps as :class:`~workloads.telemetry.alert_rules.Move` names them); False when a racing
    cycle moved the episode first (nothing written then)."""
    if row is None:
        # A new episode: pending first (even when it opens at once, so that its one message is sent
        # by the one move that can happen only once: pending → open). A racing cycle's insert wins.
        row = AlertEpisode(ref=workload.ref, alert_kind=kind, team_id=workload.team_id, cluster_id=cluster.pk,
                           since=episode.since)
        AlertEpisode.objects.bulk_create([row], ignore_conflicts=True)
        if move == Move.START:
            return True
        row = AlertEpisode.objects.filter(ref=row.ref, alert_kind=kind, state=State.PENDING).first()
        if row is None:
            return False
    episodes = AlertEpisode.objects.filter(pk=row.pk)
    if move == Move.DROP:
        return bool(episodes.filter(state=State.PENDING).delete()[0])
    if move == Move.OPEN:
        return _open(row, workload, rule, value, worst_gpu(kind, figures), now)
    if move == Move.CLEARING:
        return bool(episodes.filter(state=State.OPEN, clearing_since__isnull=True).update(clearing_since=now))
    if move == Move.RESUME:
        return bool(episodes.filter(state=State.OPEN, clearing_since=row.clearing_since).update(clearing_since=None))
    # Move.CLOSE
    return bool(episodes.filter(state=State.OPEN, clearing_since=row.clearing_since).update(
        state=State.CLOSED, closed_at=now, clearing_since=episode.clearing_since))


def _open(row: AlertEpisode, workload, rule: Rule, value: float | None, gpu: str, now: datetime) -> bool:
    """Pending → open, with what the alert says, and its one message, in one transaction."""
    kind = kind_of(workload)
    facts = {"value": value, "threshold": rule.threshold, "after_minutes": int(rule.after.total_seconds() // 60),
             "gpu": gpu[:120]}
    if row.alert_kind == AlertKind.IDLE:
        facts.update(cost_per_hour=wasting_per_hour(workload), at_minimum=Bursts.of(kind).at_minimum(workload))
    with transaction.atomic():
        if not AlertEpisode.objects.filter(pk=row.pk, state=State.PENDING).update(state=State.OPEN, opened_at=now,
                                                                                   **facts):
            return False
        for name, fact in facts.items():
            setattr(row, name, fact)
        row.state, row.opened_at = State.OPEN, now
        alert_opened.send(sender=AlertEpisode, episode=row, workload=workload)
    logger.info("alert %s opened for %s (%s)", row.alert_kind, row.ref, value)
    return True


def _end(row: AlertEpisode, now: datetime) -> bool:
    """The workload stopped holding quota: its pending episode goes, its open one closes (nothing is sent)."""
    episodes = AlertEpisode.objects.filter(pk=row.pk, state=row.state)
    if row.state == State.PENDING:
        return bool(episodes.delete()[0])
    return bool(episodes.update(state=State.CLOSED, closed_at=now))


def wasting_per_hour(workload) -> Decimal:
    """What ``workload``'s idle GPUs cost per hour: its running units at its price (the one cost-per-hour
    rule, :meth:`workloads.models.Workload.cost_per_hour_at`)."""
    return workload.cost_per_hour_at(workload.open_units)


#: The most episodes that ended a detail page lists (newest first).
PAST_ALERTS = 5


def alert_context(workload) -> dict:
    """Template context of a detail page's alerts (``workloads/_alerts.html``), one query: those its team
    is told about (the hot-GPU alert is staff's), newest first — ``alerts``, the open ones, and
    ``past_alerts``, the last :data:`PAST_ALERTS` that were sent and have closed since.

    An episode closes when its workload stops holding quota (it ended, or was queued again), so an
    OOM-risk alert that opened near a run's end (the demo's yolo-train: open at 9 min, ended at 12)
    was gone from the page by the time its message brought anyone there (issue 46): what the team was
    told stays on the page, in the past tense. A pending episode was never sent: not shown."""
    rows = list(AlertEpisode.objects.filter(ref=workload.ref, state__in=(State.OPEN, State.CLOSED),
                                            opened_at__isnull=False)
                .exclude(alert_kind=AlertKind.HOT).order_by("-opened_at", "-pk"))
    return {"alerts": [row for row in rows if row.state == State.OPEN],
            "past_alerts": [row for row in rows if row.state == State.CLOSED][:PAST_ALERTS]}
