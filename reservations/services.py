"""Reservations' user actions, one function each — :func:`book`, :func:`cancel`, :func:`approve`,
:func:`decline` — and what the pages and the API read (:func:`availability`, :func:`visible_reservations`).

A booking is checked in three steps, each refusing with field errors before anything is written: its
shape (its windows, from its rule: :mod:`reservations.windows`), the policy (:mod:`reservations.policy`)
and — under the flavor's row lock, which every booking of the flavor takes first, so bookings serialize
as admissions do on the team's row — room on the cluster (:mod:`reservations.occupancy`) and in the
budget. Its windows are billing's reserved windows (:class:`billing.models.ReservedWindow`): what it
holds when, at the price of its booking, which the month's commitments count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import Exists, QuerySet
from django.urls import reverse
from django.utils import timezone

import fleet.services as fleet
from billing import reserved
from billing.ledger import RefLabel
from billing.models import flavor_price
from cluster.capacity import serves
from core.formatting import format_money, format_when
from core.money import ZERO
from fleet.models import Cluster, GpuFlavor
from reservations import events, occupancy
from reservations import policy as rules
from reservations import windows as calendar
from reservations.constants import AuditAction
from reservations.models import FlavorPolicy, Matching, Reservation, ReservationState, TeamPolicy
from reservations.occupancy import SLOT
from teams.models import Role, Team
from teams.permissions import get_for_user, require_staff_permission, require_team, visible_to
from teams.services import audit

#: The permission staff need to approve or decline a booking (the admin console's, too).
DECIDE_PERMISSION = "reservations.change_reservation"

#: What availability shows without ``to``: the calendar page's two weeks.
DEFAULT_SPAN = timedelta(days=14)
#: The longest span one availability request may ask for (2,976 slots a cluster).
LONGEST_SPAN = timedelta(days=62)


class BookingRefused(Exception):
    """A booking outside what may be booked: ``errors`` by request field, each naming the limit."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


class ReservationConflict(Exception):
    """The reservation's state does not allow the move (a 409)."""


@dataclass(frozen=True)
class Booking:
    """A booking's request, its fields checked for type (by the serializer or the form)."""

    team: Team
    flavor: GpuFlavor
    cluster: Cluster | None  # None: any, Slipway picks
    units: int
    start: datetime  # naive: wall-clock time in ``zone``
    end: datetime
    zone: ZoneInfo
    recurrence: calendar.Recurrence | None
    name: str
    purpose: str = ""
    matching: str = "open"  # Matching: "open" or "targeted" (docs/reservations.md "Open or targeted")


def policy_for(team: Team, flavor: GpuFlavor) -> rules.Policy:
    """The policy a booking of ``team`` for ``flavor`` is held to (the flavor's, with the team's overrides)."""
    team_row = TeamPolicy.objects.filter(team=team, flavor=flavor).first()
    return rules.effective(policy_for_share(flavor), team_row.overrides() if team_row else None)


def capacity(cluster: Cluster, flavor: GpuFlavor) -> int:
    """The units of ``flavor`` the cluster's on-demand nodes offer, as last recorded: what its share is of.
    Spot nodes do not count: a reservation is a promise, and a spot node may be taken back at any time."""
    spec = flavor.to_spec()
    return sum(n.allocatable for n in fleet.recorded_nodes(cluster) if serves(n, spec, spot=False))


def _held(cluster: Cluster, flavor: GpuFlavor, start: datetime, end: datetime) -> list[occupancy.Held]:
    return [occupancy.Held(w.start, w.end, w.units) for w in reserved.overlapping(cluster.pk, flavor.pk, start, end)]


def _candidates(booking: Booking) -> list[Cluster]:
    """The clusters the booking may go to, read under the lock (their nodes as last recorded): the one asked
    for, or every cluster not draining whose on-demand nodes offer the flavor."""
    if booking.cluster is not None:
        return [Cluster.objects.get(pk=booking.cluster.pk)]
    return [c for c in fleet.clusters() if not c.draining and capacity(c, booking.flavor) > 0]


