"""Reserved windows: units of a flavor on a cluster booked by the calendar, and the money they commit.

A reservation (the ``reservations`` app) books windows; each is a :class:`billing.models.ReservedWindow`
row here, beside the quota holds, because money lives where the units do: a window commits its units at
the price it was booked at, used or not (docs/reservations.md "Money"), and the month's commitments
(:func:`billing.ledger.committed_by_team`), which budgets and admission read, count the part of every
window still ahead in the month. What is held when is what the booking's room is checked against.

Moves: :func:`hold` writes a booking's windows; :func:`release` frees what has not passed — the windows
not started go, one under way ends at the release (its past hours stay, and what a billing cycle billed
already: the ledger only moves forward) — or, for a declined booking, every window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Case, F, Max, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from billing.ledger import committed, interval_cost, month_end, month_spend, month_start
from billing.models import QuotaHold, ReservedWindow, TeamBudget
from core.money import ZERO


def overlapping(cluster_id: int, flavor_id: int, start: datetime, end: datetime) -> QuerySet:
    """The windows held on ``cluster_id`` of ``flavor_id`` that overlap ``[start, end)``."""
    return ReservedWindow.objects.filter(cluster_id=cluster_id, flavor_id=flavor_id, start__lt=end, end__gt=start)


def of_ref(ref: str) -> QuerySet:
    """The windows ``ref`` holds, soonest first."""
    return ReservedWindow.objects.filter(ref=ref).order_by("start")


def of_refs(refs: list[str], since: datetime) -> QuerySet:
    """The windows of ``refs`` not over before ``since``, soonest first."""
    return ReservedWindow.objects.filter(ref__in=refs, end__gt=since).order_by("start", "id")


def starting(prefix: str, since: datetime, until: datetime) -> QuerySet:
    """The windows of refs ``<prefix>:…`` that start in ``(since, until]``, soonest first."""
    return ReservedWindow.objects.filter(ref__startswith=f"{prefix}:", start__gt=since, start__lte=until).order_by("start")


def started_before(prefix: str, since: datetime, until: datetime) -> QuerySet:
    """The windows of refs ``<prefix>:…`` under way that started in ``(since, until]``, soonest first."""
    return ReservedWindow.objects.filter(ref__startswith=f"{prefix}:", start__gt=since, start__lte=until,
                                         end__gt=until).order_by("start")


def ending(prefix: str, since: datetime, until: datetime) -> QuerySet:
    """The windows of refs ``<prefix>:…`` that ended in ``(since, until]`` and are billed to their end."""
    return ReservedWindow.objects.filter(ref__startswith=f"{prefix}:", end__gt=since, end__lte=until,
                                         billed_until=F("end")).order_by("end")


def of_team_between(team_id: int, prefix: str, since: datetime, until: datetime) -> QuerySet:
    """The team's windows of refs ``<prefix>:…`` that started in ``[since, until)`` and were billed, soonest first."""
    return ReservedWindow.objects.filter(team_id=team_id, ref__startswith=f"{prefix}:", start__gte=since,
                                         start__lt=until, billed_until__isnull=False).order_by("start", "id")


def of_team(team_id: int, flavor_id: int, start: datetime, end: datetime) -> QuerySet:
    """The team's windows of ``flavor_id`` (on any cluster) that overlap ``[start, end)``."""
    return ReservedWindow.objects.filter(team_id=team_id, flavor_id=flavor_id, start__lt=end, end__gt=start)


def ref_of(reservation_id: int) -> str:
    """The ref a reservation's windows carry (``reservation:12``): what work that names it is matched by."""
    return f"{REF_PREFIX}:{reservation_id}"


#: The prefix of a reservation's ref (the ``reservations`` app books its windows under it).
REF_PREFIX = "reservation"


def named_ref(reservation_id: int | None) -> str | None:
    """The ref of the booking work names (:attr:`quotas.decide.ResourceRequest.for_reservation`; None: none)."""
    return ref_of(reservation_id) if reservation_id is not None else None


def id_of(ref: str) -> int | None:
    """The reservation id of a window's ref (``reservation:12`` → 12; None: not a reservation's): :func:`ref_of`
    read back."""
    prefix, _, number = ref.partition(":")
    return int(number) if prefix == REF_PREFIX and number.isdigit() else None


