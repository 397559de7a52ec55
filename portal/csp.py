"""The portal's Content-Security-Policy: its own static files only, no CDN, no inline script.

htmx is served from ``static/vendor`` and runs with ``allowEval`` off (see base.html's
``htmx-config``), so scripts need no ``unsafe-eval`` or ``unsafe-inline``. Inline *style
attributes* stay allowed (``style-src-attr``): quota bars set their width with one; style
elements must come from our own files. The API docs are served as a split Swagger UI (its
init script is a file too), so the same policy covers them.

With single sign-on configured, ``form-action`` also names the identity provider's origin: the
login page's "Sign in with …" form posts to Slipway, which redirects to the provider, and
browsers hold the redirects of a form submission to ``form-action`` too (docs/sso.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse

POLICY = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "style-src-attr 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))




@lru_cache(maxsize=4)
def policy(issuer: str) -> str:
    """:data:`POLICY`, with ``issuer``'s origin (scheme, host, port) allowed as a form target when it is set."""
    if not issuer:
        return POLICY
    parts = urlsplit(issuer)
    return POLICY.replace("form-action 'self'", f"form-action 'self' {parts.scheme}://{parts.netloc}")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", policy(settings.SLIPWAY_OIDC_ISSUER))
        return response
