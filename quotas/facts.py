"""What admission reads: the facts :func:`quotas.decide.decide` is given, and the units teams hold.

One place reads them for every caller of the rule — :mod:`quotas.admission` under the
admission lock, the read-only queue view (:mod:`quotas.queue`) and previews without it, and the
pages, the API and ``/metrics`` that show the same figures:

* the team's quota rows (:func:`team_quotas`) and its cohort's members, quotas, units in use
  and weights (:class:`CohortFigures`), turned into a flavor's :class:`~quotas.decide.FlavorQuota`
  (:func:`flavor_quota`);
* the units in use (:func:`units_in_use`): the units of the active (unreleased) holds;
* the team's month in money (:func:`team_budget_state`);
* whether a cluster takes new work of a flavor (:class:`ClusterWaits`, issue 34): worked out
  outside the rule, from the clusters as last recorded, and passed to it as data;
* a queue entry's or a hold's request (:func:`request_of`).

Nothing here locks or writes; what is read without the lock is a moment's figure, and only
:mod:`quotas.admission` decides on figures that must stay true until commit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F, IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

import fleet.services as fleet
from billing import reserved
from billing.models import QuotaHold
from cluster.placement import PLACEABLE_STATES, ClusterOffer, PlacementRequest, no_usable_cluster, reserved_in_the_way
from core.formatting import format_when
from core.priority import Priority
from fleet.models import Cluster, GpuFlavor
from quotas.decide import FlavorQuota, Lender, ResourceRequest
from quotas.models import QueuedRequest, TeamQuota, TeamSharing
from teams.models import Team


def quota_rows():
    """Quota rows with their flavors and their team's cohort id (``cohort_of_team``, read in
    the same query: a team outside any cohort pays no query for being outside)."""
    return TeamQuota.objects.select_related("flavor").annotate(cohort_of_team=F("team__sharing__cohort_id"))


def team_quotas(team) -> dict[int, TeamQuota]:
    """``{flavor id: TeamQuota}`` of the team, with the flavors and its cohort id (one query)."""
    return {q.flavor_id: q for q in quota_rows().filter(team=team)}


def cohort_of_quotas(quotas: dict[int, TeamQuota]) -> CohortFigures | None:
    """The :class:`CohortFigures` of the team whose :func:`team_quotas` these are (None outside a
    cohort, or without quota rows, where nothing could be borrowed anyway)."""
    row = next(iter(quotas.values()), None)
    return cohort_figures(getattr(row, "cohort_of_team", None))


@dataclass
class CohortFigures:
    """A cohort's members, their quotas, units in use and fair-share weights, read once (three queries)."""

    slugs: dict[int, str]  # team id → slug
    quotas: dict[tuple[int, int], TeamQuota]  # (team id, flavor id) → quota
    usage: dict[tuple[int, int], int]  # (team id, flavor id) → units held
    weights: dict[int, Decimal] = dataclasses.field(default_factory=dict)  # team id → fair_weight (absent: 1)

    def member(self, team_id: int, flavor_id: int) -> Lender:
        """A member's :class:`Lender` figures for a flavor (limit 0 without a quota)."""
        quota = self.quotas.get((team_id, flavor_id))
        return Lender(self.slugs.get(team_id, ""), quota.limit if quota else 0,
                      self.usage.get((team_id, flavor_id), 0), quota.lending_limit if quota else None)

    def lendable(self, flavor_id: int) -> int:
        """What the members put into the cohort's pool for a flavor (the sum of their :attr:`Lender.lends`)."""
        return sum(self.member(team_id, flavor_id).lends for team_id in self.slugs)

    def borrowed(self, team_id: int, flavor_id: int, adding: int = 0) -> int:
        """Units of a flavor the member holds above its nominal quota (holding ``adding`` more)."""
        member = self.member(team_id, flavor_id)
        return max(0, member.in_use + adding - member.limit)

    def lenders(self, team_id: int, flavor_id: int) -> tuple[Lender, ...]:
        """The other members' figures for a flavor (those with a quota of it or units of it in use)."""
        lenders = []
        for member, slug in sorted(self.slugs.items(), key=lambda item: item[1]):
            quota, used = self.quotas.get((member, flavor_id)), self.usage.get((member, flavor_id), 0)
            if member != team_id and (quota is not None or used):
                lenders.append(Lender(slug, quota.limit if quota else 0, used, quota.lending_limit if quota else None))
        return tuple(lenders)


def cohort_id_of(team) -> int | None:
    """The id of the team's cohort, or None outside any."""
    return TeamSharing.objects.filter(team_id=team.pk).values_list("cohort_id", flat=True).first()


