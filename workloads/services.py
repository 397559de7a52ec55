"""User-facing actions every workload kind shares; each kind's own services call these.

* :func:`admit_new` admits a just-recorded workload (in the caller's transaction) and has its
  objects applied after commit;
* :func:`end_by_user` ends it for a user (cancel, delete) and has its objects deleted;
* :func:`manifests`, :func:`logs` (of any of its pods), :func:`log_file` (one pod's whole log, for
  the page's and the API's downloads) and :func:`events` read what the cluster layer has for it.

Access checks stay with the caller (each kind's service checks roles before calling here).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce

from django.core.paginator import Page, Paginator
from django.db import DatabaseError
from django.db.models import Count, Exists, Q, QuerySet
from django.utils import timezone

import fleet.services as fleet
from billing import ledger, reserved
from billing.models import PreemptionEvent, QuotaHold, flavor_price
from cluster.backends.base import ClusterEvent
from cluster.errors import ClusterError
from cluster.pods import LogSource, log_sources
from core.money import ZERO
from core.queueing import publish_on_commit
from core.writes import Write, run_together, update_of
from fleet.models import GpuFlavor, unknown_flavor
from quotas import admission
from quotas.constants import FLAVOR_CODES, AdmissionCode
from quotas.decide import Decision
from workloads import attempts, lifecycle, provisioning, tasks
from workloads.constants import Message
from workloads.identity import WorkloadId
from workloads.models import ReasonCode, Workload, attach_segments, cost_to, quote_rows
from workloads.registry import kind_for, kind_of, kinds


def admit_new(workload, recorded: Callable[[Decision, datetime], Sequence[Write]] | None = None) -> Decision:
    """Admit ``workload`` (just created, in the caller's transaction) and record the outcome.

    Admitted: its state moves to the kind's admitted state and the apply task is published
    after commit (the reconciler re-drives it if that is lost); it carries its hold's
    borrowed units as list rows do (``borrowed_held``), so the API's response to the submission
    reads nothing back. Queued: it waits with the plain-words reason. Rejected: nothing is
    changed here; the caller raises its field error and its transaction rolls the row back.

    ``recorded(decision, now)``: the caller's rows of the outcome (its audit row, an endpoint's
    first scaling event; :mod:`core.writes`), written with the state move — when admitted, in
    the hold's round trip under the team's lock (:func:`quotas.admission.admit`). Not
    called for a rejection.
    """
    kind = kind_of(workload)
    lc, recorded_state = kind.lifecycle, workload.state
    # Just created, it holds no hold yet: its money (its price quote for the request) needs no read of
    # its holds; admitted, the hold written here has no segment open either (billing opens on the cluster).
    workload.segment_is(None)

    def moved(decision: Decision, now: datetime) -> list[Write]:
        """The state move (only from the state the row was recorded in), then the caller's rows."""
        if decision.admitted:
            values = {"state": lc.admitted, "admitted_at": now, "reason": Message.WAITING_FOR_WORKER,
                      "reason_code": ReasonCode.WAITING_FOR_WORKER}
        else:
            values = {"state": lc.queued, "reason": decision.reason.words[:500], "reason_code": ReasonCode.QUEUED}
        for field, value in values.items():
            setattr(workload, field, value)
        move = update_of(Workload.objects.filter(uid=workload.uid, state=recorded_state), **values)
        return [move, *(recorded(decision, now) if recorded is not None else ())]

    decision = admission.admit(workload.team, kind.admission_request(workload), workload.ref, moved)
    if decision.rejected:
        return decision
    if decision.admitted:
        workload.borrowed_held = decision.borrows  # what admission just wrote on the hold
        if not decision.reserved:  # in no window, and not lent (placement lends): nothing to read back
            workload.window_held, workload.lent_held = None, False
        enqueue_apply(workload.identity)
    elif not all(run_together(moved(decision, timezone.now()))):
        raise DatabaseError(f"queueing {workload.ref}: a write touched no row")
    return decision


