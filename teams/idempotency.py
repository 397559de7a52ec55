"""``Idempotency-Key`` support for API POSTs (docs/api.md "Auth and errors").

The same key from the same user within the TTL (24 h) returns the first response instead
of creating a second object. A placeholder row is inserted *before* the view runs, so two
concurrent requests with one key cannot both create: the unique constraint lets one in and
the other gets 409. Only successful (2xx) responses are kept; after an error the key is
free again, so a client can fix its input and retry with the same key.

A key stands for one request: the record keeps a hash of the path and the parsed body, and
a later POST with the key but another path or body answers 400 (bad input, as docs/api.md
says; it was a 422 until security review 4) instead of handing back the
first request's response as if it were this one's.

The view runs in one transaction with the recording of its response, holding the
placeholder's row lock: a request that dies midway leaves neither its object nor a
recorded response (the retry starts clean), and a retry of a request that is merely slow
waits for it instead of taking its placeholder for abandoned (on PostgreSQL; SQLite
serialises writers anyway).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import status
from rest_framework.response import Response

from core.filters import flag
from teams.models import IdempotencyRecord, Role
from teams.permissions import require_team

HEADER = "Idempotency-Key"
PATH_LENGTH = IdempotencyRecord._meta.get_field("path").max_length
IN_PROGRESS = 0
#: A placeholder older than this belongs to a request that died; it no longer blocks the key.
ABANDONED_AFTER = timedelta(seconds=60)


def is_dry_run(request) -> bool:
    """Whether a POST only previews (``?dry_run=1``, ``true`` or ``yes``): the one rule both the views and the
    idempotency layer use, so ``?dry_run=0`` is a real submission to both; any other value is a 400 on
    ``dry_run`` before anything is read or written (:func:`core.filters.flag`)."""
    return flag(request.query_params, "dry_run")


def _error(message: str, code: int) -> Response:
    return Response({"errors": {HEADER: [message]}}, status=code)


def idempotent(view_method):
    """Decorate a DRF view method handling POST."""

    @functools.wraps(view_method)
    def wrapper(self, request, *args, **kwargs):
        key = request.headers.get(HEADER, "").strip()
        # A dry run creates nothing: there is nothing to make idempotent, and its answer must not
        # be replayed to the real submission that usually follows it with the same key. Read first,
        # key or none: a dry_run that is no yes/no is a 400 before the body is.
        if is_dry_run(request) or not key:
            return view_method(self, request, *args, **kwargs)
        if len(key) > 200:
            return _error("Must be at most 200 characters.", status.HTTP_400_BAD_REQUEST)
        if not (key.isascii() and key.isprintable()):
            return _error("Use printable ASCII characters only.", status.HTTP_400_BAD_REQUEST)
        now = timezone.now()
        ttl = timedelta(hours=settings.SLIPWAY_IDEMPOTENCY_TTL_HOURS)
        records = IdempotencyRecord.objects.filter(user=request.user, key=key)
        # 1. Forget expired responses and abandoned placeholders of this key. A placeholder
        #    whose request still runs is row-locked by it: the DELETE waits for that request,
        #    then finds its response recorded (or the placeholder gone) and leaves it alone.
        records.filter(created_at__lt=now - ttl).delete()
        records.filter(status_code=IN_PROGRESS, created_at__lt=now - ABANDONED_AFTER).delete()
        # 2. Replay, or claim the key.
        existing = records.first()
        if existing is not None:
            return _replay(existing, request)
        try:
            with transaction.atomic():
                record = IdempotencyRecord.objects.create(
                    user=request.user, key=key, path=_path(request), request_hash=_request_hash(request),
                    status_code=IN_PROGRESS, body={},
                )
        except IntegrityError:
            existing = records.first()
            if existing is None:
                return _error("Please retry.", status.HTTP_409_CONFLICT)
            return _replay(existing, request)
        # 3. Run the view and keep its response in one transaction (see the module docstring).
        try:
            with transaction.atomic():
                if not IdempotencyRecord.objects.select_for_update().filter(pk=record.pk).exists():
                    return _error("Please retry.", status.HTTP_409_CONFLICT)  # taken for abandoned meanwhile
                response = view_method(self, request, *args, **kwargs)
                if 200 <= response.status_code < 300:
                    IdempotencyRecord.objects.filter(pk=record.pk).update(
                        status_code=response.status_code, body=response.data)
                    return response
                transaction.set_rollback(True)  # an error response: nothing of it is kept
        except Exception:
            record.delete()
            raise
        record.delete()
        return response

    return wrapper


def _path(request) -> str:
    """The request path as the record keeps it (the column holds 300 characters; longer paths
    are only ever padded ids, such as /runs/000…42/cancel/)."""
    return request.path[:PATH_LENGTH]


def _request_hash(request) -> str:
    """HMAC-SHA-256 of the path and the parsed body, keys sorted: the same request sent again (in any
    key order or spacing) hashes the same; another body or endpoint does not. Keyed with
    ``SECRET_KEY`` because the body may hold ``secret_env`` values: the database alone must not
    allow guessing them. The whole path, not the column's first 300 characters: two padded ids
    (/runs/000…41/ and /runs/000…42/) are two requests."""
    data = request.data
    if hasattr(data, "lists"):  # a form body (QueryDict): every value of every key
        data = dict(data.lists())
    text = json.dumps({"path": request.path, "body": data}, sort_keys=True, default=str)
    return hmac.new(settings.SECRET_KEY.encode(), text.encode(), hashlib.sha256).hexdigest()


def _replay(record: IdempotencyRecord, request) -> Response:
    if record.status_code == IN_PROGRESS:
        return _error("A request with this key is still being processed.", status.HTTP_409_CONFLICT)
    same = record.request_hash == _request_hash(request) if record.request_hash else record.path == _path(request)
    if not same:
        return _error("This key was already used for another request (another endpoint or body): "
                      "send a new key for a new request.", status.HTTP_400_BAD_REQUEST)
    # The caller may have lost access since (removed: 404, demoted to viewer: 403): check again,
    # as the original request did, before handing back what it created.
    team = record.body.get("team") if isinstance(record.body, dict) else None
    if isinstance(team, str):
        require_team(request.user, team, Role.MEMBER)
    response = Response(record.body, status=record.status_code)
    response["Idempotent-Replayed"] = "true"
    return response
