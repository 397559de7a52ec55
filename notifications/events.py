"""Recording events: one row per thing that happened, written where it happened, keyed so it is written once.

The receivers (:mod:`notifications.receivers`) call these *inside* the transaction of the state
move they report, so the event commits or rolls back with the move; a replayed move writes
nothing (its conditional update failed, no signal was sent) and a replayed row is a no-op
(``ON CONFLICT (key) DO NOTHING``). Nothing here calls out or publishes: fan-out and delivery
run in Celery tasks after commit, so the reconcile cycle pays one INSERT per event and never
waits for a mail server or a webhook.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Max, Q
from django.utils.text import capfirst

from billing.ledger import RefLabel
from core.formatting import format_money, format_rate, format_when
from notifications import vocabulary
from notifications.constants import EventKind
from notifications.models import Event
from quotas.models import QueuedRequest
from reservations import events as reservation_events
from reservations import services as reservation_services
from sweeps import services as sweep_services
from workloads.models import Attempt
from workloads.registry import Bursts, Pages, kind_of, kinds, label_of, labels
from workloads.telemetry.alert_rules import AlertKind


def record(kind: str, team, key: str, title: str, text: str, ref: str = "", **details) -> str:
    """Write the event ``key`` unless it exists; returns the key (fan it out after commit).

    ``title`` and ``text`` are for people and stand alone (an e-mail's subject and body, a Slack
    message): each names the team, and the workload as :func:`named` says it — never a bare ref,
    which ``ref`` and ``details`` keep for machines.

    Both are one line (docs/notifications.md: Slack shows ``text`` as it is, a title is a subject): they carry words
    people typed (a reservation's name, a decline's reason) and a cluster's, which may hold line breaks, so every
    run of whitespace becomes one space here, where every event's words are written.
    """
    title, text = _one_line(title), _one_line(text)
    Event.objects.bulk_create([Event(key=key[:200], event_kind=kind, team=team, ref=ref, title=title[:200], text=text,
                                     details=details)],
                              ignore_conflicts=True)
    return key[:200]


def _one_line(words: str) -> str:
    return " ".join(words.split())


def named(label: RefLabel) -> str:
    """A workload at the start of a sentence: "Run train-llama (#12) of team nlp" (the one naming rule,
    :meth:`billing.ledger.RefLabel.words`)."""
    return capfirst(label.words())


def workload_moved(model: type, workload, state: str, reason: str, at: datetime) -> str | None:
    """The event of a workload's state move, if its kind declares that move one (``Announces.events``)."""
    event = vocabulary.moves().get((model, state))
    if event is None:
        return None
    title = f"{named(label_of(workload))} {event.verb}"
    # A run ends once; an endpoint may be degraded (a workspace paused) again: each time is its own event.
    key = f"{event.code}:{workload.ref}" if not event.repeated else f"{event.code}:{workload.ref}:{at.isoformat()}"
    if event.continued and reason:
        # The reason is the rest of the sentence about the workload, as a preemption's is: the verb said once.
        text = f"{named(label_of(workload))} {reason}"
    else:
        text = f"{title}: {reason}" if reason else f"{title}."
    return record(event.code, workload.team, key, title, text,
                  ref=workload.ref, state=state, reason=reason, name=workload.name, at=at.isoformat(),
                  owner=workload.created_by_id)


def preempted(event) -> str:
    """A :class:`billing.models.PreemptionEvent` just written (a reclaim, or an interruption: the title's verb is
    its cause's, :attr:`~billing.models.PreemptionEvent.interruption`, never the reason's words).

    Its ``reason`` says what happened and why as the rest of a sentence about the workload
    ("preempted: team vision reclaimed 4× a100-80gb of its quota; …",
    :func:`workloads.cycle.preemption.preempted_reason`), so the text is the workload's name followed by
    it: the verb is said once, never "preempted: preempted".
    """
    label = labels([event.ref]).get(event.ref) or RefLabel(event.ref, team=event.team.slug)
    title = f"{named(label)} {'interrupted' if event.interruption else 'preempted'}"
    return record(EventKind.PREEMPTED, event.team, f"{EventKind.PREEMPTED}:{event.pk}", title,
                  f"{named(label)} {event.reason}", ref=event.ref, reason=event.reason, cause=event.cause,
                  name=label.name, units=event.units, at=event.at.isoformat())