def rejection_errors(decision: Decision, per_node: str, total: str) -> dict[str, list[str]]:
    """A refused admission as the field errors of a submission, on the field the user has to change: the
    flavor; ``per_node`` (the units each pod asks) past the largest node; ``total`` (what sets the units in
    all) past the quota; else the form as a whole. Every kind's submit says its refusals so."""
    code = decision.reason.code
    field = ("flavor" if code in FLAVOR_CODES else per_node if code == AdmissionCode.EXCEEDS_LARGEST_NODE
             else total if code == AdmissionCode.EXCEEDS_QUOTA else "non_field_errors")
    return {field: [decision.reason.words]}


def check_flavor_and_name(model, team, flavor_name: str, name: str, name_taken: str,
                          cluster_selector: dict | None = None) -> tuple[GpuFlavor | None, dict[str, list[str]]]:
    """A submission's database checks: the flavor called ``flavor_name`` and field errors.

    Errors: an unknown or retired flavor, ``name_taken`` when active ``model`` work of
    ``team`` already has ``name``, and a ``cluster_selector`` no cluster matches (it could never
    be placed). One query when the flavor exists and no selector is given (most submissions).
    """
    taken = model.objects.filter(team=team, name=name).unfinished()
    flavor = GpuFlavor.objects.filter(name=flavor_name).annotate(name_taken=Exists(taken)).first()
    errors: dict[str, list[str]] = {}
    if flavor is None:
        errors["flavor"] = [unknown_flavor(flavor_name)]
    elif flavor.refusal():
        errors["flavor"] = [flavor.refusal()]
    if flavor.name_taken if flavor is not None else taken.exists():
        errors["name"] = [name_taken]
    if cluster_selector and not any(cluster_selector.items() <= c.labels.items() for c in fleet.clusters()):
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(cluster_selector.items()))
        errors["cluster_selector"] = [f"No cluster carries the labels {wanted}: it could never be placed."]
    return flavor, errors


def reservation_errors(team, flavor: GpuFlavor | None, reservation_id: int | None, units: int,
                       spot: bool) -> dict[str, list[str]]:
    """A submission's ``for_reservation`` as a field error (:func:`billing.reserved.naming_refusal`, the one
    rule), or {} when it names none, may name it, or the flavor is already refused. Every kind's submission, dry
    run and New form ask it alike."""
    if reservation_id is None or flavor is None:
        return {}
    words = reserved.naming_refusal(team.pk, flavor.pk, reservation_id, units, spot, timezone.now())
    return {"for_reservation": [words]} if words else {}


TARGETED = " \u00b7 targeted"  # after a targeted booking's label


def reservation_choices(team) -> list[tuple[str, str]]:
    """The New forms' choices of ``for_reservation``: none, then the team's reservations not over, each labelled
    from its next window ("#12 · 8× h100-80gb · next window Thu 09:00–17:00 UTC · targeted")."""
    choices = [("", "None: the quota's rule (open bookings take it too)")]
    for booked in reserved.nameable(team.pk, timezone.now()):
        start, end = booked.next_start.astimezone(UTC), booked.next_end.astimezone(UTC)
        label = (f"#{booked.reservation_id} \u00b7 {booked.units}\u00d7 {booked.flavor} \u00b7 next window "
                 f"{start:%a %H:%M}\u2013{end:%H:%M} UTC{TARGETED if booked.targeted else ''}")
        choices.append((str(booked.reservation_id), label))
    return choices


def enqueue_apply(identity: WorkloadId) -> None:
    """Have the workload's objects (re)applied once the current transaction commits."""
    publish_on_commit(tasks.apply_workload, identity.prefix, identity.pk)


def end_by_user(workload, reason: str, code: ReasonCode = ReasonCode.ENDED_BY_USER) -> bool:
    """End ``workload`` (see :func:`workloads.lifecycle.end`) and have its objects deleted after commit
    (work of a kind without cluster objects has none: its end is the hold released, nothing to delete)."""
    if not lifecycle.end(workload, reason, code):
        return False
    if kind_of(workload).cluster_objects:
        publish_on_commit(tasks.delete_workload, workload.KIND_PREFIX, workload.pk)
    return True


def stop_with_notice(workload, reason: str, prune: bool) -> bool:
    """Stop ``workload`` through its checkpoint contract on its owner's behalf (:func:`workloads.lifecycle.stop`:
    a sweep's pruner, a sweep stopped); the notice and the graceful delete are given after commit. False when
    nothing moved."""
    kind = kind_of(workload)
    was_queued = workload.state == kind.lifecycle.queued
    if not lifecycle.stop(workload, reason, prune, timezone.now()):
        return False
    if was_queued:
        return True  # ended at once: it had no pods
    publish_on_commit(tasks.give_stop_notice, workload.KIND_PREFIX, workload.pk)
    return True


