"""Admission: the admission lock and every write of what :func:`quotas.decide.decide` decided.

* :func:`admit` runs one transaction: take the team's admission lock (:func:`teams.services.lock_team`),
  read the quota and sum the active holds *after* it is held (sent with the lock in one round trip,
  each read its own statement behind it: :func:`core.rawsql.read_together`), decide, and write a
  hold (with the caller's rows of the admission — the workload's state move, its audit
  row — in one statement: :mod:`core.writes`) or a queue entry. Concurrent admissions for one team therefore serialise on the
  lock and each sees the holds of the ones before it: the platform never over-admits.
* :func:`release` frees a workload's units (idempotent); :func:`admit_waiting` then admits
  queued work that fits, in queue order (priority, then FIFO), best-effort: a small request
  may pass a large one that does not fit yet (:func:`queue_order`; in a cohort the fair-share
  :func:`fair_order`, which the start estimates replay too).
* :func:`requeue` puts preempted work back at its old place; :func:`resize` grows or shrinks a
  hold (an endpoint's burst) by the same rule.
* Every decision :func:`admit` takes is counted by its :attr:`~quotas.decide.Decision.label`, with
  the time it took (``/metrics``, :mod:`core.metrics`); queued work admitted later counts once more.
* Clusters (issue 34): work of a flavor that only draining, degraded or lost clusters offer
  waits in the queue with :data:`~quotas.constants.AdmissionCode.WAITING_FOR_CLUSTER`, holding
  nothing, and is admitted once a cluster that offers it is ready again. Whether one is, is
  worked out outside :func:`~quotas.decide.decide` (:class:`quotas.facts.ClusterWaits`) and
  passed to it as data; every caller of it that admits new work passes it.
* Cohorts (docs/design.md "Sharing, preemption, clusters"): a team in a cohort may borrow what other members leave unused
  (:class:`~quotas.decide.FlavorQuota` holds the rule); its admissions take the cohort's lock
  after the team's (:func:`lock_admission`), and its queue is re-admitted with the whole cohort's.

The rule itself is pure (:mod:`quotas.decide`), the figures it is given are read by
:mod:`quotas.facts`, and what the queue looks like without the lock (positions, reasons, the
preview of an admission) is :mod:`quotas.queue`'s; this module holds what runs under the lock,
and :func:`preview_resize`, which asks a resize's very question without it.

Queued entries whose request can no longer ever fit (the quota was lowered, the flavor
retired, the budget spent) stay queued with that reason, so an admin can fix the quota and
the work continues; they leave the queue only by being admitted or released.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import lru_cache

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from billing import reserved
from billing.budget_rule import BudgetState
from billing.ledger import (
    closed_spend_subquery,
    committed,
    cost_ahead,
    hours_left_in_month,
    month_end,
    month_spend,
    month_start,
    open_groups_of,
    open_groups_statement,
)
from billing.models import QuotaHold, ReservedWindow, TeamBudget
from billing.pricing import dearest_sql
from billing.services import team_budget_state
from core import metrics
from core.money import ZERO
from core.priority import Priority
from core.rawsql import read_together, sql_decimal
from core.writes import Write, run_together
from fleet.constants import Health
from fleet.models import Cluster, GpuFlavor
from quotas import fairshare
from quotas.constants import AdmissionCode, Outcome
from quotas.decide import Decision, FlavorQuota, ResourceRequest, after_admitting, decide
from quotas.events import workload_admitted
from quotas.facts import (
    ClusterWaits,
    CohortFigures,
    Windows,
    cohort_figures,
    cohort_id_of,
    flavor_quota,
    in_use_of,
    request_of,
    team_quotas,
    units_in_use,
)
from quotas.models import Cohort, QueuedRequest, TeamQuota, TeamSharing
from quotas.queue import queue_decision, queue_position
from teams.models import Team
from teams.services import lock_team, lock_team_statement

# -- the admission lock --------------------------------------------------------------------


def lock_admission(team) -> int | None:
    """Take what admission in ``team`` locks, in the one order: the team lock
    (:func:`teams.services.lock_team`), then, for a team in a cohort, the cohort's row
    (``FOR NO KEY UPDATE``). Returns the cohort's id (None outside a cohort).

    Why this order: a team outside any cohort keeps exactly today's path (the team lock is
    its first statement and the membership is read under it, in admit's facts statement). It
    cannot deadlock: whoever holds a cohort's lock never waits for a team's
    (:func:`_admit_waiting_in_cohort` takes other members' team locks with ``SKIP LOCKED``),
    and several team locks are only ever taken by id. Membership changes take the team locks,
    so the cohort read under the team lock stays true until commit. Taking it twice is free.
    """
    lock_team(team)
    cohort_id = cohort_id_of(team)
    if cohort_id is not None:
        _lock_cohort(cohort_id)
    return cohort_id


def _lock_cohort(cohort_id: int) -> None:
    list(Cohort.objects.select_for_update(no_key=True).filter(pk=cohort_id).values_list("pk", flat=True))


# -- the hot path in SQL -------------------------------------------------------------------
#
# admit() runs on every submission and holds the team's lock while it runs, so its three
# statements (and release()'s update) are plain SQL: compiling them with the ORM cost ~5 ms
# of CPU per admission, which under concurrency outweighed the database work itself and cut
# throughput by a factor of five (bench/admission.py measures it).


@lru_cache(maxsize=4)
def _hot_sql(vendor: str) -> tuple[str, str, str]:
    """The facts, insert and release statements for ``vendor`` (table names from the models)."""
    # Values always travel as parameters; only table and column names are formatted in.
    q = connection.ops.quote_name
    quota, flavor, res, queue, budget, sharing, cluster, window = (
        q(model._meta.db_table)
        for model in (TeamQuota, GpuFlavor, QuotaHold, QueuedRequest, TeamBudget, TeamSharing, Cluster, ReservedWindow)
    )
    facts = (  # f.active: GpuFlavor.usable, read in the same round trip; the team's cohort too
        f"SELECT f.id, f.active, f.max_units_per_node, tq.{q('limit')}, tq.borrowing_limit, tq.lending_limit,"  # noqa: S608 - only quoted model table names are interpolated
        f" (SELECT cohort_id FROM {sharing} WHERE team_id = %(team)s),"
        f" EXISTS(SELECT 1 FROM {res} WHERE ref = %(ref)s AND released_at IS NULL),"
        f" EXISTS(SELECT 1 FROM {queue} WHERE ref = %(ref)s),"
        # Units on the quota: not the team's work inside its own reserved windows (QuotaHold.window).
        f" (SELECT COALESCE(SUM(units), 0) FROM {res}"
        f"  WHERE team_id = %(team)s AND flavor_id = f.id AND released_at IS NULL AND (window_id IS NULL OR lent)),"
        f" b.monthly_limit, b.alert_threshold_percent,"
        # A budgeted team's ledger rows this month: month_spend's closed part (a round trip less under the lock).
        f" CASE WHEN b.monthly_limit IS NULL THEN NULL ELSE {closed_spend_subquery(q, '%(team)s', '%(since)s')} END,"
        # What bounds committed money (see admit): every unit the team holds, the dearest price any
        # work can be quoted or charged (a cluster's own price included: billing.pricing) or any of
        # its holds is charged (a rate taken before a price cut stays its rate), and whether a reserved
        # window of the team commits money this month (windows hold no units: then the exact figure).
        f" (SELECT COALESCE(SUM(units), 0) FROM {res} WHERE team_id = %(team)s AND released_at IS NULL),"
        f" (SELECT MAX(p) FROM (SELECT {dearest_sql(q, flavor)} AS p UNION ALL SELECT MAX(charged_price) FROM {res}"
        f"  WHERE team_id = %(team)s AND released_at IS NULL) AS rates),"
        f" EXISTS(SELECT 1 FROM {window} WHERE team_id = %(team)s AND {q('end')} > %(now)s AND start < %(until)s),"
        # Whether any cluster may take no new work (see admit): not the rule, only when to ask it.
        f" EXISTS(SELECT 1 FROM {cluster} WHERE draining OR health <> %(ready)s),"
        # Whether the team has a reserved window of the flavor not over (see admit): only then are they read.
        f" EXISTS(SELECT 1 FROM {window} WHERE team_id = %(team)s AND flavor_id = f.id AND {q('end')} > %(now)s),"
        f" EXISTS(SELECT 1 FROM {window} WHERE flavor_id = f.id AND {q('end')} > %(now)s)"
        f" FROM (SELECT 1 AS one) AS one"
        f" LEFT JOIN {flavor} f ON f.name = %(flavor)s"
        f" LEFT JOIN {quota} tq ON tq.flavor_id = f.id AND tq.team_id = %(team)s"
        f" LEFT JOIN {budget} b ON b.team_id = %(team)s"
    )
    # Positional: it runs as a core.writes.Write, with the caller's rows of the admission.
    insert = (f"INSERT INTO {res} (team_id, ref, flavor_id, units, units_per_node, priority, spot, description,"  # noqa: S608 - only quoted model table names are interpolated
              f" borrowed_units, created_at, committed_units, limit_minutes, user_id, window_id, lent)"
              f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
    release = f"UPDATE {res} SET released_at = %(now)s WHERE ref = %(ref)s AND released_at IS NULL"  # noqa: S608
    return facts, insert, release


def _hold_for(team, ref: str, flavor: GpuFlavor, request: ResourceRequest, borrowed: int = 0,
              window_id: int | None = None) -> QuotaHold:
    return QuotaHold(team=team, ref=ref, flavor=flavor, units=request.units, units_per_node=request.units_per_node,
                       priority=Priority(request.priority).rank, spot=request.spot,
                       description=request.description[:200], borrowed_units=borrowed,
                       committed_units=request.committed_units, limit_minutes=request.limit_minutes,
                       user_id=request.user_id, window_id=window_id)


def _carried(request: ResourceRequest) -> dict:
    """What a queue entry keeps of ``request`` for the hold it becomes (:func:`quotas.facts.request_of` reads it back)."""
    return {"committed_units": request.committed_units, "limit_minutes": request.limit_minutes,
            "user_id": request.user_id, "for_reservation": request.for_reservation}


# -- the transactional entry points --------------------------------------------------------


def admit(team, request: ResourceRequest, ref: str,
          recorded: Callable[[Decision, datetime], Sequence[Write]] | None = None) -> Decision:
    """Admit, queue or reject ``request`` for workload ``ref`` of ``team``, atomically.

    Nests in the caller's transaction, so the caller's own row and the hold commit
    together. Admitting a ref that is already admitted or queued returns that outcome again
    without writing anything.

    ``recorded(decision, now)``: when admitted, the caller's rows that record it besides the
    hold (the workload's state move, its audit row, …), built from the decision and the
    moment admission took. They are written with the hold in one round trip
    (:func:`core.writes.run_together`; on PostgreSQL one statement), because everything
    written here holds the team's lock until commit; each must touch a row (a conditional
    state move that finds its row moved fails the transaction). Not called for other outcomes:
    the caller writes what queueing means to it.
    """
    started = time.perf_counter()
    facts_sql, insert_sql, _ = _hot_sql(connection.vendor)
    # No savepoint of its own (two statements less on every submission): an error here fails
    # the caller's transaction as a whole, which is what every caller wants — the workload row
    # written just before must not commit without its admission.
    with transaction.atomic(savepoint=False):
        # 1. Serialise admissions of this team (the team lock), and 2. read every fact under it, all
        #    in one round trip (core.rawsql.read_together): the server runs the statements in the
        #    order sent, each a statement of its own, and under READ COMMITTED a statement sees what
        #    was committed before *it* started — so the facts, sent behind the lock, are read after
        #    it is granted and see the holds of whoever held it before us. (Not folded into the lock
        #    statement itself: its snapshot would be taken before it waited for the lock.) The facts:
        #    the flavor and the team's limit for it, is the ref already admitted or queued, the units
        #    of the flavor in use, the budget, what bounds committed money, and a budgeted team's
        #    ledger rows this month and its open segments — so its month-to-date spend is the
        #    ledger's one figure (month_spend) with no statement more.
        now = timezone.now()
        _, (facts_row,), open_rows = read_together((
            lock_team_statement(team),
            (facts_sql, {"ref": ref, "team": team.pk, "flavor": request.flavor, "ready": Health.READY,
                         "since": connection.ops.adapt_datetimefield_value(month_start(now)),
                         "now": connection.ops.adapt_datetimefield_value(now),
                         "until": connection.ops.adapt_datetimefield_value(month_end(now))}),
            open_groups_statement([team.pk], now, budgeted=True)))
        (flavor_id, active, max_per_node, limit, borrowing_limit, lending_limit, member_of, admitted, queued, usage,
         budget_limit, threshold, closed, held_units, dearest, windows_commit, some_not_ready, has_window,
         flavor_reserved) = facts_row
        if admitted:
            return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED, f"already admitted: {ref}")
        if queued:
            return queue_decision(team, ref)

        # 3. Decide. A team in a cohort then takes the cohort's lock (lock_admission's order:
        #    team, then cohort) and reads every member's figures under it, as a new statement,
        #    so two members never both borrow the same idle unit.
        lenders = None
        if member_of is not None:
            _lock_cohort(member_of)
            if flavor_id is not None:
                cohort = cohort_figures(member_of)
                lenders = cohort.lenders(team.pk, flavor_id)
                usage = cohort.usage.get((team.pk, flavor_id), 0)
        facts = (FlavorQuota(exists=False) if flavor_id is None
                 else FlavorQuota(active=bool(active), max_units_per_node=max_per_node, limit=limit,
                                  borrowing_limit=borrowing_limit, lending_limit=lending_limit, lenders=lenders))
        # The team's reserved windows (read under its lock, so two admissions never take one window's
        # last units): only for a team that has one of the flavor, every other admission stays as it was.
        windows = Windows([team.pk], now) if has_window else None
        if windows is not None:
            facts = windows.apply(facts, team.pk, flavor_id, request.for_reservation)
        budget = None
        if budget_limit is not None:
            # Month-to-date spend: the ledger's closed rows plus what runs now, up to this instant.
            # Committed money (admitted work's estimated cost still to come) is first taken at
            # a bound: each workload commits at most its reserved units, at its own price, to
            # the month's end, so every held unit at the dearest price never commits less. A
            # reserved window commits money without holding units: a team with one ahead this
            # month is weighed at the exact figure at once.
            bound = (committed(team.pk, now) if windows_commit
                     else cost_ahead(sql_decimal(dearest) or ZERO, int(held_units), now, month_end(now)))
            spent = month_spend([team.pk], now, {team.pk: closed}, open_groups_of(open_rows))[team.pk].spent
            # In SLIPWAY_CURRENCY, as the spend it is compared with (billing.models.TeamBudget).
            budget = BudgetState(sql_decimal(budget_limit), spent, settings.SLIPWAY_CURRENCY, bound,
                                 hours_left_in_month(now), threshold)
        decision = decide(request, int(usage), facts, budget)
        if decision.reason.code == AdmissionCode.WAITING_FOR_BUDGET and not windows_commit:
            # More committed money only ever queues: an admission at the bound stands at the
            # exact figure, and only "waiting for budget" needs that figure read (one statement).
            budget = dataclasses.replace(budget, committed=committed(team.pk, now))
            decision = decide(request, int(usage), facts, budget)
        if decision.admitted and not decision.reserved and (some_not_ready or flavor_reserved):
            # Only while some cluster is not plainly ready (a superset of the clusters that take
            # no new work, read with the facts), or a window of the flavor is not over (whose units
            # may leave no room: quotas.facts.reserved_wait), are the clusters and the flavor read,
            # and ClusterWaits applies the rules — every other admission stays at its statements.
            no_cluster = ClusterWaits()(GpuFlavor.objects.get(pk=flavor_id), request.spot, request)
            decision = decide(request, int(usage), facts, budget, no_cluster)

        # 4. Write what was decided: an admission's hold and the caller's rows of it in
        #    one round trip (each statement under the lock is a share of one team's rate).
        if decision.admitted:
            room = (windows.take(team.pk, flavor_id, request.units, ref, request.for_reservation) if decision.reserved
                    else None)
            hold = Write(insert_sql, (
                team.pk, ref, flavor_id, request.units, request.units_per_node, Priority(request.priority).rank,
                request.spot, request.description[:200], decision.borrows,
                connection.ops.adapt_datetimefield_value(now), request.committed_units, request.limit_minutes,
                request.user_id, room.window_id if room is not None else None, False))
            writes = [hold, *(recorded(decision, now) if recorded is not None else ())]
            counts = run_together(writes)
            if not all(counts):
                raise DatabaseError(f"admitting {ref}: {counts.count(0)} of its {len(writes)} writes touched no row")
        elif decision.queued:
            entry = QueuedRequest.objects.create(
                team=team, ref=ref, flavor_id=flavor_id, units=request.units, units_per_node=request.units_per_node,
                priority=Priority(request.priority).rank, spot=request.spot, description=request.description[:200],
                estimated_cost=request.estimated_cost, cost_per_hour=request.cost_per_hour,
                may_borrow=request.may_borrow, **_carried(request))
            decision = dataclasses.replace(decision, position=queue_position(team, entry))
        # A replayed ref returned above, uncounted: each request counts once, as first decided.
        metrics.count_admission(decision.label, time.perf_counter() - started)
        return decision


def release(ref: str) -> bool:
    """Release ``ref``'s hold and drop its queue entry. Idempotent; returns whether anything changed.

    Call :func:`admit_waiting` for the team afterwards (the reconciler does every cycle) so
    queued work can use the freed units.
    """
    # 1. The common case, one statement: the conditional update is the idempotence (a
    #    released row no longer matches). A ref is either reserved or queued, never both.
    if _release_hold(ref):
        return True
    # 2. Not reserved: maybe queued. If admit_waiting is admitting it right now, this DELETE
    #    waits for that transaction and then finds nothing...
    if QueuedRequest.objects.filter(ref=ref).delete()[0]:
        return True
    # 3. ...and the hold it wrote is visible to a new statement: release that too.
    return _release_hold(ref)


def _release_hold(ref: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(_hot_sql(connection.vendor)[2],
                       {"ref": ref, "now": connection.ops.adapt_datetimefield_value(timezone.now())})
        return cursor.rowcount > 0


def placed(ref: str, cluster_id: int | None) -> None:
    """Record where ``ref``'s held units were placed: the cluster whose price it is quoted until billing opens."""
    QuotaHold.objects.held().filter(ref=ref).exclude(cluster_id=cluster_id).update(cluster_id=cluster_id)


def requeue(team, ref: str, request: ResourceRequest, queued_since: datetime, not_before: datetime | None = None) -> bool:
    """Give back ``ref``'s hold and put its request back in the queue at its old place.

    For preempted work (docs/design.md "Sharing, preemption, clusters"): ``queued_since`` is when it was first submitted, so it waits
    ahead of everything of its priority submitted after it; ``not_before``: not admitted again before then (a
    failed provisioning's backoff, docs/pools.md). Under the team's admission lock, in
    the caller's transaction; returns False when ``ref`` had no quota hold (requeued already).
    """
    with transaction.atomic():
        lock_admission(team)
        if not _release_hold(ref):
            return False
        flavor = GpuFlavor.objects.get(name=request.flavor)
        entry = QueuedRequest.objects.create(
            team=team, ref=ref, flavor=flavor, units=request.units, units_per_node=request.units_per_node,
            priority=Priority(request.priority).rank, spot=request.spot, description=request.description[:200],
            estimated_cost=request.estimated_cost, cost_per_hour=request.cost_per_hour, may_borrow=request.may_borrow,
            **_carried(request))
        QueuedRequest.objects.filter(pk=entry.pk).update(created_at=queued_since,  # auto_now_add set "now"
                                                         not_before=not_before)
    return True


def resize(team, ref: str, units: int, burst: bool = False, committed: int | None = None) -> Decision:
    """Grow or shrink ``ref``'s active hold to ``units``, under the team's admission lock.

    Growing is decided by :func:`decide` as if the hold were requested anew at its new
    size, with its current units counted as free: what does not fit now (quota, budget) is
    refused with the reason and changes nothing — a resize never queues. Shrinking always
    succeeds. An inference endpoint's burst replicas are granted (``burst``: held back past the
    budget's alert threshold, :attr:`ResourceRequest.burst`) and reclaimed this way.
    ``committed``: the units the hold commits from now on (:attr:`ResourceRequest.committed_units`;
    an endpoint's new minimum), set with the resize when it succeeds; None keeps them.
    Raises ``LookupError`` when ``ref`` has no quota hold, ``ValueError`` for ``units < 1``.
    """
    if units < 1:
        raise ValueError("a quota hold keeps at least one unit; release it instead")
    commits = {} if committed is None else {"committed_units": committed}
    with transaction.atomic():
        cohort = cohort_figures(lock_admission(team))
        hold = QuotaHold.objects.held().select_related("flavor").filter(team=team, ref=ref).first()
        if hold is None:
            raise LookupError(f"{ref} has no quota hold in team {team.slug}")
        current = hold.units
        if units <= current:
            if units < current or commits:
                # Shrinking gives borrowed units back first.
                QuotaHold.objects.filter(pk=hold.pk).update(
                    units=units, borrowed_units=max(0, hold.borrowed_units - (current - units)), **commits)
            return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED, f"{ref} now holds {units}\u00d7 {hold.flavor.name}")
        if hold.window_id is not None and not hold.lent:
            return _grow_in_window(hold, units, commits)
        decision, facts, usage = _growth(team, hold, units, burst, cohort,
                                         max(0, (committed or 0) - hold.committed_units))
        if decision.admitted:
            grown = facts.borrows(usage + current, units - current) if cohort is not None else 0
            QuotaHold.objects.filter(pk=hold.pk).update(
                units=units, borrowed_units=hold.borrowed_units + grown, **commits)
            return dataclasses.replace(decision, borrows=hold.borrowed_units + grown)
        # A resize is answered now or never: "waiting for quota" is a refusal with that reason.
        return Decision(Outcome.REJECT, decision.reason)


