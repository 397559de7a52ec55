"""The quotas app's public functions: summaries for pages and the API, and admin changes.

Admission itself lives in :mod:`quotas.admission` (its rule in :mod:`quotas.decide`, the figures
it reads in :mod:`quotas.facts`, the read-only queue in :mod:`quotas.queue`) and the ledger in
:mod:`billing.ledger`; callers import from those modules directly.

Every quota, sharing or budget change goes through one function here, which writes the audit
event and, for quotas, mirrors the change into the team's ResourceQuota after commit and
re-runs admission of the team's queue (a raised limit may let queued work start). A budget change
is here, not in billing, because it re-runs admission; price changes, which admit nothing, are
billing's (:mod:`billing.services`), as are the team's month in money and the budget step.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum

import fleet.services as fleet
from billing.ledger import month_start
from billing.models import BudgetMonth, TeamBudget, flavor_price
from billing.services import audit_budget_change, budget_fields
from cluster.capacity import offers
from cluster.errors import ClusterError
from core.formatting import format_when, stored_amount
from fleet import pools
from fleet.constants import State
from fleet.models import GpuFlavor
from quotas.admission import admit_waiting, lock_admission
from quotas.facts import borrowable, cohort_id_of, team_quotas, units_in_use
from quotas.models import Cohort, QueuedRequest, TeamQuota, TeamSharing
from quotas.tasks import sync_team_quota
from teams.models import AuditEvent, Team
from teams.services import audit, lock_team

__all__ = [
    "quota_rows",
    "remove_cohort",
    "schedule_team_sync",
    "set_cohort",
    "set_team_budget",
    "set_team_quota",
    "set_team_sharing",
    "sharing_of",
    "usage_bars",
    "usage_summary",
]

log = logging.getLogger(__name__)


# -- summaries -----------------------------------------------------------------------------


def usage_summary(team: Team) -> list[dict]:
    """Per flavor the team has quota for (or still uses): ``{flavor, limit, in_use, queued, free,
    borrowed, borrowable, has_quota, borrowing_limit, lending_limit}`` — ``borrowed``: units in use
    above the limit; ``borrowable``: what its cohort could lend it now (0 outside a cohort);
    ``limit`` 0 and ``has_quota`` False for a flavor without a quota row."""
    return _usage_summary(team)[0]


def _usage_summary(team: Team) -> tuple[list[dict], int | None]:
    """:func:`usage_summary` and the team's cohort id (None outside one), read with its quotas."""
    quotas = team_quotas(team)
    in_use = units_in_use(team)
    queued = {row["flavor_id"]: row["total"] for row in
              QueuedRequest.objects.filter(team=team).values("flavor_id").annotate(total=Sum("units")).order_by()}
    flavors = {fid: q.flavor for fid, q in quotas.items()}
    missing = (set(in_use) | set(queued)) - set(flavors)
    if missing:
        flavors.update({f.pk: f for f in GpuFlavor.objects.filter(pk__in=missing)})
    lendable = borrowable(team, quotas, in_use)
    rows = []
    for fid, flavor in sorted(flavors.items(), key=lambda item: item[1].name):
        quota = quotas.get(fid)
        limit = quota.limit if quota is not None else 0
        used = in_use.get(fid, 0)
        rows.append({"flavor": flavor.name, "limit": limit, "in_use": used, "queued": queued.get(fid, 0),
                     "free": max(limit - used, 0), "borrowed": max(used - limit, 0),
                     "borrowable": lendable.get(fid, 0), "has_quota": quota is not None,
                     "borrowing_limit": quota.borrowing_limit if quota is not None else None,
                     "lending_limit": quota.lending_limit if quota is not None else None})
    return rows, getattr(next(iter(quotas.values()), None), "cohort_of_team", None)


def quota_rows(team: Team) -> list[dict]:
    """The team's quotas as code (``GET /teams/{slug}/quotas/``): :func:`usage_summary`'s rows, whose
    ``limit`` is None for a flavor the team uses or queues for without a quota (what ``PUT`` with
    ``limit`` null leaves), with the sharing limits."""
    return [{**row, "limit": row["limit"] if row["has_quota"] else None} for row in usage_summary(team)]