@dataclass(frozen=True)
class Quote:
    """What a booking would be, checked: its cluster, windows, price and the state it would start in."""

    cluster: Cluster
    units: int
    windows: list[calendar.Window]
    price_per_unit_hour: Decimal
    price: Decimal
    state: str

    @property
    def unit_hours(self) -> Decimal:
        return self.units * sum((w.hours for w in self.windows), ZERO)


def _checked(booking: Booking, now: datetime) -> Quote:
    """Every check of a booking — its shape, the policy, the room, the budget — in that order; the first that
    fails raises :class:`BookingRefused` with all of its field errors."""
    found = _windows(booking)
    policy = policy_for(booking.team, booking.flavor)
    errors = rules.refusals(policy, booking.flavor.name, booking.units, found, now,
                            _week_hours(booking, found), calendar.unit_hours_by_week(found, booking.units, booking.zone))
    if errors:
        raise BookingRefused(errors)
    cluster = _room(booking, found, policy)
    price_per_unit_hour = flavor_price(booking.flavor, False, cluster.pk)
    price = sum((reserved.window_cost(price_per_unit_hour, booking.units, w.start, w.end) for w in found), ZERO)
    _check_budget(booking, cluster, found, price_per_unit_hour, now)
    state = ReservationState.PENDING if policy.needs_approval else ReservationState.BOOKED
    return Quote(cluster, booking.units, found, price_per_unit_hour, price, state)


def quote(user, booking: Booking) -> Quote:
    """What booking ``booking`` would give now (the form's price preview), writing nothing; the same refusals as
    :func:`book`. Without the lock: the booking itself checks the room again."""
    require_team(user, booking.team, Role.MEMBER)
    return _checked(booking, timezone.now())


def book(user, booking: Booking) -> Reservation:
    """Book ``booking`` for ``user`` (a member of its team): a reservation, pending when the policy wants a
    staff approval, else booked. Raises :class:`BookingRefused` with what to change, writing nothing."""
    require_team(user, booking.team, Role.MEMBER)
    now = timezone.now()
    with transaction.atomic():
        # The flavor's row lock: every booking of the flavor takes it first, so the room read below is
        # still the room when the windows are written (the admission pattern, on the flavor).
        GpuFlavor.objects.select_for_update().filter(pk=booking.flavor.pk).exists()
        checked = _checked(booking, now)
        cluster, found, price_per_unit_hour, price, state = (checked.cluster, checked.windows,
                                                             checked.price_per_unit_hour, checked.price, checked.state)
        reservation = Reservation.objects.create(
            team=booking.team, created_by=user, name=booking.name, purpose=booking.purpose, flavor=booking.flavor,
            cluster=cluster, units=booking.units, time_zone=booking.zone.key, start=found[0].start, end=found[0].end,
            recurrence=_recurrence_fields(booking.recurrence), state=state, matching=booking.matching,
            price_per_unit_hour=price_per_unit_hour, price=price)
        reserved.hold(reservation.ref, booking.team, booking.flavor, cluster, booking.units,
                      [(w.start, w.end) for w in found], price_per_unit_hour,
                      confirmed=state == ReservationState.BOOKED, targeted=booking.matching == Matching.TARGETED)
        audit(AuditAction.BOOKED, actor=user, team=booking.team, target=reservation.ref,
              name=reservation.name, flavor=booking.flavor.name, cluster=cluster.name, units=booking.units,
              windows=len(found), price=str(price), state=state, matching=booking.matching)
        events.reservation_moved.send(sender=Reservation, reservation=reservation, move=events.BOOKED, at=now)
    return reservation


def _windows(booking: Booking) -> list[calendar.Window]:
    """The booking's windows, or its shape's refusals."""
    if booking.end <= booking.start:
        raise BookingRefused({"end": ["the window must end after it starts"]})
    if booking.recurrence is not None and not calendar.on_the_rule(booking.start, booking.recurrence):
        raise BookingRefused({"recurrence": [f"the first window ({booking.start:%A}) must fall on one of the chosen days"]})
    found = calendar.windows(booking.start, booking.end, booking.zone, booking.recurrence)
    if not found:  # a rule that ends before its first window (the API and the form refuse it first, on its until)
        raise BookingRefused({"recurrence": [calendar.until_refusal(booking.start, booking.recurrence.until)]})
    if len(found) > calendar.MOST_WINDOWS:
        raise BookingRefused({"recurrence": [f"a booking has at most {calendar.MOST_WINDOWS} windows"]})
    if calendar.bad_windows(found):
        first = calendar.bad_windows(found)[0]
        raise BookingRefused({"start": [f"the window of {format_when(first.start)} is empty: the clocks change within it"]})
    return found