def cohort_figures(cohort_id: int | None) -> CohortFigures | None:
    """:class:`CohortFigures` of a cohort (None for None)."""
    if cohort_id is None:
        return None
    members = list(TeamSharing.objects.filter(cohort_id=cohort_id).values_list("team_id", "team__slug", "fair_weight"))
    slugs = {team_id: slug for team_id, slug, _weight in members}
    quotas = {(q.team_id, q.flavor_id): q for q in TeamQuota.objects.filter(team_id__in=slugs)}
    usage = {key: units for key, (units, _borrowed)
             in QuotaHold.objects.on_quota().filter(team_id__in=slugs).units_by_team_and_flavor().items()}
    return CohortFigures(slugs, quotas, usage, {team_id: weight for team_id, _slug, weight in members})


def flavor_quota(flavor: GpuFlavor | None, quota: TeamQuota | None,
                  cohort: CohortFigures | None = None, team_id: int | None = None) -> FlavorQuota:
    """The :class:`FlavorQuota` facts of a flavor and the team's quota row (with its cohort's lenders)."""
    if flavor is None:
        return FlavorQuota(exists=False)
    return FlavorQuota(active=flavor.usable, max_units_per_node=flavor.max_units_per_node,
                       limit=quota.limit if quota is not None else None,
                       borrowing_limit=quota.borrowing_limit if quota is not None else None,
                       lending_limit=quota.lending_limit if quota is not None else None,
                       lenders=cohort.lenders(team_id, flavor.pk) if cohort is not None else None)


class ClusterWaits:
    """Why no cluster can take new work of a flavor now (:func:`cluster.placement.no_usable_cluster`),
    for :func:`~quotas.decide.decide`'s ``no_cluster``: asked per flavor and capacity type, the clusters read once
    (:func:`fleet.services.recorded_offers`, one query, on the first question) — so a queue of
    any length costs one read per pass."""

    def __init__(self) -> None:
        self._offers: list[ClusterOffer] | None = None
        self._found: dict[tuple[int, bool, str], str] = {}
        self._windowed: set[int] | None = None

    def all_ready(self) -> bool:
        """Every cluster takes new work: nothing waits for one (no flavor needs reading to know)."""
        if self._offers is None:
            self._offers = fleet.recorded_offers()
        return all(offer.state in PLACEABLE_STATES for offer in self._offers)

    def __call__(self, flavor: GpuFlavor | None, spot: bool, request: ResourceRequest | None = None,
                 not_before=None) -> str:
        """Why no cluster takes new work of ``flavor`` now ("" when one does); with ``request``, also whether the
        units kept for reserved windows leave it no room now (:func:`reserved_wait`). ``not_before``: a queue
        entry's backoff after its nodes could not be provisioned (docs/pools.md): until then no cluster takes it."""
        if not_before is not None and not_before > timezone.now():
            return backoff_wait(not_before)
        if flavor is None:
            return ""
        framework = request.training_framework if request is not None else ""
        if not self.all_ready() or framework:
            key = (flavor.pk, spot, framework)
            if key not in self._found:
                self._found[key] = no_usable_cluster(flavor.to_spec(), spot, self.offers(), framework)
            if self._found[key]:
                return self._found[key]
        if request is None:
            return ""
        if self._windowed is None:  # the flavors with a window not over: one query, the first time it matters
            self._windowed = reserved.flavors_reserved(timezone.now())
        return reserved_wait(flavor, request, timezone.now(), self) if flavor.pk in self._windowed else ""

    def offers(self) -> list[ClusterOffer]:
        if self._offers is None:
            self._offers = fleet.recorded_offers()
        return self._offers


def backoff_wait(not_before) -> str:
    """The words of work waiting out its backoff after a failed provisioning (:data:`cluster.pools.MAX_TRIES`)."""
    return f"its nodes could not be provisioned; it tries again after {format_when(not_before)}"