def manifests(workload) -> list[dict]:
    """The Kubernetes objects Slipway applies for ``workload`` (pure: no cluster call): while it has a
    ProvisioningRequest (an atomic elastic pool, docs/pools.md), that request and its PodTemplates first.

    Its env Secret is not among them (:mod:`workloads.secrets`): these are what pages and the API
    show, and the pods only reference the Secret.
    """
    return provisioning.shown(kind_of(workload), workload)


def on_cluster(workload) -> bool:
    """Whether the workload has (or had) objects on the cluster: before that there are no pods or events
    (and never for a kind without cluster objects: no cluster is asked for its logs or events)."""
    kind = kind_of(workload)
    lc = kind.lifecycle
    return kind.cluster_objects and (workload.state not in (lc.queued, lc.admitted) or workload.applied_at is not None)


@dataclass(frozen=True)
class Logs:
    """What a workload's log panel shows: the pods there are to pick from, the one shown, its lines.

    ``attempt``: the earlier attempt whose saved logs these are (None: the current attempt's,
    read from the cluster); ``saved_at``: when they were saved (None: read live).
    """

    sources: list[LogSource]
    shown: LogSource | None
    lines: list[str]
    attempt: int | None = None
    saved_at: datetime | None = None


class UnknownPod(LookupError):
    """A pod name that is none of the workload's pods (views answer 404, as for any object not theirs)."""


def _pick(sources: list[LogSource], pod: str) -> LogSource | None:
    """The source ``pod`` names (the first when empty); :class:`UnknownPod` when it names none."""
    shown = next((s for s in sources if s.key == pod), None) if pod else next(iter(sources), None)
    if pod and shown is None:
        raise UnknownPod(pod)
    return shown


def logs(workload, pod: str = "", tail: int | None = 200, attempt: int | None = None,
         since: datetime | None = None) -> Logs:
    """The last ``tail`` lines (all when None) of the workload's log source ``pod``, or of its default pod.

    ``pod`` is a :attr:`LogSource.key`: a pod's name, or ``<pod>:previous`` for a restarted
    PyTorchJob replica's earlier attempt. The default pod is a PyTorchJob's Master, a Job's
    newest attempt (:mod:`cluster.pods`).
    ``pod`` is checked against the workload's own pods first: a name from the user never
    reaches another workload's pod (:class:`UnknownPod`). Nothing to show before the workload
    is on the cluster or while the cluster cannot be reached.

    ``attempt``: an earlier attempt of a workload that was queued again (checked by
    :func:`workloads.attempts.attempt_of`), whose pods are gone: the logs saved of them
    (:mod:`workloads.attempts`). None, or the current attempt: read from the cluster — and, once
    the workload has ended and its pods are gone, what was saved of them while they stopped.
    ``since``: only the cluster's lines written from then on, each beginning with its time
    (:meth:`cluster.backends.base.ClusterBackend.logs`); saved logs are whole.
    """
    if attempt is not None and attempt != workload.attempt:
        return _saved_logs(workload, attempt, pod, tail)
    if not on_cluster(workload):
        if pod:
            raise UnknownPod(pod)
        return Logs([], None, [])
    backend = fleet.backend_at(workload.cluster_id)
    try:
        sources = log_sources(backend.pods(workload.address), workload.get_state_display().lower() if workload.is_final else "")
    except ClusterError:
        return Logs([], None, [])  # unreachable is not "no such pod": show nothing, answer no 404
    if not sources and workload.is_final and attempts.saved(workload, workload.attempt) is not None:
        # It ended on its own while its pods were stopping for a preemption: they are gone, their logs were saved.
        return _saved_logs(workload, workload.attempt, pod, tail)
    shown = _pick(sources, pod)
    if shown is None:
        return Logs(sources, None, [])
    try:
        if since is None:
            lines = backend.logs(workload.address, shown.pod, tail=tail, previous=shown.previous)
        else:
            lines = backend.logs(workload.address, shown.pod, tail=tail, previous=shown.previous, since=since)
    except ClusterError:
        lines = []  # e.g. the pod went between the two calls
    return Logs(sources, shown, lines)


