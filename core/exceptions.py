"""One exception handler gives the API its error shape (docs/api.md "Auth and errors").

* 400 ``{"errors": {"<field>": ["message", ...]}}``, non-field errors (and unparsable
  bodies) under ``non_field_errors``;
* 401/403/404/405/409 ``{"errors": {"detail": ["message"]}}``.

Django's ``Http404``/``PermissionDenied`` (raised by ``teams.permissions``) arrive here via
DRF's default handler, so the API and the HTML views share one set of access helpers.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object is in a state that does not allow this."
    default_code = "conflict"


def _as_list(value) -> list[str]:
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value:
            out.extend(_as_list(item) if isinstance(item, (list, tuple)) else [str(item)])
        return out
    return [str(value)]


def _normalise(detail) -> dict:
    if isinstance(detail, dict):
        return {str(k): (_normalise(v) if isinstance(v, dict) else _as_list(v)) for k, v in detail.items()}
    return {"non_field_errors": _as_list(detail)}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        exc = ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages})
    response = exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django log it and answer 500
    if isinstance(exc, ValidationError):
        response.data = {"errors": _normalise(exc.detail)}
    elif response.status_code == status.HTTP_400_BAD_REQUEST:
        # Other 400s (a malformed JSON body: ParseError) concern no field: clients read
        # every 400 the same way, so they go under non_field_errors too.
        detail = response.data.get("detail", response.data) if isinstance(response.data, dict) else response.data
        response.data = {"errors": {"non_field_errors": _as_list(detail)}}
    else:
        detail = response.data.get("detail", response.data) if isinstance(response.data, dict) else response.data
        errors = _normalise(detail) if isinstance(detail, dict) else {"detail": _as_list(detail)}
        response.data = {"errors": errors}
    return response


def conflict_response(message: str) -> Response:
    return Response({"errors": {"detail": [message]}}, status=status.HTTP_409_CONFLICT)
