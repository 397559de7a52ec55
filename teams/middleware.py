"""Per-request middleware of the portal: the "current team" of the team switcher, the audit log's
client address, and no caching of signed-in responses.

The chosen team's slug lives in the session; the membership is resolved lazily, so API
requests and pages that never look at it cost no query.
"""

from __future__ import annotations

from django.utils.cache import add_never_cache_headers
from django.utils.functional import SimpleLazyObject

from teams import services
from teams.models import Membership

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


class NoStoreWhenSignedInMiddleware:
    """``Cache-Control: no-store`` (Django's never_cache headers) on every response to a signed-in caller.

    Pages and API answers for a signed-in user or a bearer token carry a team's data: no
    browser history, shared machine or proxy may keep a copy. The user is read after the view
    ran, so DRF's bearer-token authentication (which sets ``request.user``) counts too.
    Anonymous answers (the login page, the public API schema and docs, probes) keep their
    headers; static files are served by WhiteNoise before this middleware is reached.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            add_never_cache_headers(response)
        return response


class AuditAddressMiddleware:
    """Audit events written while serving a request record its client address (portal, API, admin alike)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with services.serving(request):
            return self.get_response(request)