def _saved_logs(workload, number: int, pod: str, tail: int | None) -> Logs:
    """What was saved of attempt ``number``'s pod ``pod`` (its first when empty); nothing when nothing was."""
    row = attempts.saved(workload, number)
    entries = row.logs if row is not None else []
    sources = [LogSource(e["pod"], e["label"], e["previous"]) for e in entries]
    shown = _pick(sources, pod)
    lines = entries[sources.index(shown)]["lines"] if shown is not None else []
    if tail is not None:
        lines = lines[-tail:]
    return Logs(sources, shown, list(lines), number, row.logs_saved_at if row is not None else None)


@dataclass(frozen=True)
class LogFile:
    """One pod's whole log as a download: its file name (after the pod) and its text, a line each."""

    filename: str
    text: str


def log_file(workload, pod: str = "", attempt: int | None = None) -> LogFile:
    """The whole log of the workload's pod named ``pod`` (its default pod when empty), as a file.

    :class:`UnknownPod` when ``pod`` is none of the workload's pods, as for :func:`logs`. "Whole"
    is up to the backend's cap for a full read (``LOG_BYTES_MAX`` on Kubernetes), so one download
    cannot exhaust the web process. Before the workload is on the cluster: an empty file named
    after the workload. ``attempt``: an earlier attempt's, as much as was saved of it
    (``<pod>-attempt-1.log``).
    """
    found = logs(workload, pod, None, attempt)
    name = workload.object_name if found.shown is None else (
        f"{found.shown.pod}-previous" if found.shown.previous else found.shown.pod)
    if found.attempt is not None:
        name = f"{name}-attempt-{found.attempt}"
    return LogFile(f"{name}.log", "".join(f"{line}\n" for line in found.lines))


def preemptions(workload) -> QuerySet:
    """The workload's preemption log, newest first (:class:`billing.models.PreemptionEvent`)."""
    return PreemptionEvent.objects.filter(ref=workload.ref).select_related("by_team", "flavor").order_by("-at", "-pk")


def events(workload) -> list[ClusterEvent]:
    """Cluster events about the workload's objects; [] when there are none or the cluster is unreachable."""
    if not on_cluster(workload):
        return []
    try:
        return fleet.backend_at(workload.cluster_id).events(workload.address)
    except ClusterError:
        return []


def team_summary(team, now: datetime | None = None) -> dict[str, dict]:
    """Per kind (by prefix): work holding quota (admitted or running), queued, and spend this month.

    One count query per kind, one ledger query and one for open segments: for the dashboard.
    """
    now = now or timezone.now()
    summary = {}
    for kind in kinds():
        model = kind.model
        summary[kind.prefix] = {"noun": kind.noun, **model.objects.filter(team=team).aggregate(
            holding=Count("pk", filter=Q(state__in=model.HOLDING_STATES)),
            queued=Count("pk", filter=Q(state=kind.lifecycle.queued)))}
    spent = ledger.spent_month_by_prefix(team, list(summary), now)
    for prefix, row in summary.items():
        row["spent_month"] = spent.get(prefix, ZERO)
    return summary


@dataclass(frozen=True)
class Waiting:
    """Admitted work the cluster has no room for yet: the workload, what people call its kind, its units."""

    workload: object
    noun: str
    units: int


def waiting_for_capacity() -> list[Waiting]:
    """Admitted work of every team that the cluster has no room for yet (its reason says so), oldest first.

    For the staff Capacity page; ``units`` is what each holds (and waits to run).
    """
    waiting = [Waiting(workload, kind.noun, workload.placement_shape[0])
               for kind in kinds()
               for workload in (kind.model.objects.holding_quota().filter(reason_code=ReasonCode.WAITING_FOR_CAPACITY)
                                .select_related("team", "flavor", "created_by"))]
    return sorted(waiting, key=lambda w: (w.workload.admitted_at or w.workload.created_at, w.workload.ref))


#: The staff list's sort orders: newest first, or costliest first.
SORTS = ("age", "cost")
#: Rows per page of the staff list; the page control reaches every matching workload.
STAFF_PAGE_SIZE = 100


@dataclass(frozen=True)
class StaffRow:
    """One workload of any team on the staff list, with its cost now."""

    workload: object
    noun: str
    units: int  #: what it asks for (all workers or replicas it may hold)
    cost: object


