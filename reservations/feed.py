"""A team's reservations as an iCalendar feed (RFC 5545), written by the ``icalendar`` library.

Each window of the team's pending and booked reservations is one event, in UTC (calendar apps show it in
their own zone): its name, the units and where, the purpose, a link to the booking in the API; a pending
booking is ``TENTATIVE``. Windows from 31 days back on, so a calendar keeps the recent past too.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from icalendar import Calendar, Event

from billing import reserved
from reservations.models import HOLDING, CalendarFeed, Reservation, ReservationState
from teams.models import Role, Team, hash_token
from teams.permissions import require_team

#: How far back the feed lists windows.
PAST = timedelta(days=31)


def new_feed(user, team: Team) -> str:
    """A new secret token for ``team``'s feed (members; the previous one stops working): shown once."""
    require_team(user, team, Role.MEMBER)
    raw = secrets.token_urlsafe(32)
    with transaction.atomic():
        CalendarFeed.objects.update_or_create(team=team, defaults={"digest": hash_token(raw), "created_by": user})
    return raw


def team_of(token: str) -> Team | None:
    feed = CalendarFeed.objects.select_related("team").filter(digest=hash_token(token)).first()
    return feed.team if feed else None


def calendar_of(team: Team, now: datetime) -> bytes:
    """The feed's body: every window of ``team``'s holding reservations from :data:`PAST` ago on."""
    calendar = Calendar()
    calendar.add("prodid", "-//Slipway//reservations//EN")
    calendar.add("version", "2.0")
    calendar.add("x-wr-calname", f"{team.name}: GPU reservations")
    reservations = {r.ref: r for r in Reservation.objects.filter(team=team, state__in=HOLDING).select_related(
        "flavor", "cluster")}
    for window in reserved.of_refs(list(reservations), now - PAST):
        r = reservations[window.ref]
        event = Event()
        event.add("uid", f"{r.ref.replace(':', '-')}-{window.start:%Y%m%dT%H%M%SZ}@slipway")
        event.add("dtstamp", now)
        event.add("dtstart", window.start)
        event.add("dtend", window.end)
        event.add("summary", f"{r.name}: {r.units}\u00d7 {r.flavor.name} on {r.cluster.name}")
        event.add("description", "\n".join(filter(None, [
            r.purpose, f"Booked by {r.created_by.username if r.created_by else 'someone'} for {team.name}.",
            f"{settings.SLIPWAY_PORTAL_URL.rstrip('/')}/api/v1/reservations/{r.pk}/"])))
        event.add("status", "TENTATIVE" if r.state == ReservationState.PENDING else "CONFIRMED")
        calendar.add_component(event)
    return calendar.to_ical()