def _grow_in_window(hold: QuotaHold, units: int, commits: dict) -> Decision:
    """Grow a hold inside its team's reserved window (under the team's lock): by the window's free units alone —
    the window is what it runs on, on top of the quota — or refused with what is free there."""
    room = next((r for r in reserved.rooms([hold.team_id], timezone.now(), hold.flavor_id).get(
        (hold.team_id, hold.flavor_id), []) if r.window_id == hold.window_id), None)
    free = room.free if room is not None else 0
    if units - hold.units > free:
        return Decision.of(Outcome.REJECT, AdmissionCode.WAITING_FOR_QUOTA,
                           f"its reservation has {free}\u00d7 {hold.flavor.name} free, {units - hold.units} more needed")
    QuotaHold.objects.filter(pk=hold.pk).update(units=units, **commits)
    return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED, f"{hold.ref} now holds {units}\u00d7 {hold.flavor.name} "
                       "in its team's reservation", reserved=True)


def _growth(team, hold: QuotaHold, units: int, burst: bool,
            cohort: CohortFigures | None, more_committed: int = 0) -> tuple[Decision, FlavorQuota, int]:
    """:func:`decide`'s word on growing ``hold`` to ``units``: the request anew at its new
    size, its current units counted as free. With the facts and the usage it was asked with.

    ``more_committed``: the units it commits beyond what it commits now (an endpoint's higher minimum),
    priced at the hold's rate (:meth:`~billing.models.QuotaHold.rate`, the rule the ledger's SQL prices it by)
    to the month's end — what :func:`billing.ledger.committed` will count once the resize is written, so the
    budget weighs a raised minimum as it weighs a new one. Burst commits nothing.
    """
    # Only burst may borrow: an endpoint's minimum grown by a new base never does.
    request = dataclasses.replace(request_of(hold), units=units, burst=burst, may_borrow=burst)
    if more_committed:
        request = dataclasses.replace(request, cost_per_hour=hold.rate() * more_committed)
    usage = in_use_of(team, hold.flavor_id) - hold.units
    quota = TeamQuota.objects.filter(team=team, flavor=hold.flavor).first()
    facts = flavor_quota(hold.flavor, quota, cohort, team.pk)
    return decide(request, usage, facts, team_budget_state(team)), facts, usage


