"""The portal's Content-Security-Policy: its own static files only, no CDN, no inline script.

htmx is served from ``static/vendor`` and runs with ``allowEval`` off (see base.html's
``htmx-config``), so scripts need no ``unsafe-eval`` or ``unsafe-inline``. Inline *style
attributes* stay allowed (``style-src-attr``): quota bars set their width with one; style
elements must come from our own files. The API docs are served as a split Swagger UI (its
init script is a file too), so the same policy covers them.
"""

from __future__ import annotations

from collections.abc import Callable

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


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", POLICY)
        return response
