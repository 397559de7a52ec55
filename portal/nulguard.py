"""Refuse requests that carry NUL characters, before any of it reaches a query.

PostgreSQL text cannot hold NUL: a value with one that reaches a query is a DataError, i.e. a
500. No Slipway input legitimately contains one (names, slugs, images, filters, form fields),
so the request is refused at the door: 404 for a path (nothing can be named so), 400 for a
query string, cookie or form body; in the API's error shape under ``/api/``. JSON bodies are
checked field by field where each kind validates them, so errors name the field.
The API takes no form bodies (a 415 from its parser), so they are not read under ``/api/``:
reading a multipart body here would leave the API's parser an exhausted stream.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

from django.http import HttpResponse, JsonResponse

from portal.errors import is_api

NUL = "\x00"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def nul_problem(request) -> tuple[int, str] | None:
    """``(status, message)`` when the request carries a NUL, else None."""
    if NUL in request.path:
        return 404, "Not found."
    if NUL in unquote_plus(request.META.get("QUERY_STRING", "")):
        return 400, "The query string must not contain NUL characters."
    if any(NUL in name or NUL in value for name, value in request.COOKIES.items()):
        return 400, "Cookies must not contain NUL characters."
    if request.method == "POST" and request.content_type in FORM_TYPES and not is_api(request):
        for name, values in request.POST.lists():
            if NUL in name or any(NUL in value for value in values):
                return 400, "Form fields must not contain NUL characters."
    return None


class NulGuardMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = nul_problem(request)
        if problem is None:
            return self.get_response(request)
        status, message = problem
        if is_api(request):
            key = "detail" if status == 404 else "non_field_errors"
            return JsonResponse({"errors": {key: [message]}}, status=status)
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