def preview_resize(team, ref: str, units: int, burst: bool = False) -> Decision:
    """What :func:`resize` would decide for ``ref`` grown to ``units`` right now, without locking or writing.

    The same question as the resize itself (:func:`_growth`), so a preview of burst says what
    the endpoint would really be granted. Raises ``LookupError`` when ``ref`` has no quota hold.
    """
    hold = QuotaHold.objects.held().select_related("flavor").filter(team=team, ref=ref).first()
    if hold is None:
        raise LookupError(f"{ref} has no quota hold in team {team.slug}")
    if units <= hold.units:
        return Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED, f"{ref} holds {hold.units}\u00d7 {hold.flavor.name}")
    return _growth(team, hold, units, burst, cohort_figures(cohort_id_of(team)))[0]


def admit_waiting(team) -> list[str]:
    """Admit the team's queued requests that fit now, in queue order; returns the admitted refs.

    For each one ``workload_admitted`` is sent inside this transaction, so the owner's state
    change commits (or rolls back) together with the hold.
    """
    with transaction.atomic():
        cohort_id = lock_admission(team)
        if cohort_id is not None:
            return _admit_waiting_in_cohort(cohort_id)
        quotas = team_quotas(team)
        entries = list(QueuedRequest.objects.filter(team=team).select_related("flavor")
                       .order_by(*QueuedRequest.QUEUE_ORDER))
        if not entries:
            return []
        windows = Windows([team.pk], timezone.now())
        order = queue_order(entries, units_in_use(team), quotas, team_budget_state(team), ClusterWaits(), windows)
        if not order:
            return []
        admitted = [entry for entry, _decision in order]
        labels = [decision.label for _entry, decision in order]
        QuotaHold.objects.bulk_create([_hold_for(team, e.ref, e.flavor, request_of(e), window_id=windows.taken.get(e.ref))
                                       for e in admitted])
        QueuedRequest.objects.filter(pk__in=[e.pk for e in admitted]).delete()
        for entry, label in zip(admitted, labels, strict=True):
            workload_admitted.send(sender=None, ref=entry.ref, team=team)
            metrics.count_admission(label)
        return [e.ref for e in admitted]


