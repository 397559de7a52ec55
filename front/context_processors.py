"""Template context shared by every page: the current team, the user's teams, the navigation."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from workloads.registry import NavItem, Pages, kinds, kinds_in_words

#: The main navigation's own items; each workload kind adds its own (``Pages.nav``), and
#: all are shown by their order. An item appears only once its URL name resolves, so the base
#: template never links to a page that is not there.
NAV_ITEMS: tuple[NavItem, ...] = (
    NavItem("Dashboard", "dashboard", 0),
    NavItem("Sweeps", "sweeps:list", 15),
    NavItem("Reservations", "reservations:calendar", 90),
    NavItem("Usage", "usage", 100),
    NavItem("Team", "team", 110),
    NavItem("API tokens", "api-tokens", 120),
)


def nav_items() -> list[NavItem]:
    """The navigation's items in order: the portal's and every registered kind's."""
    navs = (Pages.of(kind).nav for kind in kinds())
    return sorted((*NAV_ITEMS, *(nav for nav in navs if nav is not None)), key=lambda item: item.order)


def _nav(request: HttpRequest) -> list[dict]:
    current = getattr(getattr(request, "resolver_match", None), "view_name", None)
    items = []
    for item in nav_items():
        try:
            url = reverse(item.url_name)
        except NoReverseMatch:
            continue
        # A page belongs to its section when it is the section's page or lives under it.
        active = current == item.url_name or (url != "/" and request.path.startswith(url))
        items.append({"label": item.label, "url": url, "active": active})
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
        # "runs, endpoints and workspaces": shared pages name the kinds from the registry, never by hand.
        "kinds_in_words": kinds_in_words(),
    }