@dataclass(frozen=True)
class Room:
    """A window open now, as admission reads it: its units and what of them its own team's work does not hold."""

    window_id: int
    cluster_id: int
    units: int
    free: int
    end: datetime
    ref: str = ""  # its booking's
    targeted: bool = False  # only work that names its booking goes in

    def takes(self, ref: str | None) -> bool:
        """Whether work naming the booking ``ref`` (None: naming none) may go in: work that names this booking
        always; other work only when the booking is open (docs/reservations.md "Open or targeted")."""
        return ref == self.ref if ref is not None else not self.targeted


def rooms(team_ids: list[int], now: datetime, flavor_id: int | None = None,
          placeable: bool = True) -> dict[tuple[int, int], list[Room]]:
    """``{(team id, flavor id): [Room]}`` of the teams' windows open at ``now`` (two queries), most free first.

    ``placeable``: only windows on clusters that take new work now (a draining or lost cluster's reserved
    units can hold nothing new: work for them waits, as for any cluster)."""
    windows = ReservedWindow.objects.filter(team_id__in=team_ids, start__lte=now, end__gt=now, confirmed=True)
    if flavor_id is not None:
        windows = windows.filter(flavor_id=flavor_id)
    found = [w for w in windows.select_related("cluster") if w.cluster.placeable or not placeable]
    if not found:
        return {}
    held = dict(QuotaHold.objects.held().filter(window__in=[w.pk for w in found], lent=False)
                .values("window_id").annotate(total=Sum("units")).order_by().values_list("window_id", "total"))
    result: dict[tuple[int, int], list[Room]] = {}
    for w in found:
        result.setdefault((w.team_id, w.flavor_id), []).append(
            Room(w.pk, w.cluster_id, w.units, max(0, w.units - (held.get(w.pk) or 0)), w.end, w.ref, w.targeted))
    for found_rooms in result.values():
        found_rooms.sort(key=lambda room: (-room.free, room.end, room.window_id))
    return result


@dataclass(frozen=True)
class Ahead:
    """A team's windows of a flavor not over yet, as admission weighs a request against them: the most units one
    of its open bookings' windows holds (what work naming none may wait for), and per booking (by ref) the most
    one of its windows holds (what work naming it waits for)."""

    open: int = 0
    by_ref: dict[str, int] = dataclasses.field(default_factory=dict)

    def most(self, ref: str | None) -> int:
        """The most units a window that work naming ``ref`` (None: none) may go into holds."""
        return self.by_ref.get(ref, 0) if ref is not None else self.open


def largest_ahead(team_ids: list[int], now: datetime) -> dict[tuple[int, int], Ahead]:
    """``{(team id, flavor id): Ahead}`` of the teams' windows not over yet (one query). Work that only such a
    window can ever hold waits for it rather than being refused."""
    rows = (ReservedWindow.objects.filter(team_id__in=team_ids, end__gt=now, confirmed=True)
            .values("team_id", "flavor_id", "ref", "targeted").annotate(most=Max("units")).order_by())
    found: dict[tuple[int, int], Ahead] = {}
    for row in rows:
        key = (row["team_id"], row["flavor_id"])
        ahead = found.setdefault(key, Ahead())
        ahead.by_ref[row["ref"]] = max(ahead.by_ref.get(row["ref"], 0), row["most"])
        if not row["targeted"]:
            found[key] = dataclasses.replace(ahead, open=max(ahead.open, row["most"]))
    return found


def take(rooms_of: list[Room], units: int, ref: str | None = None) -> Room | None:
    """The room a request of ``units`` naming the booking ``ref`` (None: none) goes into whole (the most free
    first, then the soonest to end; only rooms that take it, :meth:`Room.takes`), and that room with its units
    taken (in ``rooms_of``, which is updated); None when none holds it."""
    for i, room in enumerate(rooms_of):
        if room.takes(ref) and room.free >= units:
            rooms_of[i] = dataclasses.replace(room, free=room.free - units)
            rooms_of.sort(key=lambda r: (-r.free, r.end, r.window_id))
            return room
    return None