def budget_alert(audit_event) -> str:
    """The budget-alert audit event of a team's month (billing.services.enforce_budgets writes one a month)."""
    details = audit_event.details
    team = audit_event.team
    threshold = details.get("threshold_pct") or 100
    title = f"Team {team.slug} passed {threshold}% of its budget"
    text = (f"{title}: {details.get('spent')} of {details.get('limit')} {settings.SLIPWAY_CURRENCY} spent "
            f"this month ({audit_event.target}).")
    return record(EventKind.BUDGET_ALERT, team, f"{EventKind.BUDGET_ALERT}:{team.pk}:{audit_event.target}", title,
                  text, month=audit_event.target, spent=details.get("spent"), limit=details.get("limit"),
                  threshold_pct=threshold)


def long_waits(now: datetime) -> list[str]:
    """Record an event for every workload queued for longer than ``SLIPWAY_NOTIFY_QUEUED_MINUTES``.

    Once per stay in the queue: the key carries the workload's ``attempt``, which a requeue (a
    preemption, a lost cluster) or a workspace's resume increases, and a stay starts as
    :func:`_stays_started` says. Returns the keys written now. Two statements per kind plus three,
    however many wait.
    """
    minutes = settings.SLIPWAY_NOTIFY_QUEUED_MINUTES
    cutoff = now - timedelta(minutes=minutes)
    waiting = []
    for kind in kinds():
        # Queued since before the cutoff at most (a stay starts no earlier than these): the few left are judged below.
        rows = (kind.model.objects.filter(state=kind.lifecycle.queued)
                .filter(Q(last_preempted_at__isnull=True, created_at__lte=cutoff) | Q(last_preempted_at__lte=cutoff))
                .select_related("team"))
        waiting += [(kind, row, f"{EventKind.QUEUE_WAITING}:{row.ref}:{row.attempt}") for row in rows]
    started = _stays_started([row for _k, row, _key in waiting])
    waiting = [(kind, row, key) for kind, row, key in waiting if started[row.ref] <= cutoff]
    known = set(Event.objects.filter(key__in=[key for _k, _r, key in waiting]).values_list("key", flat=True))
    fresh = [(kind, row, key) for kind, row, key in waiting if key not in known]
    for _kind, row, key in fresh:
        # "queued", not "waited for quota": the reason says what it waits for (quota, budget, a cluster).
        title = f"{named(label_of(row))} has been queued for over {minutes} min"
        record(EventKind.QUEUE_WAITING, row.team, key, title, f"{title}: {row.reason}", ref=row.ref,
               reason=row.reason, name=row.name, minutes=minutes)
    return [key for _k, _r, key in fresh]


def _stays_started(rows) -> dict[str, datetime]:
    """When each queued workload's stay in the queue began: the latest of its submission, its last preemption, the end
    of its last attempt (a requeue after a preemption or a lost cluster: its queue entry keeps its submission's date,
    for its place) and its queue entry's date (a workspace resumed is queued anew). Two statements, for all of them.

    Its submission or last preemption alone told a run taken off a lost cluster, or a workspace resumed into a full
    quota, that it had waited for over 30 minutes a minute after it was queued again."""
    begun = {row.ref: max(at for at in (row.created_at, row.last_preempted_at) if at is not None) for row in rows}
    if not begun:
        return begun
    ended = (Attempt.objects.filter(ref__in=list(begun), ended_at__isnull=False).values("ref")
             .annotate(last=Max("ended_at")).values_list("ref", "last"))
    queued = QueuedRequest.objects.filter(ref__in=list(begun)).values_list("ref", "created_at")
    for ref, at in [*ended, *queued]:
        begun[ref] = max(begun[ref], at)
    return begun


