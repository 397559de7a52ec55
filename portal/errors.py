"""Error pages: styled HTML with navigation in the portal, the API's JSON error shape under ``/api/``.

Django answers an error in one of two ways. With ``DEBUG`` off it calls the ``handler40x`` /
``handler500`` views named in ``portal.urls`` (below); with ``DEBUG`` on it answers 404s and
uncaught exceptions with its technical HTML pages and never calls them. API clients parse
JSON in every mode, so :class:`ApiErrorMiddleware` (outermost) turns any non-JSON error
response under ``/api/`` into the error shape of docs/api.md as well; the handlers answer JSON
under ``/api/`` themselves, so with ``DEBUG`` off the middleware has nothing to do.

``make run`` (the demo) runs with ``DEBUG`` on, and a person trying Slipway there must not meet
Django's technical pages (unstyled under the CSP, listing every URL pattern).
:class:`PortalErrorPagesMiddleware` (innermost) therefore answers with the portal's own 400,
403, 404 and 500 pages in ``DEBUG`` mode too; a developer who wants the tracebacks in the
browser sets ``SLIPWAY_TECHNICAL_ERROR_PAGES=true`` (the traceback of a 500 is logged either way).

The 500 page is rendered without a request context: the failure may be the database or a
context processor, so it uses nothing but the URL configuration and static files.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core import signals
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.urls import NoReverseMatch, reverse
from django.utils.log import log_response

from front.context_processors import nav_items

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"

#: What the API says for each status when there is nothing more specific to say.
API_MESSAGES = {
    400: "Bad request.",
    403: "You do not have permission to perform this action.",
    404: "Not found.",
    405: "Method not allowed.",
    413: "Request too large.",
    500: "Internal error: the failure was logged.",
}

#: Headers of an error response that still mean something once its body is JSON.
KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def api_error(status: int, message: str | None = None) -> JsonResponse:
    """The docs/api.md error shape: 400s under ``non_field_errors``, everything else under ``detail``."""
    key = "non_field_errors" if status in (400, 500) else "detail"
    text = message or API_MESSAGES.get(status) or HttpResponse(status=status).reason_phrase
    return JsonResponse({"errors": {key: [text]}}, status=status)


def static_nav() -> list[dict]:
    """The main navigation from URL names alone (no request, no database): for the 500 page."""
    items = []
    for item in nav_items():
        try:
            items.append({"label": item.label, "url": reverse(item.url_name)})
        except NoReverseMatch:
            continue
    return items


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400. A view's own ``BadRequest`` says what was wrong ("attempt: Must be a whole number …"), and
    the page shows it; Django's ``SuspiciousOperation`` words are for the log, not the visitor."""
    detail = str(exception) if type(exception) is BadRequest else ""
    if is_api(request):
        return api_error(400, detail or None)
    return render(request, "400.html", {"detail": detail}, status=400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return api_error(403)
    return render(request, "403.html", status=403)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form whose CSRF token no longer matches (typically: signed out or in another tab meanwhile)."""
    if is_api(request):
        return api_error(403, f"CSRF check failed: {reason}" if reason else None)
    return render(request, "403.html", {"csrf_failed": True}, status=403)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 for URLs that match no route (or objects a user may not see)."""
    if is_api(request):
        return api_error(404)
    return render(request, "404.html", {"path": request.path}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """500: JSON under ``/api/`` (clients parse it); elsewhere a page that needs no request context."""
    if is_api(request):
        return api_error(500)
    try:
        return HttpResponseServerError(loader.get_template("500.html").render({"nav_items": static_nav()}))
    except Exception:  # the page of last resort must not fail itself (e.g. a broken template loader)
        logger.exception("the 500 page could not be rendered")
        return HttpResponseServerError("Server error: the failure was logged.", content_type="text/plain")


class ApiErrorMiddleware:
    """Under ``/api/``, no error answers HTML: Django's ``DEBUG`` pages become the JSON error shape.

    Outermost in ``MIDDLEWARE``, so it also sees what other middleware answered. The original
    failure is already logged (Django logs it before its technical page is built).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not is_api(request):
            return response
        content_type = response.get("Content-Type", "")
        if "json" in content_type:
            return response
        replaced = api_error(response.status_code)
        for header in KEPT_HEADERS:
            if header in response:
                replaced[header] = response[header]
        return replaced


class ApiBodyLimitMiddleware:
    """Under ``/api/``, a body declared over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413 in the error shape.

    Django would raise ``RequestDataTooBig`` when the view first reads the body and answer 400,
    logging an ERROR with a traceback for every such request (``django.security``): a client
    error would page the operators. The declared length is all Django checks, so refusing it
    here, before anything reads the body, is the same rule — answered as what it is, logged as
    the one-line warning of any 4xx.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and is_api(request):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:  # not a number: the server in front refuses it; no body is read either way
                length = 0
            if length > limit:
                return api_error(413, f"The body is {length} bytes; at most {limit} are accepted.")
        return self.get_response(request)


class PortalErrorPagesMiddleware:
    """With ``DEBUG`` on, the portal's error pages instead of Django's technical ones (see the module docstring).

    Innermost in ``MIDDLEWARE``, so the page is rendered with the user and their team, as with
    ``DEBUG`` off. A view's exception is answered by :meth:`process_exception`; a URL that matches
    no route never reaches a view, so its technical 404 is replaced in :meth:`__call__`. Under
    ``/api/`` it does nothing (:class:`ApiErrorMiddleware` answers JSON there), nor with ``DEBUG``
    off (Django calls the handlers itself), nor with ``SLIPWAY_TECHNICAL_ERROR_PAGES``.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    @staticmethod
    def active(request: HttpRequest) -> bool:
        return settings.DEBUG and not settings.SLIPWAY_TECHNICAL_ERROR_PAGES and not is_api(request)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 404 and getattr(request, "resolver_match", None) is None and self.active(request):
            return not_found(request, Http404())
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not self.active(request):
            return None
        if isinstance(exception, Http404):
            return not_found(request, exception)
        if isinstance(exception, PermissionDenied):
            return permission_denied(request, exception)
        if isinstance(exception, (BadRequest, SuspiciousOperation)):
            return bad_request(request, exception)
        # What Django does before its own 500 answer: tell listeners (error reporters, the test
        # client) and log the traceback, which the page no longer shows.
        signals.got_request_exception.send(sender=None, request=request)
        response = server_error(request)
        log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request,
                     exception=exception)
        return response
