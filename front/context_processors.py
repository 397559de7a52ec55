"""Template context shared by every page: the current team, the user's teams, the navigation."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

#: Main navigation as (label, URL name). Apps built later (runs, usage) appear as soon as
#: their URL name resolves, so the base template never links to a page that is not there.
NAV_ITEMS: tuple[tuple[str, str], ...] = (
    ("Dashboard", "dashboard"),
    ("Runs", "jobs:run-list"),
    ("Endpoints", "inference:endpoint-list"),
    ("Usage", "usage"),
    ("Team", "team"),
    ("API tokens", "api-tokens"),
)


def _nav(request: HttpRequest) -> list[dict]:
    current = getattr(getattr(request, "resolver_match", None), "view_name", None)
    items = []
    for label, name in NAV_ITEMS:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        # A page belongs to its section when it is the section's page or lives under it.
        active = current == name or (url != "/" and request.path.startswith(url))
        items.append({"label": label, "url": url, "active": active})
    return items


def slipway(request: HttpRequest) -> dict:
    membership = getattr(request, "membership", None)
    # SimpleLazyObject wrapping None is truthy; unwrap by attribute access.
    current = membership if membership is not None and getattr(membership, "pk", None) else None
    user = getattr(request, "user", None)
    authenticated = bool(user is not None and user.is_authenticated)
    return {
        "current_membership": current,
        "current_team": current.team if current else None,
        # One query for the switcher instead of one per team.
        "user_memberships": user.memberships.select_related("team").order_by("team__slug") if authenticated else [],
        "nav_items": _nav(request) if authenticated else [],
        "cluster_backend": settings.SLIPWAY_CLUSTER_BACKEND,
        "currency": settings.SLIPWAY_CURRENCY,
    }