#: The event kind of each alert kind's episode.
ALERTS = {AlertKind.IDLE: EventKind.GPU_IDLE, AlertKind.MEMORY: EventKind.GPU_MEMORY, AlertKind.HOT: EventKind.GPU_HOT}


def portal_url(path: str) -> str:
    """``path`` on the portal as people reach it (``SLIPWAY_PORTAL_URL``): a link a message can carry."""
    return f"{settings.SLIPWAY_PORTAL_URL.rstrip('/')}{path}" if path else ""


def alert_opened(episode, workload) -> str:
    """The one event of an alert episode that just opened (:mod:`workloads.telemetry.alerts`), keyed by the episode.

    Idle GPUs: what they cost per hour (the episode's figure, from the one cost-per-hour rule)
    and the page that ends the workload — or, for an endpoint idle at its minimum replicas,
    that this is the capacity it keeps ready and how to scale it to zero. Memory: the risk of an
    OOM kill. Temperature: for platform staff, naming the GPU and the cluster.
    """
    kind = AlertKind(episode.alert_kind)
    name = named(label_of(workload))
    minutes = episode.after_minutes or 0
    details = {"alert": kind.value, "name": workload.name, "value": episode.value, "threshold": episode.threshold,
               "minutes": minutes, "since": episode.since.isoformat(), "at": episode.opened_at.isoformat(),
               "gpu": episode.gpu}
    if kind == AlertKind.IDLE:
        title, text, link = _idle_words(episode, workload, name, minutes)
        details.update(cost_per_hour=str(episode.cost_per_hour), currency=settings.SLIPWAY_CURRENCY,
                       at_minimum=episode.at_minimum, url=link)
    elif kind == AlertKind.MEMORY:
        title = f"{name}: GPU memory {episode.value:.0f}% full (OOM risk)"
        text = (f"{title}: over {episode.threshold:g}% of a GPU's memory has been in use for {minutes} min"
                f"{_on_gpu(episode)}, so the next allocation may fail (OOMKilled). A smaller batch, or a flavor "
                f"with more GPU memory, leaves room: {portal_url(workload.get_absolute_url())}")
        details["url"] = portal_url(workload.get_absolute_url())
    else:
        cluster = episode.cluster.name if episode.cluster_id else ""
        title = f"GPU too hot: {episode.value:.0f} °C under {label_of(workload).words()}"
        text = (f"{f'GPU {episode.gpu}' if episode.gpu else 'A GPU'} has been over {episode.threshold:g} °C for {minutes} min "
                f"({episode.value:.0f} °C now) running {label_of(workload).words()}"
                f"{f' on cluster {cluster}' if cluster else ''}: it throttles. Cooling or the GPU itself needs a "
                f"look — a hardware matter for platform staff; the team is not told.")
        details["cluster"] = cluster
    key = f"{ALERTS[kind]}:{workload.ref}:{episode.pk}"
    return record(ALERTS[kind], workload.team, key, title, text, ref=workload.ref, **details)


def _idle_words(episode, workload, name: str, minutes: int) -> tuple[str, str, str]:
    """(title, text, link) of an idle alert: waste to cancel, or an endpoint's minimum to scale to zero."""
    kind = kind_of(workload)
    figure = f"utilization {episode.value:.0f}%, under {episode.threshold:g}%"
    per_hour = format_rate(episode.cost_per_hour)
    if episode.at_minimum:
        link = portal_url(Bursts.of(kind).minimum_url(workload))
        title = f"{name}: GPUs idle for {minutes} min at its minimum replicas"
        text = (f"{title} ({figure}; {per_hour} per hour). That is the capacity it keeps ready to answer at once, "
                f"not idle waste like a forgotten run: if its users can wait for a cold start, set its minimum "
                f"replicas to 0 so it scales to zero when nobody calls it (a request-driven autoscale metric "
                f"wakes it): {link}")
        return title, text, link
    link = portal_url(Pages.of(kind).end_url(workload))
    title = f"{name}: GPUs idle for {minutes} min, wasting {per_hour} per hour"
    text = (f"{title} ({figure}). If nobody needs it, {Pages.of(kind).end_verb.lower()} it: {link}")
    return title, text, link