def _week_hours(booking: Booking, found: list[calendar.Window]) -> dict:
    """What the team has reserved of the flavor already in the weeks the booking touches (local weeks)."""
    start, end = found[0].start - timedelta(days=7), found[-1].end + timedelta(days=7)
    totals: dict = {}
    for window in reserved.of_team(booking.team.pk, booking.flavor.pk, start, end):
        piece = calendar.Window(window.start, window.end)
        for monday, hours in calendar.unit_hours_by_week([piece], window.units, booking.zone).items():
            totals[monday] = totals.get(monday, ZERO) + hours
    return totals


def _room(booking: Booking, found: list[calendar.Window], policy: rules.Policy) -> Cluster:
    """The cluster the booking fits on throughout (the one asked for, or — any — the cheapest that fits, then
    the one with the most reservable units), or the refusal naming the first instant that is not free."""
    spans = [(w.start, w.end) for w in found]
    conflicts = []
    fitting = []
    for cluster in _candidates(booking):
        limit = occupancy.reservable(capacity(cluster, booking.flavor), policy.reservable_share)
        if booking.units > limit:
            conflicts.append(f"{cluster.name} may have at most {limit} units of {booking.flavor.name} reserved")
            continue
        at = occupancy.first_conflict(_held(cluster, booking.flavor, found[0].start, found[-1].end), spans,
                                      booking.units, limit)
        if at is None:
            fitting.append((flavor_price(booking.flavor, False, cluster.pk), -limit, cluster.name, cluster))
        else:
            conflicts.append(f"{booking.units} units are not free on {cluster.name} from {format_when(at)}")
    if fitting:
        return min(fitting, key=lambda row: row[:3])[3]
    if not conflicts:
        conflicts.append(f"no cluster offers {booking.flavor.name} on on-demand nodes")
    raise BookingRefused({"start": conflicts})


def _check_budget(booking: Booking, cluster: Cluster, found, price_per_unit_hour: Decimal, now: datetime) -> None:
    """Refuse a booking whose money in a month would pass that month's budget, with the figure."""
    for month, cost in reserved.cost_by_month(price_per_unit_hour, booking.units,
                                              [(w.start, w.end) for w in found]).items():
        left = reserved.budget_left(booking.team, month, now)
        if left is not None and cost > left.amount:
            raise BookingRefused({"units": [
                f"the booking's {format_money(cost, left.currency)} in {month:%B %Y} would pass the budget: "
                f"{format_money(max(left.amount, ZERO), left.currency)} left"]})


def _recurrence_fields(recurrence: calendar.Recurrence | None) -> dict | None:
    if recurrence is None:
        return None
    return {"frequency": recurrence.frequency, "days": [calendar.DAYS[d] for d in recurrence.days],
            "until": recurrence.until.isoformat() if recurrence.until else None, "count": recurrence.count}


# -- moves -----------------------------------------------------------------------------------------------


def _move(reservation: Reservation, states: tuple[str, ...], *conditions, **changes) -> bool:
    """The conditional state move: it happens once, whoever races (and only while ``conditions`` hold)."""
    return Reservation.objects.filter(*conditions, pk=reservation.pk, state__in=states).update(**changes) == 1


