"""The portal's reservations pages: the calendar (the next 14 days of a flavor on a cluster as a heatmap, the
team's bookings named, others' shown as reserved), the booking form with its price preview, cancelling, and
the iCalendar feed, answered to its secret URL alone."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

import fleet.services as fleet
from core.zones import zone_or_portals
from fleet.models import GpuFlavor
from reservations import feed as feeds
from reservations import services
from reservations.forms import BookingForm
from reservations.models import HOLDING
from teams.models import Role
from teams.permissions import require_team
from workloads.views import no_team_context


def _team(request):
    current = request.membership
    if getattr(current, "pk", None) is None:
        return None
    return require_team(request.user, current.team).team


def _shown(request, team):
    """The flavor and cluster the page shows (``?flavor=&cluster=``, else the first that offer reservable units)."""
    flavors = list(GpuFlavor.objects.usable().order_by("name"))
    clusters = fleet.clusters()
    offered = [(f, c) for f in flavors for c in clusters if services.capacity(c, f) > 0]
    flavor = next((f for f in flavors if f.name == request.GET.get("flavor")), offered[0][0] if offered else None)
    cluster = next((c for c in clusters if c.name == request.GET.get("cluster")),
                   next((c for f, c in offered if f == flavor), clusters[0] if clusters else None))
    return flavors, clusters, flavor, cluster


def _page(request, team, form, status=200):
    flavors, clusters, flavor, cluster = _shown(request, team)
    zone = zone_or_portals(team.time_zone)
    days = services.calendar_days(team, flavor, cluster, zone, timezone.now()) if flavor and cluster else []
    bookings = services.visible_reservations(request.user, team.slug).filter(state__in=HOLDING)
    return render(request, "reservations/calendar.html", {
        "team": team, "form": form, "flavors": flavors, "clusters": clusters, "flavor": flavor, "cluster": cluster,
        "zone": zone.key, "days": days, "hours": [f"{h:02d}" for h in range(24)], "bookings": bookings,
        "may_book": request.membership.allows(Role.MEMBER)}, status=status)


@require_GET
@login_required
def calendar(request):
    team = _team(request)
    if team is None:
        return render(request, "workloads/no_team.html", no_team_context(request.user))
    initial = {"time_zone": zone_or_portals(team.time_zone).key, "cluster": request.GET.get("cluster", "any"),
               "flavor": request.GET.get("flavor")}
    return _page(request, team, BookingForm(team=team, initial=initial))


def _posted_form(request) -> BookingForm:
    """The booking form as posted, for the current team, whose members may book (viewers 403; no team 404)."""
    team = _team(request)
    if team is None:
        raise Http404("No team.")
    require_team(request.user, team, Role.MEMBER)
    return BookingForm(request.POST, team=team)


@require_POST
@login_required
def book(request):
    form = _posted_form(request)
    team = form.team
    if form.is_valid():
        try:
            reservation = services.book(request.user, form.booking())
        except services.BookingRefused as refused:
            form.refused(refused.errors)
        else:
            messages.success(request, f"Booked {reservation.name} on {reservation.cluster.name}"
                             f"{' — waiting for approval' if reservation.state == 'pending' else ''}.")
            return redirect(f"{reverse('reservations:calendar')}?flavor={reservation.flavor.name}"
                            f"&cluster={reservation.cluster.name}")
    return _page(request, team, form, status=400)


@require_POST
@login_required
def preview(request):
    """The form's price preview (htmx): what booking it would give now, or why not."""
    form = _posted_form(request)
    quote, refusals = None, []
    if form.is_valid():
        try:
            quote = services.quote(request.user, form.booking())
        except services.BookingRefused as refused:
            refusals = [message for messages_ in refused.errors.values() for message in messages_]
    else:
        refusals = [f"{name}: {error}" for name, errors in form.errors.items() for error in errors]
    return render(request, "reservations/_preview.html", {"quote": quote, "refusals": refusals,
                                                          "units": form.cleaned_data.get("units")})


@require_POST
@login_required
def cancel(request, pk: int):
    reservation = services.get_reservation(request.user, pk)
    try:
        services.cancel(request.user, reservation)
    except services.ReservationConflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelled {reservation.name}.")
    return redirect("reservations:calendar")


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