@dataclass(frozen=True)
class Withheld:
    """Units of a flavor a cluster keeps for reserved windows from work placed now (:func:`withheld`)."""

    units: int
    window_id: int  # the first of them: the window work placed on those units is lent from
    team_id: int  # its holder
    start: datetime
    end: datetime
    #: Its holder's work admitted into one of them does not run yet: they are about to be used, not lent.
    claimed: bool = False
    #: One of the cluster's windows of the flavor is in its lead: its units are being cleared for its start (the
    #: first one's own lead is told by ``start``; a later one's, while the first is open, only by this).
    clearing: bool = False


def next_holding(team_id: int, flavor_id: int, units: int, now: datetime,
                 ref: str | None = None) -> ReservedWindow | None:
    """The team's next window of the flavor, not started yet, that holds ``units`` and takes work naming the
    booking ``ref`` (None: naming none; :meth:`Room.takes`), or None: when work only a window can hold starts
    (the start estimates)."""
    windows = ReservedWindow.objects.filter(team_id=team_id, flavor_id=flavor_id, units__gte=units, start__gt=now,
                                            confirmed=True)
    windows = windows.filter(ref=ref) if ref is not None else windows.filter(targeted=False)
    return windows.order_by("start").first()


def naming_refusal(team_id: int, flavor_id: int, reservation_id: int, units: int, spot: bool,
                   now: datetime) -> str | None:
    """Why work of ``units`` units of ``flavor_id`` (``spot``: on spot nodes) may not name the reservation
    ``reservation_id`` of team ``team_id`` (docs/reservations.md "Open or targeted"), or None when it may: the one
    rule of every kind's submission, its dry run and its form (one query).

    The reservation must be the team's — another team's is refused in the words of one that does not exist, so
    an id tells nothing of other teams — with a window (booked, or waiting for approval) not over yet, of the
    work's flavor, holding all its units in one window; and the work must not be spot: a window's units are
    on-demand, and work that names one waits for them."""
    if spot:
        return "Spot work cannot be for a reservation: its windows hold on-demand units."
    windows = list(ReservedWindow.objects.filter(ref=ref_of(reservation_id), team_id=team_id)
                   .values_list("flavor_id", "flavor__name", "units", "end"))
    if not windows:
        return f"The team has no reservation #{reservation_id}."
    ahead = [(flavor, name, held) for flavor, name, held, end in windows if end > now]
    if not ahead:
        return f"Reservation #{reservation_id} is over: it has no window ahead."
    of_flavor = [held for flavor, _name, held in ahead if flavor == flavor_id]
    if not of_flavor:
        return f"Reservation #{reservation_id} is for {ahead[0][1]}: choose that flavor to go into its windows."
    if max(of_flavor) < units:
        return (f"Reservation #{reservation_id} holds {max(of_flavor)} units a window; this asks for {units}: "
                "it could never go in.")
    return None


@dataclass(frozen=True)
class Nameable:
    """A team's reservation that work may name (:func:`nameable`), as the New forms list it: from its windows,
    since its name lives in the ``reservations`` app, above the kinds."""

    reservation_id: int
    units: int
    flavor: str
    next_start: datetime  # its next window's (or the one under way's)
    next_end: datetime
    targeted: bool


def nameable(team_id: int, now: datetime) -> list[Nameable]:
    """The team's reservations with a window (booked or waiting for approval) not over yet, by id, each with its
    next window (one query): what the New run, endpoint and workspace forms offer to name."""
    found: dict[int, Nameable] = {}
    for w in (ReservedWindow.objects.filter(team_id=team_id, ref__startswith=f"{REF_PREFIX}:", end__gt=now)
              .select_related("flavor").order_by("start")):
        number = id_of(w.ref)
        if number is not None and number not in found:
            found[number] = Nameable(number, w.units, w.flavor.name, w.start, w.end, w.targeted)
    return sorted(found.values(), key=lambda n: n.reservation_id)