def _on_gpu(episode) -> str:
    """" on GPU <id>" when the exporter named the GPU, else ""."""
    return f" on GPU {episode.gpu}" if episode.gpu else ""


#: How a booking's move reads after its name.
RESERVATION_WORDS = {reservation_events.BOOKED: "booked", reservation_events.APPROVED: "approved",
                     reservation_events.DECLINED: "declined", reservation_events.CANCELLED: "cancelled"}
#: How long before a window's start its first notice goes out, and how late its "started" notice may still go.
WINDOW_NOTICE, WINDOW_STARTED_GRACE = timedelta(minutes=15), timedelta(minutes=10)
#: How far into a window its units may stay unused before the team is told.
WINDOW_UNUSED = timedelta(minutes=30)


def _booking(reservation) -> str:
    return (f"{reservation.units}\u00d7 {reservation.flavor.name} on {reservation.cluster.name}, "
            f"{format_when(reservation.start)}–{format_when(reservation.end)}")


def reservation_moved(reservation, move: str, at: datetime) -> str:
    """A booking made, approved, declined or cancelled (reservations.events.reservation_moved), keyed by the move."""
    verb = "waits for approval" if move == reservation_events.BOOKED and reservation.state == "pending" else \
        RESERVATION_WORDS[move]
    title = f"Reservation {reservation.name} of team {reservation.team.slug} {verb}"
    count = len(reservation_services.windows_of(reservation)) if move != reservation_events.DECLINED else 0
    windows = f" and {count - 1} more window{'s' if count > 2 else ''}" if count > 1 else ""
    text = f"{title}: {_booking(reservation)}{windows}, {format_money(reservation.price)}."
    if move == reservation_events.DECLINED and reservation.decline_reason:
        text += f" Why: {reservation.decline_reason}"
    return record(EventKind.RESERVATION, reservation.team, f"{EventKind.RESERVATION}:{reservation.ref}:{move}", title,
                  text, ref=reservation.ref, move=move, name=reservation.name, at=at.isoformat(),
                  owner=reservation.created_by_id)


def sweep_finished(sweep, at: datetime) -> str:
    """A sweep ended (sweeps.events.sweep_finished): its best trial, its trials by state, the money it spent and
    what pruning saved (:func:`sweeps.services.saved_by_pruning`). Once per sweep."""
    figures = sweep_services.figures(sweep, at)
    best = figures.best
    title = f"Sweep {sweep.name} of team {sweep.team.slug} {sweep.get_state_display().lower()}"
    counts = ", ".join(f"{count} {state}" for state, count in figures.counts.items() if count)
    saved = sweep_services.saved_by_pruning(sweep, figures)
    if best is not None:
        params = ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                           for name, value in best.params.items())
        found = f"best trial {sweep.trial_name(best.number)}: {sweep.metric} {best.value:.6g} ({params})"
    else:
        found = f"no trial completed with a value of {sweep.metric}"
    text = (f"{title}: {found}. Trials: {counts or 'none'}. Spent {format_money(figures.spend.spent, sweep.currency)}"
            f"; pruning saved about {format_money(saved, sweep.currency)}.")
    if sweep.reason:
        text += f" It {sweep.reason}."
    return record(EventKind.SWEEP_FINISHED, sweep.team, f"{EventKind.SWEEP_FINISHED}:{sweep.pk}", title, text,
                  sweep=sweep.pk, name=sweep.name, state=sweep.state, at=at.isoformat(), owner=sweep.created_by_id,
                  best=None if best is None else {"number": best.number, "name": sweep.trial_name(best.number),
                                                  "value": best.value, "params": best.params},
                  spent=str(figures.spend.spent.quantize(Decimal("0.01"))),
                  saved=str(saved.quantize(Decimal("0.01"))), currency=sweep.currency)