def reserved_block(flavor: GpuFlavor, request: ResourceRequest, now,
                   waits: ClusterWaits | None = None) -> tuple[str, reserved.Withheld] | None:
    """``(cluster name, what its windows keep)`` when the units windows keep from ``request`` — those that start
    before its runtime limit ends plus the lead (:func:`billing.reserved.horizon`), less those it may be lent
    (:func:`billing.reserved.lendable`) — leave no ready cluster room for it now
    (:func:`cluster.placement.reserved_in_the_way`, on the clusters as last recorded); None when they do not.
    Spot work never runs on reserved units."""
    if request.spot:
        return None
    keeps = reserved.withheld(flavor.pk, now, reserved.horizon(now, request.limit_minutes))
    blocking = {pk: kept for pk, kept in keeps.items()
                if kept.units and not reserved.lendable(kept, now, request.may_borrow)}
    if not blocking:
        return None
    names = dict(Cluster.objects.filter(pk__in=blocking).values_list("pk", "name"))
    shaped = PlacementRequest.shaped(flavor.to_spec(), request.units, request.units_per_node)
    offers = waits.offers() if waits is not None else fleet.recorded_offers()
    if not reserved_in_the_way(shaped, offers, {names[pk]: kept.units for pk, kept in blocking.items()}):
        return None
    pk, first = min(blocking.items(), key=lambda item: (item[1].start, item[0]))
    return names[pk], first


def reserved_wait(flavor: GpuFlavor, request: ResourceRequest, now, waits: ClusterWaits | None = None) -> str:
    """Why ``request`` waits for reserved windows (:func:`reserved_block`; "" when it does not): "4 of east's
    h100-80gb are reserved by team nlp from 09:00 to 17:00 (Mon 24 Nov)"."""
    found = reserved_block(flavor, request, now, waits)
    if found is None:
        return ""
    cluster, first = found
    team = Team.objects.filter(pk=first.team_id).values_list("slug", flat=True).first() or "?"
    when = (f"until {format_when(first.end)}" if first.start <= now
            else f"from {format_when(first.start)} to {format_when(first.end)}")
    return f"{first.units} of {cluster}'s {flavor.name} are reserved by team {team} {when}"


def units_in_use(team=None, flavor_id: int | None = None) -> dict[int, int]:
    """``{flavor id: units}`` the team holds now (every team's when None; one flavor's when given), one query.

    Units in use are the units of the active (unreleased) holds on the quota — not a team's work inside its own
    reserved window, which holds the window's units on top of it (:meth:`~billing.models.QuotaHoldQuerySet.on_quota`): the one figure
    :func:`~quotas.decide.decide` compares with limits, and that quota pages, the API, the Capacity page and
    burst scaling show. (Admission's hot path, :func:`quotas.admission.admit`, reads the same sum in its facts statement.)
    """
    held = QuotaHold.objects.on_quota()
    if team is not None:
        held = held.filter(team=team)
    if flavor_id is not None:
        held = held.filter(flavor_id=flavor_id)
    return held.units_by_flavor()


def units_held_by_team() -> dict[tuple[int, int], tuple[int, int]]:
    """``{(team id, flavor id): (units in use, borrowed units)}`` of every team, one query:
    :func:`units_in_use` of all teams at once, with the part of it their cohorts lent."""
    return QuotaHold.objects.on_quota().units_by_team_and_flavor()


def in_use_of_row():
    """:func:`units_in_use` of each row's team and flavor, as an annotation (a correlated subquery):
    for lists of quota rows (the admin console) without a query per row."""
    units = (QuotaHold.objects.on_quota().filter(team=OuterRef("team"), flavor=OuterRef("flavor"))
             .order_by().values("team").annotate(total=Sum("units")).values("total"))
    return Coalesce(Subquery(units, output_field=IntegerField()), Value(0))


def borrowable(team, quotas: dict[int, TeamQuota], in_use: dict[int, int]) -> dict[int, int]:
    """``{flavor id: units}`` the team's cohort could lend it now, per flavor of ``quotas``
    (:func:`team_quotas`) holding ``in_use`` (:func:`units_in_use`); {} outside a cohort."""
    cohort = cohort_of_quotas(quotas)
    if cohort is None:
        return {}
    return {fid: flavor_quota(quota.flavor, quota, cohort, team.pk).borrowable(in_use.get(fid, 0))
            for fid, quota in quotas.items()}