def queue_order(entries: list[QueuedRequest], usage: dict[int, int], quotas: dict[int, TeamQuota],
                budget: BudgetState | None, waits: ClusterWaits | None = None,
                windows: Windows | None = None) -> list[tuple[QueuedRequest, Decision]]:
    """``(entry, decision)`` of a team's queued ``entries`` (outside any cohort, in queue order)
    admitted now, in the order admitted; pure: ``usage`` ({flavor id: units}) is updated as they are.

    Best-effort in queue order, each decided by :func:`decide`: a later, smaller request that
    fits passes one that does not. :func:`admit_waiting` admits by it, and the start estimates
    (:mod:`workloads.estimates`) simulate the queue with it. ``waits``: what the clusters say
    (:class:`ClusterWaits`; None: the simulation's assumption that a cluster takes the work).
    ``windows``: the team's reserved windows (:class:`quotas.facts.Windows`, updated: an entry admitted
    into one takes its units there, not on the quota; None: none).
    """
    admitted = []
    for entry in entries:
        quota = flavor_quota(entry.flavor, quotas.get(entry.flavor_id))
        if windows is not None:
            quota = windows.apply(quota, entry.team_id, entry.flavor_id, entry.for_reservation)
        request = request_of(entry)
        decision = decide(request, usage.get(entry.flavor_id, 0), quota, budget,
                          waits(entry.flavor, entry.spot, request, entry.not_before) if waits is not None else "")
        # The next entry is decided against what this one commits (the budget is read once, before the pass).
        budget = after_admitting(budget, request, decision)
        if decision.reserved:
            windows.take(entry.team_id, entry.flavor_id, entry.units, entry.ref, entry.for_reservation)
            admitted.append((entry, decision))
        elif decision.admitted:
            # Best-effort: keep scanning, a later smaller request may still fit.
            usage[entry.flavor_id] = usage.get(entry.flavor_id, 0) + entry.units
            admitted.append((entry, decision))
    return admitted