def cancel(user, reservation: Reservation, as_staff: bool = False) -> Reservation:
    """Cancel: windows not started are freed; one under way ends now. Members cancel their team's bookings; staff
    with the permission to decide on bookings cancel any team's in the admin console (``as_staff``), which offers no
    delete: a booking's windows and what they billed must go through this move (reservations.admin)."""
    if as_staff:
        require_staff_permission(user, DECIDE_PERMISSION, "cancel reservations")
    else:
        require_team(user, reservation.team, Role.MEMBER)
    now = timezone.now()
    with transaction.atomic():
        if not _move(reservation, (ReservationState.PENDING, ReservationState.BOOKED),
                     state=ReservationState.CANCELLED, cancelled_at=now):
            reservation.refresh_from_db(fields=["state"])
            raise ReservationConflict(f"The reservation is {reservation.get_state_display().lower()} already.")
        reserved.release(reservation.ref, now)
        audit(AuditAction.CANCELLED, actor=user, team=reservation.team, target=reservation.ref, name=reservation.name)
        reservation.refresh_from_db()
        events.reservation_moved.send(sender=Reservation, reservation=reservation, move=events.CANCELLED, at=now)
    return reservation


def approve(user, reservation: Reservation) -> Reservation:
    """Book a pending reservation (staff). Its windows act from the approval on: one under way is billed from the
    approval, not its start, and those that passed while it waited are never billed (:func:`billing.reserved.confirm`).
    One whose windows are all over is refused — nothing is left to approve, and approving it would only bill hours it
    never had — so staff decline it; the move is conditional on a window not over, so that holds whoever races."""
    require_staff_permission(user, DECIDE_PERMISSION, "approve reservations")
    now = timezone.now()
    with transaction.atomic():
        ahead = reserved.of_refs([reservation.ref], now)
        if not _move(reservation, (ReservationState.PENDING,), Exists(ahead), state=ReservationState.BOOKED,
                     decided_by=user, decided_at=now):
            reservation.refresh_from_db(fields=["state"])
            if reservation.state != ReservationState.PENDING:
                raise ReservationConflict(f"Only a pending reservation is approved; this one is {reservation.state}.")
            raise ReservationConflict("Nothing is left to approve: every window of this reservation ended while it "
                                      "waited. Decline it to close it.")
        reserved.confirm(reservation.ref, now)  # its windows act on the queue from now on
        audit(AuditAction.APPROVED, actor=user, team=reservation.team, target=reservation.ref, name=reservation.name)
        reservation.refresh_from_db()
        events.reservation_moved.send(sender=Reservation, reservation=reservation, move=events.APPROVED, at=now)
    return reservation


def decline(user, reservation: Reservation, reason: str) -> Reservation:
    require_staff_permission(user, DECIDE_PERMISSION, "decline reservations")
    now = timezone.now()
    with transaction.atomic():
        if not _move(reservation, (ReservationState.PENDING,), state=ReservationState.DECLINED, decided_by=user,
                     decided_at=now, decline_reason=reason):
            raise ReservationConflict(f"Only a pending reservation is declined; this one is {reservation.state}.")
        reserved.release(reservation.ref, now, everything=True)
        audit(AuditAction.DECLINED, actor=user, team=reservation.team, target=reservation.ref, name=reservation.name,
              reason=reason)
        reservation.refresh_from_db()
        events.reservation_moved.send(sender=Reservation, reservation=reservation, move=events.DECLINED, at=now)
    return reservation


# -- reads -----------------------------------------------------------------------------------------------


def visible_reservations(user, team: str | None = None, state: str | None = None) -> QuerySet:
    """Reservations of the user's teams (platform staff: every team's), soonest first."""
    rows = Reservation.objects.select_related("team", "flavor", "cluster", "created_by", "decided_by")
    if not user.is_staff:
        rows = visible_to(rows, user)
    if team:
        if not user.is_staff:
            require_team(user, team)  # another team's is a 404, not an empty list
        rows = rows.filter(team__slug=team)
    if state:
        rows = rows.filter(state=state)
    return rows.order_by("start", "id")


def get_reservation(user, pk) -> Reservation:
    """One reservation the user may read (404 otherwise, as for any other team's object)."""
    return get_for_user(Reservation.objects.select_related("team", "flavor", "cluster"), user, staff_reads=True, pk=pk)