def usage_bars(team: Team) -> list[dict]:
    """:func:`usage_summary` rows for a quota bar: ``percent`` of the limit in use, ``full`` at the limit.

    The dashboard and the Team page draw the team's quota from these (``quotas/_quota_table.html``).
    Each row also names the team's ``cohort`` id (None outside one), which the pages hand to
    :func:`quotas.sharing.team_sharing` so that a team outside a cohort pays no query for it.
    """
    bars = []
    rows, cohort_id = _usage_summary(team)
    for row in rows:
        percent = min(100, round(100 * row["in_use"] / row["limit"])) if row["limit"] else 100
        bars.append({**row, "percent": percent, "full": row["limit"] and row["in_use"] >= row["limit"],
                     "cohort": cohort_id})
    return bars


# -- admin changes -------------------------------------------------------------------------


def schedule_team_sync(team: Team) -> None:
    """After commit: mirror the team's quotas into its ResourceQuota and admit queued work that fits."""
    team_id = team.pk

    def run() -> None:
        # Admitting here (not only in the task) lets queued work start even when no worker runs.
        admit_waiting(Team.objects.get(pk=team_id))
        try:
            sync_team_quota.delay(team_id)
        except Exception:  # the broker is down: the next quota change or a manual sync retries
            log.exception("could not enqueue the quota sync of team %s", team_id)

    transaction.on_commit(run)


_KEEP = object()


@transaction.atomic
def set_team_quota(actor, team: Team, flavor: GpuFlavor, limit: int | None, ip: str | None = None,
                   borrowing_limit=_KEEP, lending_limit=_KEEP) -> TeamQuota | None:
    """Set (or with ``limit=None`` remove) the team's quota for ``flavor``; audited, mirrored.

    ``borrowing_limit`` and ``lending_limit`` (None: any / all of its unused quota) are kept as
    they are unless given; they only matter in a cohort.
    """
    lock_admission(team)  # quota rows change only under the admission lock (its cohort's, then the team's)
    old = TeamQuota.objects.filter(team=team, flavor=flavor).first()
    old_limit = old.limit if old else None
    before = _sharing_limits(old)
    if limit is None:
        if old is not None:
            old.delete()
        quota = None
    else:
        defaults = {"limit": limit}
        if borrowing_limit is not _KEEP:
            defaults["borrowing_limit"] = borrowing_limit
        if lending_limit is not _KEEP:
            defaults["lending_limit"] = lending_limit
        quota, _ = TeamQuota.objects.update_or_create(team=team, flavor=flavor, defaults=defaults)
    after = _sharing_limits(quota)
    if old_limit != limit or before != after:
        audit_quota_change(actor, team, flavor.name, old_limit, limit, ip=ip,
                           **({"old_limits": before, "new_limits": after} if before != after else {}))
        # What a cohort lends changed with it: every member's namespace backstop follows.
        cohort_id = cohort_id_of(team)
        members = Team.objects.filter(sharing__cohort_id=cohort_id) if cohort_id is not None else [team]
        for member in members:
            schedule_team_sync(member)
    return quota


def _sharing_limits(quota: TeamQuota | None) -> dict | None:
    if quota is None:
        return None
    return {"borrowing_limit": quota.borrowing_limit, "lending_limit": quota.lending_limit}


def audit_quota_change(actor, team: Team, flavor: str, old: int | None, new: int | None, ip: str | None = None,
                       **limits) -> None:
    audit(AuditEvent.Action.QUOTA_CHANGED, actor=actor, team=team, target=f"quota {flavor}", ip=ip,
          flavor=flavor, old=old, new=new, **limits)


# -- cohorts -------------------------------------------------------------------------------


def sharing_of(team: Team) -> TeamSharing:
    """The team's place in quota sharing: its row, or an unsaved one with the defaults (no cohort)."""
    return TeamSharing.objects.select_related("cohort").filter(team=team).first() or TeamSharing(team=team)