def _admit_waiting_in_cohort(cohort_id: int) -> list[str]:
    """:func:`admit_waiting` for a cohort (its lock held): every member's queue, as one.

    Units one member frees may be borrowed by another, so the members' queues are taken
    together by fair share (:func:`quotas.fairshare.tournament`): of the entries that fit now,
    work within its own team's nominal quota goes before any that borrows (whatever their
    queue order: units a team reclaimed go to it, not back to the borrower they were taken
    from — no preemption loop, :mod:`quotas.reclaim`); then the one whose team's share after
    admitting it is lowest, then the higher priority, then the older entry. An entry that
    borrows nothing adds nothing to its team's share. Each entry is decided (by :func:`decide`,
    the one rule of fit) against the cohort's figures as updated by the admissions before it.
    The other members' team locks are taken only where free (``SKIP LOCKED``: holding a cohort's lock, nobody waits for a team's,
    :func:`lock_admission`), so each admitted entry's team is held.
    """
    # The members whose team lock is free now (or ours): a member busy deciding elsewhere is
    # skipped, never waited for — its own path re-admits its queue when it ends (at the latest
    # the next reconcile cycle does).
    members = set(Team.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
                  .filter(sharing__cohort_id=cohort_id).values_list("pk", flat=True))
    entries = list(QueuedRequest.objects.filter(team_id__in=members).select_related("flavor", "team")
                   .order_by(*QueuedRequest.QUEUE_ORDER))
    if not entries:
        return []
    cohort = cohort_figures(cohort_id)
    remembered = fairshare.remembered_units(list(cohort.slugs), timezone.now())
    budgets: dict[int, BudgetState | None] = {}
    for entry in entries:
        if entry.team_id not in budgets:
            budgets[entry.team_id] = team_budget_state(entry.team)
    windows = Windows(list(members), timezone.now())
    order = fair_order(entries, cohort, budgets, remembered, ClusterWaits(), windows)
    if not order:
        return []
    QuotaHold.objects.bulk_create([_hold_for(e.team, e.ref, e.flavor, request_of(e), borrowed, windows.taken.get(e.ref))
                                     for e, borrowed in order])
    QueuedRequest.objects.filter(pk__in=[e.pk for e, _ in order]).delete()
    for entry, borrowed in order:
        workload_admitted.send(sender=None, ref=entry.ref, team=entry.team)
        metrics.count_admission(Decision.of(Outcome.ADMIT, AdmissionCode.ADMITTED, "", borrows=borrowed).label)
    return [e.ref for e, _ in order]


