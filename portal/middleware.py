"""Per-request state: the "current team" of the portal's team switcher, the audit log's client address.

The chosen team's slug lives in the session; the membership is resolved lazily, so API
requests and pages that never look at it cost no query.
"""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from portal import services
from portal.models import Membership

SESSION_KEY = "slipway_team"


def _current_membership(request) -> Membership | None:
    user = request.user
    if not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("team").filter(user=user).order_by("team__slug")
    slug = request.session.get(SESSION_KEY)
    if slug:
        chosen = memberships.filter(team__slug=slug).first()
        if chosen is not None:
            return chosen
    return memberships.first()


class CurrentTeamMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.membership = SimpleLazyObject(lambda: _current_membership(request))
        return self.get_response(request)


class AuditAddressMiddleware:
    """Audit events written while serving a request record its client address (portal, API, admin alike)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with services.serving(request):
            return self.get_response(request)