def most_at_once(team_id: int, now: datetime) -> dict[int, int]:
    """``{flavor id: units}``: the most units of each flavor the team's windows not over hold at one instant
    (one query): what its namespace's ResourceQuota must admit on top of its quota (``quotas.tasks.team_spec``)."""
    windows = list(ReservedWindow.objects.filter(team_id=team_id, end__gt=now, confirmed=True)
                   .values_list("flavor_id", "start", "end", "units"))
    most: dict[int, int] = {}
    for flavor_id, start, _end, _units in windows:
        instant = max(start, now)
        held = sum(units for f, s, e, units in windows if f == flavor_id and s <= instant < e)
        most[flavor_id] = max(most.get(flavor_id, 0), held)
    return most


def flavors_reserved(now: datetime) -> set[int]:
    """The ids of the flavors some window not over yet holds (one query)."""
    return set(ReservedWindow.objects.filter(end__gt=now, confirmed=True).values_list("flavor_id", flat=True).distinct())


def lead() -> timedelta:
    """A window's lead (``SLIPWAY_RESERVATION_LEAD_MINUTES``): its units are cleared this long before it starts."""
    return timedelta(minutes=settings.SLIPWAY_RESERVATION_LEAD_MINUTES)


def horizon(now: datetime, limit_minutes: int | None) -> datetime | None:
    """Until when windows stand in the way of work placed now with a runtime limit of ``limit_minutes``: its limit
    plus the lead (None: work without a limit, which any window not over stands in the way of). Work that ends
    before a window's lead is placed on its units as on any free ones."""
    return now + timedelta(minutes=limit_minutes) + lead() if limit_minutes else None


def lendable(kept: Withheld, now: datetime, may_borrow: bool) -> bool:
    """Whether work placed now may go on ``kept``'s units as lent work (preemptible, taken back when the window
    needs them): work that may be preempted at all (``may_borrow``: not an endpoint's guaranteed minimum), and
    not in the window's lead, when its units are being cleared for its start, nor while its holder's work
    admitted into it waits to start there."""
    return may_borrow and not kept.claimed and not kept.clearing and not in_lead(kept.start, now)


def in_lead(start: datetime, now: datetime) -> bool:
    """Whether a window starting at ``start`` is in its lead at ``now``: its units are being cleared for its start."""
    return start - lead() <= now < start


def kept_units(units: int, running: int, waiting: int) -> int:
    """What a window of ``units`` keeps from other work: its units less the work running on it, but never less
    than its holder's admitted work that waits to start (``waiting``)."""
    return min(units, max(units - running, waiting))


def withheld(flavor_id: int, now: datetime, until: datetime | None) -> dict[int, Withheld]:
    """``{cluster id: Withheld}``: per cluster, the units of ``flavor_id`` its reserved windows keep from work
    placed now that may run until ``until`` (None: with no end) — the most that windows overlapping
    ``[now, until)`` hold at once, each less the units of the work running on it (its holder's, and other
    teams' lent its idle units), which the nodes count as in use already. Three queries."""
    windows = ReservedWindow.objects.filter(flavor_id=flavor_id, end__gt=now, confirmed=True).order_by("start", "id")
    if until is not None:
        windows = windows.filter(start__lt=until)
    windows = list(windows)
    if not windows:
        return {}
    attached = QuotaHold.objects.held().filter(window__in=[w.pk for w in windows])
    running = dict(attached.filter(open_units__gt=0).values("window_id").annotate(total=Sum("open_units"))
                   .order_by().values_list("window_id", "total"))
    # The units of its holder's work admitted into a window and not started: kept whatever else runs "on" it (lent
    # work is attached to the first window counted, whatever units it sits on, so it can outnumber the window's).
    claimed = dict(attached.filter(lent=False, open_units=0).values("window_id").annotate(total=Sum("units"))
                   .order_by().values_list("window_id", "total"))
    found: dict[int, Withheld] = {}
    for cluster_id in {w.cluster_id for w in windows}:
        mine = [w for w in windows if w.cluster_id == cluster_id]
        most = 0
        for instant in sorted({max(w.start, now) for w in mine}):
            most = max(most, sum(kept_units(w.units, running.get(w.pk) or 0, claimed.get(w.pk) or 0)
                                 for w in mine if w.start <= instant < w.end))
        if most or any(w.start <= now for w in mine):
            # Kept even at 0 while one is open: work that waits there may start on its units once idle (lent).
            first = mine[0]
            found[cluster_id] = Withheld(most, first.pk, first.team_id, first.start, first.end,
                                         claimed=any(w.pk in claimed for w in mine),
                                         clearing=any(in_lead(w.start, now) for w in mine))
    return found