def availability(flavor: GpuFlavor, cluster: Cluster | None, start: datetime, end: datetime) -> list[dict]:
    """Free reservable units per slot of ``[start, end)``, per cluster (one cluster, or each that offers the
    flavor): what a booking of the slot could take now."""
    rows = []
    policy = policy_for_share(flavor)
    for each in ([cluster] if cluster else [c for c in fleet.clusters() if capacity(c, flavor) > 0]):
        limit = occupancy.reservable(capacity(each, flavor), policy.reservable_share)
        held = _held(each, flavor, start, end)
        rows.extend({"start": s, "end": e, "cluster": each.name, "free_units": free}
                    for s, e, free in occupancy.free_slots(held, limit, start, end))
    return rows


def policy_for_share(flavor: GpuFlavor) -> rules.Policy:
    """The flavor's policy without a team's overrides: what its reservable share is."""
    row = FlavorPolicy.objects.filter(flavor=flavor).first()
    return row.to_policy() if row else rules.DEFAULT


def slot_floor(moment: datetime) -> datetime:
    """The start of the availability slot ``moment`` falls in (slots start on the half hour, UTC)."""
    moment = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return moment.replace(minute=moment.minute - moment.minute % 30)


def windows_of(reservation: Reservation) -> list:
    """The windows the reservation holds (those a cancel left: the ones that had passed)."""
    return list(reserved.of_ref(reservation.ref))