@dataclass(frozen=True)
class StaffPage:
    """One page of the staff list: its rows, and the page (number, count of pages and of workloads)."""

    rows: list[StaffRow]
    page: Page


def _staff_filtered(*, team: str, state: str, flavor: str, user: str):
    """The workloads of every kind matching the staff list's filters: one query on the one table."""
    workloads = Workload.objects.all()
    if state == "active":  # each kind's own active states
        workloads = workloads.filter(reduce(operator.or_, (Q(kind=kind.prefix, state__in=kind.model.ACTIVE_STATES)
                                                            for kind in kinds())))
    elif state:
        workloads = workloads.filter(state=state)
    if team:
        workloads = workloads.filter(team__slug=team)
    if flavor:
        workloads = workloads.filter(flavor__name=flavor)
    if user:
        workloads = workloads.filter(created_by__username=user)
    return workloads


def _by_cost(filtered, now: datetime) -> list[tuple]:
    """``(cost, created_at, prefix, pk)`` of every filtered workload, costliest first (newest first on a tie).

    The cost to the second includes the open segment, which SQL does not price: read each
    workload's billed cost (one narrow query on the one table) and the open segments of the
    holds (one query), and order here.
    """
    prices = GpuFlavor.objects.in_bulk()
    segments = {ref: (units, since, price) for ref, units, since, price in QuotaHold.objects.held().filter(
        open_units__gt=0).values_list("ref", "open_units", "billed_until", "charged_price")}
    keys = []
    for prefix, pk, created, billed, flavor_id, spot, cluster_id in filtered.values_list(
            "kind", "number", "created_at", "billed_cost", "flavor_id", "spot", "cluster_id"):
        units, since, charged = segments.get(WorkloadId(prefix, pk).ref, (0, None, None))
        price = charged if charged is not None else flavor_price(prices[flavor_id], spot, cluster_id)  # Workload.unit_price
        keys.append((cost_to(billed, price, units, since, now), created, prefix, pk))
    return sorted(keys, reverse=True)


def _by_age(filtered):
    """``(created_at, prefix, pk)`` of every filtered workload, newest first: one query the paginator
    counts and slices, so a page reads only its own keys however many match."""
    return filtered.order_by("-created_at", "-kind", "-number").values_list("created_at", "kind", "number")


def every_teams_workloads(*, team: str = "", state: str = "active", flavor: str = "", user: str = "",
                          sort: str = "age", page: int | str = 1, now: datetime | None = None) -> StaffPage:
    """One page of the runs and endpoints of every team, filtered and sorted, for platform staff.

    ``state``: "active" (queued or holding quota, the default), "" for all, or a state of some
    kind (kinds without it show none). ``sort``: "age" (newest first) or "cost" (costliest first).
    ``page``: 1-based; a number out of range or not a number gives the nearest page.

    Every matching workload is reachable, whatever their number. Newest first is ordered and
    sliced in SQL; costliest first reads every matching workload's billing columns (see
    :func:`_by_cost`). Then only the page's rows are loaded whole: a constant number of queries
    at any size and on any page.
    """
    now = now or timezone.now()
    filtered = _staff_filtered(team=team, state=state, flavor=flavor, user=user)
    shown = Paginator(_by_cost(filtered, now) if sort == "cost" else _by_age(filtered), STAFF_PAGE_SIZE).get_page(page)
    keys = [key[-2:] for key in shown]  # (prefix, pk)
    wanted: dict[str, list[int]] = {}
    for prefix, pk in keys:
        wanted.setdefault(prefix, []).append(pk)
    loaded = {prefix: kind_for(prefix).model.objects.select_related("team", "flavor", "created_by").in_bulk(pks)
              for prefix, pks in wanted.items()}
    attach_segments([workload for by_pk in loaded.values() for workload in by_pk.values()])
    quote_rows(workload for by_pk in loaded.values() for workload in by_pk.values())
    rows = []
    for prefix, pk in keys:
        kind, workload = kind_for(prefix), loaded[prefix].get(pk)
        if workload is not None:  # deleted between the two reads
            rows.append(StaffRow(workload, kind.noun, workload.placement_shape[0], workload.cost_at(now)))
    return StaffPage(rows, shown)