def fair_order(entries: list[QueuedRequest], cohort: CohortFigures, budgets: dict[int, BudgetState | None],
               remembered: dict[int, float], waits: ClusterWaits | None = None,
               windows: Windows | None = None) -> list[tuple[QueuedRequest, int]]:
    """``(entry, borrowed units)`` of the cohort's queued ``entries`` admitted now, in the order
    admitted (pure: ``cohort.usage`` is updated as they are). The fair-sharing tournament over
    :func:`decide`, nominal work first (see :func:`_admit_waiting_in_cohort`); ``remembered`` is
    :func:`quotas.fairshare.remembered_units` of the members; ``waits`` what the clusters say
    (:class:`ClusterWaits`; None: every cluster takes new work, as a replay of quotas alone assumes);
    ``windows`` the members' reserved windows (:class:`quotas.facts.Windows`, as in :func:`queue_order`)."""
    def decision(entry):
        key = (entry.team_id, entry.flavor_id)
        quota = flavor_quota(entry.flavor, cohort.quotas.get(key), cohort, entry.team_id)
        if windows is not None:
            quota = windows.apply(quota, entry.team_id, entry.flavor_id, entry.for_reservation)
        request = request_of(entry)
        return decide(request, cohort.usage.get(key, 0), quota,
                      budgets.get(entry.team_id), waits(entry.flavor, entry.spot, request, entry.not_before) if waits is not None else "")

    def rank(entry):
        borrows = cohort.borrowed(entry.team_id, entry.flavor_id, entry.units) > cohort.borrowed(
            entry.team_id, entry.flavor_id)
        after = fairshare.share_of(cohort, entry.team_id, entry.flavor_id, remembered, entry.units)
        return (borrows, after, -entry.priority, entry.created_at, entry.pk)

    borrows: dict[int, int] = {}

    def admit(entry):
        key = (entry.team_id, entry.flavor_id)
        decided = decision(entry)
        borrows[id(entry)] = decided.borrows
        # The team's next entry is decided against what this one commits (as in queue_order).
        budgets[entry.team_id] = after_admitting(budgets.get(entry.team_id), request_of(entry), decided)
        if decided.reserved:
            windows.take(entry.team_id, entry.flavor_id, entry.units, entry.ref, entry.for_reservation)  # not on the quota
        else:
            cohort.usage[key] = cohort.usage.get(key, 0) + entry.units

    admitted = fairshare.tournament(entries, lambda entry: decision(entry).admitted, rank, admit,
                                    lambda entry: entry.flavor_id)
    return [(entry, borrows[id(entry)]) for entry in admitted]