def cohort_fields(cohort: Cohort | None) -> dict | None:
    """The audited fields of a cohort (its teams as slugs)."""
    if cohort is None:
        return None
    return {"reclaim": cohort.reclaim, "min_runtime_minutes": cohort.min_runtime_minutes,
            "preemption_delay_seconds": cohort.preemption_delay_seconds,
            "teams": sorted(TeamSharing.objects.filter(cohort=cohort).values_list("team__slug", flat=True))}


def _lock_cohorts(cohort_ids) -> None:
    """The cohorts' locks, by id (the order every multi-cohort change takes them in)."""
    ids = sorted({pk for pk in cohort_ids if pk is not None})
    for pk in ids:
        list(Cohort.objects.select_for_update(no_key=True).filter(pk=pk).values_list("pk", flat=True))


class _MembersMoved(Exception):
    """A cohort's members changed between reading them and holding their teams' locks."""


#: How often :func:`_lock_members` reads the members again when a concurrent change moved them.
_LOCK_ATTEMPTS = 5


def _lock_members(cohort: Cohort, joining: set[int]) -> set[int]:
    """Lock every team concerned (``cohort``'s members and ``joining``), by id, then every cohort
    concerned (this one and the joining teams' former ones), by id — the admission order
    (:func:`quotas.admission.lock_admission`), so no admission decides on half a change. Returns
    the members as they are under those locks.

    The members must be read before their teams are locked (a team's lock comes before any
    cohort's), so another membership change may commit in between; the members are read again
    under the locks, and if a team joined meanwhile the locks are given back (a savepoint's
    rollback releases its row locks) and taken again for the teams as they are now.
    """
    for _attempt in range(_LOCK_ATTEMPTS):
        try:
            with transaction.atomic():
                members = set(TeamSharing.objects.filter(cohort=cohort).values_list("team_id", flat=True))
                concerned = members | joining
                for team in Team.objects.filter(pk__in=concerned).order_by("pk"):
                    lock_team(team)
                _lock_cohorts([cohort.pk, *TeamSharing.objects.filter(team_id__in=concerned)
                               .values_list("cohort_id", flat=True)])
                locked = set(TeamSharing.objects.filter(cohort=cohort).values_list("team_id", flat=True))
                if not locked <= concerned:
                    raise _MembersMoved
                return locked
        except _MembersMoved:
            continue
    raise RuntimeError(f"cohort {cohort.name}: its teams kept changing while being locked")


@transaction.atomic
def set_cohort(actor, name: str, *, reclaim: str | None = None, min_runtime_minutes: int | None = None,
               preemption_delay_seconds: int | None = None, teams: list[Team] | None = None,
               ip: str | None = None) -> tuple[Cohort, bool]:
    """Create or change the cohort ``name``; with ``teams``, exactly those teams are its members
    (a team joining leaves its former cohort; the audit event names where it came from as
    ``moved_from``). Audited (a quota change: cohorts are quota). Returns the cohort and whether this
    call created it (decided by the insert: of two creates at once, one made it).

    Locks: every team concerned, by id, then every cohort concerned, by id (:func:`_lock_members`).
    Members old and new re-admit their queues after commit (lent units came or went).
    """
    cohort, created = Cohort.objects.get_or_create(name=name)
    joining = set() if teams is None else {team.pk for team in teams}
    old_members = _lock_members(cohort, joining)
    before = None if created else cohort_fields(cohort)
    new_members = old_members if teams is None else joining
    moved = new_members | old_members
    moved_from = dict(TeamSharing.objects.filter(team_id__in=new_members - old_members, cohort__isnull=False)
                      .values_list("team__slug", "cohort__name"))
    for field_name, value in (("reclaim", reclaim), ("min_runtime_minutes", min_runtime_minutes),
                              ("preemption_delay_seconds", preemption_delay_seconds)):
        if value is not None:
            setattr(cohort, field_name, value)
    cohort.full_clean()
    cohort.save()
    if teams is not None:
        TeamSharing.objects.filter(cohort=cohort).exclude(team_id__in=new_members).update(cohort=None)
        for team_id in new_members - old_members:
            TeamSharing.objects.update_or_create(team_id=team_id, defaults={"cohort": cohort})
    after = cohort_fields(cohort)
    if before != after:
        audit(AuditEvent.Action.QUOTA_CHANGED, actor=actor, target=f"cohort {cohort.name}", ip=ip,
              cohort=cohort.name, old=before, new=after, **({"moved_from": moved_from} if moved_from else {}))
        for team in Team.objects.filter(pk__in=moved):
            schedule_team_sync(team)
    return cohort, created