# -- the calendar page -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One half hour of the calendar page: what is free to book, and what the team holds then."""

    start: datetime
    label: str  # its wall-clock half hour in the page's zone: "Mon 30 Nov 09:00–09:30"
    free: int
    reservable: int
    mine: tuple[str, ...]  # the team's bookings that hold it, by name ("(targeted)" after a targeted one's)
    others: int  # units other teams hold

    @property
    def title(self) -> str:
        """What the cell says on hover (and to a screen reader)."""
        words = [f"{self.label}: {self.free} of {self.reservable} free"]
        if self.mine:
            words.append(f"yours: {', '.join(self.mine)}")
        if self.others:
            words.append(f"reserved by others: {self.others}")
        return "; ".join(words)

    @property
    def level(self) -> int:
        """0 (nothing free) to 4 (all of the share free): the heatmap's shade."""
        return 0 if not self.reservable else min(4, -(-4 * self.free // self.reservable))


def calendar_days(team: Team, flavor: GpuFlavor, cluster: Cluster, zone: ZoneInfo, now: datetime,
                  days: int = 14) -> list[tuple[str, list[Cell]]]:
    """The next ``days`` local days in ``zone`` from today, each as its 48 half hours (wall-clock), with the free
    reservable units of ``cluster`` and who holds what: the team's bookings by name, others' only as units."""
    limit = occupancy.reservable(capacity(cluster, flavor), policy_for_share(flavor).reservable_share)
    today = calendar.local(now, zone).date()
    first = calendar.instant(datetime.combine(today, datetime.min.time()), zone)
    last = calendar.instant(datetime.combine(today + timedelta(days=days), datetime.min.time()), zone)
    windows = list(reserved.overlapping(cluster.pk, flavor.pk, first - SLOT, last + SLOT))
    names = {pk: f"{name} (targeted)" if matching == Matching.TARGETED else name
             for pk, name, matching in Reservation.objects.filter(team=team, cluster=cluster, flavor=flavor)
             .values_list("pk", "name", "matching")}
    held = [occupancy.Held(w.start, w.end, w.units) for w in windows]
    rows = []
    for offset in range(days):
        day = datetime.combine(today + timedelta(days=offset), datetime.min.time())
        cells = []
        for half in range(48):
            start = calendar.instant(day + half * SLOT, zone)
            end = start + SLOT
            here = [w for w in windows if w.start < end and start < w.end]
            mine = tuple(sorted({names.get(reserved.id_of(w.ref), "") for w in here if w.team_id == team.pk} - {""}))
            others = sum(w.units for w in here if w.team_id != team.pk)
            free = max(0, limit - occupancy.peak(held, start, end)[0])
            wall = day + half * SLOT
            label = f"{wall:%a %-d %b %H:%M}–{wall + SLOT:%H:%M}"
            cells.append(Cell(start, label, free, limit, mine, others))
        rows.append((f"{day:%a %-d %b}", cells))
    return rows


def windows_starting(since: datetime, until: datetime) -> list[tuple[Reservation, object]]:
    """``(reservation, window)`` for each window of a booked reservation that starts in ``(since, until]``:
    what the notices before and at a window's start are about."""
    return _booked(list(reserved.starting(reserved.REF_PREFIX, since, until)))


def windows_under_way(since: datetime, until: datetime) -> list[tuple[Reservation, object]]:
    """``(reservation, window)`` for each window of a booked reservation that started in ``(since, until]`` and runs on."""
    return _booked(list(reserved.started_before(reserved.REF_PREFIX, since, until)))


def windows_ended(since: datetime, until: datetime) -> list[tuple[Reservation, object]]:
    """``(reservation, window)`` for each window of a reservation that ended in ``(since, until]``, billed to its end
    (a cancelled one's window under way ends at the cancel)."""
    return _booked(list(reserved.ending(reserved.REF_PREFIX, since, until)), (ReservationState.BOOKED, ReservationState.CANCELLED))


def _booked(windows: list, states: tuple[str, ...] = (ReservationState.BOOKED,)) -> list[tuple[Reservation, object]]:
    found = {r.ref: r for r in Reservation.objects.filter(
        pk__in={reserved.id_of(w.ref) for w in windows}, state__in=states).select_related("team", "flavor", "cluster")}
    return [(found[w.ref], w) for w in windows if w.ref in found]


def ref_labels(refs: list[str]) -> dict[str, RefLabel]:
    """``ref -> RefLabel`` of the reservations among ledger ``refs`` (one query): what the cost reports call the
    rows of a window's idle units ("reservation release-eval (#12) of team nlp")."""
    pks = [pk for pk in map(reserved.id_of, refs) if pk is not None]
    if not pks:
        return {}
    url = reverse("reservations:calendar")
    return {r.ref: RefLabel(r.name, url, "reservation", r.pk, r.team.slug)
            for r in Reservation.objects.filter(pk__in=pks).select_related("team").only("pk", "name", "team__slug")}


@dataclass(frozen=True)
class WindowUse:
    """A reservation's windows in a month as billed so far (docs/reservations.md "Money"): the unit-hours its
    team's work ran on, lent to other teams (credited: the borrowers pay), and left idle (charged to the team)."""

    reservation: Reservation
    windows: int
    used: Decimal
    lent: Decimal
    idle: Decimal

    @property
    def unit_hours(self) -> Decimal:
        return self.used + self.lent + self.idle

    @property
    def charge(self) -> Decimal:
        """The window's units × hours × its price: what its units cost, whoever ran on them."""
        return self.unit_hours * self.reservation.price_per_unit_hour

    @property
    def credit(self) -> Decimal:
        return self.lent * self.reservation.price_per_unit_hour

    @property
    def idle_cost(self) -> Decimal:
        return self.idle * self.reservation.price_per_unit_hour

    @property
    def used_percent(self) -> int:
        return round(100 * self.used / self.unit_hours) if self.unit_hours else 0

    @property
    def lent_percent(self) -> int:
        return round(100 * self.lent / self.unit_hours) if self.unit_hours else 0

    @classmethod
    def of_window(cls, reservation: Reservation, window) -> WindowUse:
        """One window's use (its "ended" notice says these figures, as the Usage page's card does a month's)."""
        return cls(reservation, 1, window.used_unit_hours, window.lent_unit_hours, window.idle_unit_hours)


def window_uses(team: Team, since: datetime, until: datetime) -> list[WindowUse]:
    """The team's reservations with windows started in ``[since, until)`` and billed (one query each for the windows
    and their reservations), soonest first: the Usage page's card."""
    windows = list(reserved.of_team_between(team.pk, reserved.REF_PREFIX, since, until))
    found = {r.ref: r for r in Reservation.objects.filter(pk__in={reserved.id_of(w.ref) for w in windows}).select_related(
        "flavor", "cluster")}
    uses: dict[str, list] = {}
    for window in windows:
        if window.ref in found:
            uses.setdefault(window.ref, []).append(window)
    return [WindowUse(found[ref], len(mine), sum((w.used_unit_hours for w in mine), ZERO),
                      sum((w.lent_unit_hours for w in mine), ZERO), sum((w.idle_unit_hours for w in mine), ZERO))
            for ref, mine in uses.items()]