def hold(ref: str, team, flavor, cluster, units: int, spans: Iterable[tuple[datetime, datetime]],
         price_per_unit_hour: Decimal, confirmed: bool = True, targeted: bool = False) -> list[ReservedWindow]:
    return ReservedWindow.objects.bulk_create(
        ReservedWindow(ref=ref, team=team, flavor=flavor, cluster=cluster, units=units, start=start, end=end,
                       price_per_unit_hour=price_per_unit_hour, confirmed=confirmed, targeted=targeted)
        for start, end in spans)


def confirm(ref: str, now: datetime) -> int:
    """``ref``'s windows not over act from ``now`` on (its booking was approved then); returns how many.

    A window under way is billed from ``now``, not from its start: it admitted nothing, kept nothing and billed
    nothing while it waited for staff, so the hours before the approval are not the team's to pay. The same update
    confirms it and marks it billed until ``now``, so no billing cycle ever reads it confirmed but unmarked. A window
    that passed while it waited stays unconfirmed: it never acted, and is never billed (the cycle bills confirmed
    windows only)."""
    return ReservedWindow.objects.filter(ref=ref, confirmed=False, end__gt=now).update(
        confirmed=True, billed_until=Case(When(start__lt=now, then=Value(now)), default=F("billed_until")))


def release(ref: str, now: datetime, everything: bool = False) -> None:
    """Free ``ref``'s windows from ``now`` on (every window with ``everything``).

    What a billing cycle has billed already stays billed (the ledger only moves forward): a window ends at ``now`` or
    at its ``billed_until``, whichever is later, and one billed at all is ended, not deleted — a cycle whose clock ran
    a moment ahead of the cancel's may have billed it first. So a window is never left billed past its end, which is
    what its "ended" notice waits for (:func:`ending`)."""
    mine = ReservedWindow.objects.filter(ref=ref)
    if everything:
        mine.delete()
        return
    mine.filter(start__gte=now, billed_until__isnull=True).delete()
    mine.filter(end__gt=now).update(end=Greatest(Value(now), Coalesce(F("billed_until"), Value(now))))


def window_cost(price: Decimal, units: int, start: datetime, end: datetime) -> Decimal:
    return interval_cost(price, units, start, end)


def cost_by_month(price: Decimal, units: int, spans: Iterable[tuple[datetime, datetime]]) -> dict[datetime, Decimal]:
    """What windows of ``units`` at ``price`` cost per month (the portal's months), a window across a month's
    end split there."""
    months: dict[datetime, Decimal] = {}
    for start, end in spans:
        cursor = start
        while cursor < end:
            first, until = month_start(cursor), min(end, month_end(cursor))
            months[first] = months.get(first, ZERO) + interval_cost(price, units, cursor, until)
            cursor = until
    return months


@dataclass(frozen=True)
class Left:
    amount: Decimal
    currency: str


def budget_left(team, month: datetime, now: datetime) -> Left | None:
    """What ``team``'s budget leaves in ``month`` (its first instant) for more reserved money: this month, the
    budget less spent and committed money (reserved windows included); a later month, that month's budget less
    the windows reserved in it. None: no budget."""
    budget = TeamBudget.objects.filter(team=team).first()
    if budget is None:
        return None
    if month <= month_start(now):
        spent = month_spend([team.pk], now)[team.pk].spent
        return Left(budget.monthly_limit - spent - committed(team.pk, now), budget.currency)
    reserved_in = sum((interval_cost(w.price_per_unit_hour, w.units, max(w.start, month), min(w.end, month_end(month)))
                       for w in ReservedWindow.objects.filter(team=team, start__lt=month_end(month), end__gt=month)),
                      ZERO)
    return Left(budget.monthly_limit - reserved_in, budget.currency)