@transaction.atomic
def remove_cohort(actor, cohort: Cohort, ip: str | None = None) -> None:
    """Delete a cohort; its teams keep their quotas as walls again. Audited."""
    members = list(Team.objects.filter(pk__in=_lock_members(cohort, set())))
    before, name = cohort_fields(cohort), cohort.name
    cohort.delete()  # the members' TeamSharing rows keep their weight, without a cohort
    audit(AuditEvent.Action.QUOTA_CHANGED, actor=actor, target=f"cohort {name}", ip=ip,
          cohort=name, old=before, new=None)
    for team in members:
        schedule_team_sync(team)


@transaction.atomic
def set_team_sharing(actor, team: Team, fair_weight: Decimal | None = None, ip: str | None = None, *,
                     within_team_preemption: bool | None = None) -> TeamSharing:
    """Set the team's fair-share weight (≥ 0) and whether its high-priority runs may preempt its
    own low-priority work; None keeps a setting as it is. Audited, one event per setting changed.
    """
    if fair_weight is not None and fair_weight < 0:
        raise ValueError("fair_weight must be 0 or more")
    lock_admission(team)
    sharing, _ = TeamSharing.objects.get_or_create(team=team)
    old_weight, old_preemption = sharing.fair_weight, sharing.within_team_preemption
    changed = []
    if fair_weight is not None and old_weight != fair_weight:
        sharing.fair_weight = fair_weight
        changed.append("fair_weight")
        audit(AuditEvent.Action.QUOTA_CHANGED, actor=actor, team=team, target="fair weight", ip=ip,
              old=stored_amount(old_weight), new=stored_amount(fair_weight))
    if within_team_preemption is not None and old_preemption != within_team_preemption:
        sharing.within_team_preemption = within_team_preemption
        changed.append("within_team_preemption")
        audit(AuditEvent.Action.QUOTA_CHANGED, actor=actor, team=team, target="within-team preemption", ip=ip,
              old=old_preemption, new=within_team_preemption)
    if changed:
        sharing.save(update_fields=changed)
    return sharing


@transaction.atomic
def set_team_budget(actor, team: Team, monthly_limit: Decimal | None, currency: str | None = None,
                    alert_threshold_percent: int | None = None, ip: str | None = None,
                    policy: str | None = None, now: datetime | None = None) -> TeamBudget | None:
    """Set (or with ``monthly_limit=None`` remove) the team's monthly budget; audited.

    A budget is in ``SLIPWAY_CURRENCY`` (:class:`~billing.models.TeamBudget`): ``currency`` may only say
    so (another is a ``ValidationError`` on it, nothing written), and the row records it — saving a budget
    set in another currency before relabels it, audited. A change is also recorded as the budget of
    ``now``'s month (:class:`BudgetMonth`), so that month's burn-down keeps it after the budget changes again.
    """
    if currency is not None and currency != settings.SLIPWAY_CURRENCY:
        raise ValidationError({"currency": f"A budget is in {settings.SLIPWAY_CURRENCY} (SLIPWAY_CURRENCY), the "
                                           f"currency of the spend it is compared with: {currency!r} cannot be set."})
    lock_admission(team)  # admission reads the budget under this lock
    old = TeamBudget.objects.filter(team=team).first()
    before = budget_fields(old)
    if monthly_limit is None:
        if old is not None:
            old.delete()
        budget = None
    else:
        defaults = {"monthly_limit": monthly_limit, "currency": settings.SLIPWAY_CURRENCY}
        if alert_threshold_percent is not None:
            defaults["alert_threshold_percent"] = alert_threshold_percent
        if policy is not None:
            defaults["policy"] = policy
        budget, _ = TeamBudget.objects.update_or_create(team=team, defaults=defaults)
    after = budget_fields(budget)
    if before != after:
        # The month's budget for its burn-down, once the month is over (billing.reports.usage_page).
        BudgetMonth.objects.record(team, budget, month_start(now).date())
        audit_budget_change(actor, team, before, after, ip=ip)
        schedule_team_sync(team)  # a raised budget may let queued work start
    return budget