def reservation_windows(now: datetime) -> list[str]:
    """Record the notices of booked windows: one 15 minutes before a window starts, one once it has started (up to
    :data:`WINDOW_STARTED_GRACE` late, should the beat have been down). Each once, keyed by the window."""
    keys = []
    for reservation, window in reservation_services.windows_starting(now - WINDOW_STARTED_GRACE, now + WINDOW_NOTICE):
        started = window.start <= now
        key = f"{EventKind.RESERVATION_WINDOW}:{reservation.ref}:{window.start.isoformat()}:{'started' if started else 'soon'}"
        if Event.objects.filter(key=key).exists():
            continue
        when = "has started" if started else f"starts at {format_when(window.start)}"
        title = f"Reservation {reservation.name} of team {reservation.team.slug} {when}"
        text = (f"{title}: {reservation.units}\u00d7 {reservation.flavor.name} on {reservation.cluster.name} until "
                f"{format_when(window.end)}.")
        keys.append(record(EventKind.RESERVATION_WINDOW, reservation.team, key, title, text, ref=reservation.ref,
                           start=window.start.isoformat(), end=window.end.isoformat(), started=started))
    return keys + _windows_unused(now) + _windows_ended(now)


def _window_key(reservation, window, what: str) -> str:
    return f"{EventKind.RESERVATION_WINDOW}:{reservation.ref}:{window.start.isoformat()}:{what}"


def _windows_unused(now: datetime) -> list[str]:
    """"Still unused 30 minutes in": a window under way for :data:`WINDOW_UNUSED` whose holder ran nothing on it
    (as billed: ``workloads.cycle.windows.bill``), each once."""
    keys = []
    for reservation, window in reservation_services.windows_under_way(now - WINDOW_UNUSED - WINDOW_STARTED_GRACE,
                                                                       now - WINDOW_UNUSED):
        key = _window_key(reservation, window, "unused")
        if window.used_unit_hours or Event.objects.filter(key=key).exists():
            continue
        title = f"Reservation {reservation.name} of team {reservation.team.slug} is still unused"
        lent = f"; {window.lent_unit_hours.normalize():f} unit-hours lent to other teams" if window.lent_unit_hours else ""
        text = (f"{title} {int((now - window.start).total_seconds() // 60)} minutes in: {reservation.units}\u00d7 "
                f"{reservation.flavor.name} on {reservation.cluster.name} until {format_when(window.end)}{lent}. "
                "Its idle units are charged to the team; cancel it to free the rest.")
        keys.append(record(EventKind.RESERVATION_WINDOW, reservation.team, key, title, text, ref=reservation.ref,
                           start=window.start.isoformat(), end=window.end.isoformat(), unused=True))
    return keys


def _windows_ended(now: datetime) -> list[str]:
    """A window over and billed to its end: how much of it its team used, lent and left idle, and what it cost."""
    keys = []
    for reservation, window in reservation_services.windows_ended(now - WINDOW_STARTED_GRACE, now):
        key = _window_key(reservation, window, "ended")
        if Event.objects.filter(key=key).exists():
            continue
        use = reservation_services.WindowUse.of_window(reservation, window)  # the Usage card's figures
        title = f"Reservation {reservation.name} of team {reservation.team.slug} ended"
        text = (f"{title}: used {use.used_percent} % of its {use.unit_hours.quantize(Decimal('0.01')).normalize():f} "
                f"unit-hours, {use.lent_percent} % lent to other teams (credited); idle units cost "
                f"{format_money(use.idle_cost)}.")
        keys.append(record(EventKind.RESERVATION_WINDOW, reservation.team, key, title, text, ref=reservation.ref,
                           start=window.start.isoformat(), end=window.end.isoformat(), used_percent=use.used_percent,
                           lent_percent=use.lent_percent, idle_cost=str(use.idle_cost.quantize(Decimal("0.01")))))
    return keys
