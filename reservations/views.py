"""The portal's reservations views: the iCalendar feed, answered to its secret URL alone."""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from reservations import feed as feeds


@require_GET
def feed(request, token: str) -> HttpResponse:
    """The team's reservations as ``text/calendar``; an unknown or replaced token is a 404."""
    team = feeds.team_of(token)
    if team is None:
        raise Http404("No such feed.")
    response = HttpResponse(feeds.calendar_of(team, timezone.now()), content_type="text/calendar; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="{team.slug}-reservations.ics"'
    response["Cache-Control"] = "private, max-age=300"
    return response