# -- capacity ------------------------------------------------------------------------------


def capacity_rows(pending: dict[int, int] | None = None) -> tuple[list[dict], list[dict], str, list[dict]]:
    """The Capacity page's figures: ``(flavor rows, node rows, error, pool rows)``.

    Per flavor: the units of its ready nodes (allocatable, and in use by running pods), the units of its nodes
    still provisioning and the units its elastic pools may still add (docs/pools.md), team quota sum,
    over-commit (quotas ÷ what the clusters may ever hold: ready, provisioning and may-add units, which is what
    quota follows; ``overcommitted`` above 1), units reserved by admitted work, units admitted but waiting for
    the cluster (``pending``: flavor id → units, from the caller) and queued units.
    Per node and GPU resource: its cluster, allocatable, running, free, whether it is still provisioning, and
    the flavors it offers. A pool's room is no node: it is counted, never listed, never "in use".
    Per elastic pool: its settings and nodes ready, provisioning and that it may still add
    (:func:`pool_rows`). The flavor figures add up every cluster that answered. ``error`` names each cluster
    that could not be asked and why (a lost one is not asked: its pools show its nodes as last read); the
    portal's own figures still show.
    """
    located, room, errors, pooled = [], [], [], []  # (cluster name, node): real nodes, and pools' room
    for cluster in fleet.clusters():
        if cluster.state == State.LOST:
            # Not asked: the page must not wait on a cluster that does not answer.
            errors.append(f"{cluster.name}: lost since {format_when(cluster.silent_since)}")
            pooled += pool_rows(cluster, fleet.recorded_nodes(cluster), as_recorded=True)
            continue
        try:
            answered = fleet.backend(cluster).capacity()  # a cluster reports no headroom: its nodes
        except ClusterError as exc:
            errors.append(f"{cluster.name}: {exc}")
            pooled += pool_rows(cluster, fleet.recorded_nodes(cluster), as_recorded=True)
            continue
        located += [(cluster.name, n) for n in answered]
        room += [(cluster.name, n) for n in pools.with_headroom(cluster, answered) if pools.is_headroom(n)]
        pooled += pool_rows(cluster, answered)
    error = "; ".join(errors)
    nodes = [n for _c, n in located] if located or not errors else None
    quota_sums = {row["flavor_id"]: row["total"] for row in
                  TeamQuota.objects.values("flavor_id").annotate(total=Sum("limit")).order_by()}
    reserved = units_in_use()
    queued = {row["flavor_id"]: row["total"] for row in
              QueuedRequest.objects.values("flavor_id").annotate(total=Sum("units")).order_by()}
    flavors = list(GpuFlavor.objects.order_by("-active", "name"))
    specs = {flavor.pk: flavor.to_spec() for flavor in flavors}
    rows = []
    for flavor in flavors:
        matching = [n for n in nodes if offers(n, specs[flavor.pk])] if nodes is not None else None
        ready = [n for n in matching if not n.provisioning] if matching is not None else None
        allocatable = sum(n.allocatable for n in ready) if ready is not None else None
        provisioning = sum(n.allocatable for n in matching if n.provisioning) if matching is not None else 0
        may_add = sum(n.allocatable for _c, n in room if offers(n, specs[flavor.pk]))
        quota_sum = quota_sums.get(flavor.pk, 0)
        ever = (allocatable or 0) + provisioning + may_add
        overcommit = round(quota_sum / ever, 2) if ever and allocatable is not None else None
        rows.append({
            "flavor": flavor,
            "nodes": len(ready) if ready is not None else None,
            "allocatable": allocatable,
            "cluster_in_use": sum(n.in_use for n in ready) if ready is not None else None,
            "provisioning": provisioning,
            "may_add": may_add,
            "quota_sum": quota_sum,
            "overcommit": overcommit,
            "overcommitted": overcommit is not None and overcommit > 1,
            "in_use": reserved.get(flavor.pk, 0),
            "pending": (pending or {}).get(flavor.pk, 0),
            "queued": queued.get(flavor.pk, 0),
        })
    node_rows = [{"cluster": name, "node": n.node, "resource": n.resource_name, "allocatable": n.allocatable,
                  "running": n.in_use, "free": n.free, "full": n.free == 0 and not n.provisioning,
                  "provisioning": n.provisioning,
                  "flavors": [f.name for f in flavors if f.usable and offers(n, specs[f.pk])]}
                 for name, n in sorted(located, key=lambda item: (item[0], item[1].node, item[1].resource_name))]
    return rows, node_rows, error, pooled