class Windows:
    """The teams' reserved windows as admission reads them (docs/reservations.md "Inside the window"): per team
    and flavor, the windows open now with their free units (:func:`billing.reserved.rooms`) and the most one of
    its windows not over yet holds (:func:`billing.reserved.largest_ahead`). Read once per pass (one query, three
    more when a team has a window at all) and updated as work is admitted into them (:meth:`take`).

    Open or targeted (docs/reservations.md "Open or targeted"): work that names a reservation goes only into its
    windows; work that names none only into open ones, and there not into the units that work queued for the
    booking waits for (:attr:`claims`) — the work a booking is for goes in first."""

    def __init__(self, team_ids: list[int], now) -> None:
        self.ahead = reserved.largest_ahead(team_ids, now)
        self.open = reserved.rooms(team_ids, now) if self.ahead else {}
        #: ``{booking ref: units}`` of the queued work that names each booking.
        self.claims: dict[str, int] = {}
        if self.open:
            named = (QueuedRequest.objects.filter(team_id__in=team_ids, for_reservation__isnull=False)
                     .values("for_reservation").annotate(total=Sum("units")).order_by())
            self.claims = {reserved.ref_of(row["for_reservation"]): row["total"] for row in named}
        self.taken: dict[str, int] = {}  # ref → the window it was admitted into

    def _named(self, team_id: int, flavor_id: int | None, for_reservation: int | None) -> str | None:
        """The ref of the booking a request names while that booking has a window of the flavor not over (None:
        it names none, or its booking is over — then it goes by the rules of work that names none)."""
        ref = reserved.named_ref(for_reservation)
        ahead = self.ahead.get((team_id, flavor_id))
        return ref if ref is not None and ahead is not None and ahead.most(ref) else None

    def _rooms(self, team_id: int, flavor_id: int | None, named: str | None) -> list[reserved.Room]:
        """The open windows a request naming ``named`` may go into, with what it may take of each (work naming
        none: less the units queued work that names the booking waits for), the most free first."""
        rooms = [room for room in self.open.get((team_id, flavor_id), []) if room.takes(named)]
        if named is None:
            rooms = [dataclasses.replace(room, free=max(0, room.free - self.claims.get(room.ref, 0))) for room in rooms]
        return sorted(rooms, key=lambda room: (-room.free, room.end, room.window_id))

    def apply(self, quota: FlavorQuota, team_id: int, flavor_id: int | None,
              for_reservation: int | None = None) -> FlavorQuota:
        """``quota`` with the team's reserved figures of the flavor, for a request naming the reservation
        ``for_reservation`` (None: none)."""
        ahead = self.ahead.get((team_id, flavor_id))
        named = self._named(team_id, flavor_id, for_reservation)
        most = ahead.most(named) if ahead is not None else 0
        if not most:
            return quota
        rooms = self._rooms(team_id, flavor_id, named)
        return dataclasses.replace(quota, reserved=rooms[0].free if rooms else 0, reserved_ahead=most,
                                   reserved_named=named is not None)

    def take(self, team_id: int, flavor_id: int, units: int, ref: str,
             for_reservation: int | None = None) -> reserved.Room | None:
        """The window ``ref``'s request of ``units`` (naming the reservation ``for_reservation``), admitted into a
        reservation, goes into (its free units taken; :attr:`taken` remembers it by ref)."""
        named = self._named(team_id, flavor_id, for_reservation)
        room = next((r for r in self._rooms(team_id, flavor_id, named) if r.free >= units), None)
        if room is None:
            return None
        found = self.open[(team_id, flavor_id)]
        at = next(i for i, r in enumerate(found) if r.window_id == room.window_id)
        found[at] = dataclasses.replace(found[at], free=found[at].free - units)
        if named is not None:
            self.claims[named] = max(0, self.claims.get(named, 0) - units)
        self.taken[ref] = room.window_id
        return room


def in_use_of(team, flavor_id: int) -> int:
    """:func:`units_in_use` of one flavor of the team: what :func:`quotas.decide.decide` is given as ``usage``."""
    return units_in_use(team, flavor_id).get(flavor_id, 0)


def units_of(team, flavor_id: int) -> tuple[int, int]:
    """``(in use, limit)`` of the team's units of a flavor right now (limit 0 without a quota; no lock)."""
    limit = TeamQuota.objects.filter(team=team, flavor_id=flavor_id).values_list("limit", flat=True).first() or 0
    return in_use_of(team, flavor_id), limit


def request_of(entry: QueuedRequest | QuotaHold) -> ResourceRequest:
    """A queue entry's request as submitted (priced as it was); a hold's unpriced (what a resize asks)."""
    request = ResourceRequest(flavor=entry.flavor.name, units=entry.units, units_per_node=entry.units_per_node,
                              priority=Priority.from_rank(entry.priority), spot=entry.spot,
                              description=entry.description, committed_units=entry.committed_units,
                              limit_minutes=entry.limit_minutes, user_id=entry.user_id)
    if isinstance(entry, QueuedRequest):
        request = dataclasses.replace(request, estimated_cost=entry.estimated_cost, cost_per_hour=entry.cost_per_hour,
                                      may_borrow=entry.may_borrow, for_reservation=entry.for_reservation)
    return request