def pool_rows(cluster, nodes: list, as_recorded: bool = False) -> list[dict]:
    """The Capacity page's line per elastic pool of ``cluster``: its mode, min and max (nodes, and the units its
    max allows: what quota follows), nodes ready, provisioning and that it may still add, among ``nodes`` (the
    cluster's answer now, or ``as_recorded``: its nodes as last read, when it could not be asked)."""
    lines = []
    for pool in pools.pools_of(cluster):
        own = pools.pool_nodes(pool, nodes)
        now = pools.status(pool, nodes)
        lines.append({"cluster": cluster.name, "flavor": pool.flavor, "mode": pool.mode, "min": pool.min_nodes,
                      "max": pool.max_nodes, "max_units": pool.effective_max_nodes * pool.units_per_node,
                      "capped": pool.effective_max_nodes < pool.max_nodes, "ready": now.nodes_ready,
                      "provisioning": now.nodes_provisioning, "may_add": pools.room_of(pool, own),
                      "unneeded_minutes": pool.unneeded_minutes, "as_recorded": as_recorded})
    return lines


def cluster_flavors(cluster) -> list[dict]:
    """Per flavor the cluster's nodes offer (by :func:`cluster.capacity.offers`, as last recorded):
    capacity, free units and the price. Flavors it does not offer are left out. With elastic pools (docs/pools.md)
    the capacity is what the cluster may ever hold (its nodes and those its pools may still add: what quota
    follows), and free what work could start on now (ready nodes only: a provisioning node runs nothing yet)."""
    nodes = fleet.recorded_nodes(cluster)
    rows = []
    for flavor in GpuFlavor.objects.usable().order_by("name"):
        spec = flavor.to_spec()
        serving = [n for n in nodes if offers(n, spec)]
        if serving:
            rows.append({"flavor": flavor.name, "capacity": sum(n.allocatable for n in serving),
                         "free": sum(n.free for n in serving if not n.provisioning), "price_per_hour": flavor_price(flavor, False, cluster.pk)})
    return rows


def cluster_view(cluster) -> dict:
    """A cluster as the staff API and the admin page show it, with its training API (docs/training.md)."""
    return {"name": cluster.name, "state": cluster.state, "last_seen": cluster.last_seen, "region": cluster.region,
            "labels": cluster.labels, "last_error": cluster.last_error, "flavors": cluster_flavors(cluster),
            "training_api": cluster.effective_training_api, "training_api_discovered": cluster.training_api or None,
            "training_api_override": cluster.training_api_override or None, "frameworks": list(cluster.frameworks),
            "training_runtimes": [{"name": r.name, "framework": r.framework} for r in cluster.runtimes],
            "training_checked_at": cluster.training_checked_at, "training_error": cluster.training_error,
            "pools": cluster_pools(cluster)}


def cluster_pools(cluster) -> list[dict]:
    """Its elastic pools as the clusters API shows them (:func:`fleet.pools.answer`), from its nodes as last read."""
    nodes = fleet.recorded_nodes(cluster)
    return [pools.answer(pool, nodes) for pool in pools.pools_of(cluster)]
