"""Sign-in throttling: one throttle for every door that takes a password.

**Where it is enforced.** :class:`ThrottledModelBackend` is the project's only authentication
backend, so every ``authenticate()`` call — the portal's login page, the admin console's,
and any future door — is refused while its (username, address) pair or its address is
locked. The login forms (:class:`SignInForm`, :class:`AdminSignInForm`) ask the same
throttle first only to say *why* (and the views answer 429).

**What is counted.**

- Per (username, client address): the n-th failure, from n = ``MAX_FAILURES`` on, locks
  the pair for ``BASE_DELAY * 2**(n - MAX_FAILURES)``, at most ``MAX_DELAY``. The count is
  forgotten ``PAIR_MEMORY`` after the last failure, and at once when the right password is
  given. Keyed by the pair, a stranger elsewhere cannot lock a colleague out; the
  colleague's own address keeps working.
- Per client address (any usernames): ``ADDRESS_MAX_FAILURES`` failures without a
  ``ADDRESS_WINDOW`` pause lock the address for ``ADDRESS_WINDOW`` (password spraying).

The address is :func:`teams.services.client_ip`, which honours X-Forwarded-For only as
``SLIPWAY_TRUSTED_PROXIES`` says; misconfigured behind a proxy, every client shares the
proxy's address and the per-address limit locks them all together (docs/security.md).

**When the cache is down.** Counters live in the cache (Redis in production). If it cannot
be reached, sign-in must not go down with it: the throttle logs a warning and degrades to
counting from the audit log (``AuditEvent`` rows ``login_failed``/``login``, which every
``authenticate()`` failure and every sign-in writes through :mod:`teams.signals`), so it
still refuses while the database is up.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from datetime import datetime, timedelta

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db.models import Count, Max
from django.utils import timezone

from teams import services, sso
from teams.models import AuditEvent

logger = logging.getLogger(__name__)

#: Failures per (username, address) that lock it: the MAX_FAILURES-th locks for BASE_DELAY.
MAX_FAILURES = 5
#: ... and each further failure doubles the lock, up to MAX_DELAY.
BASE_DELAY = timedelta(minutes=1)
MAX_DELAY = timedelta(hours=1)
#: How long a pair's failures are remembered after the last one.
PAIR_MEMORY = timedelta(hours=24)
#: Failures from one address, over any usernames, before it is locked for ADDRESS_WINDOW.
ADDRESS_MAX_FAILURES = 30
ADDRESS_WINDOW = timedelta(minutes=15)

_PREFIX = "slipway:signin"


def delay_after(failures: int) -> timedelta:
    """How long a pair is locked after its ``failures``-th failure (zero before the backoff)."""
    if failures < MAX_FAILURES:
        return timedelta(0)
    return min(BASE_DELAY * 2 ** min(failures - MAX_FAILURES, 32), MAX_DELAY)


def _normal(username: str) -> str:
    return str(username or "").strip().lower()[:150]


def _pair_key(username: str, ip: str | None) -> str:
    digest = hashlib.sha256(f"{_normal(username)}\0{ip or '-'}".encode()).hexdigest()[:32]
    return f"{_PREFIX}:pair:{digest}"


def _address_key(ip: str) -> str:
    return f"{_PREFIX}:addr:{ip}"


def _count(key: str, timeout: timedelta) -> int:
    """Add one failure to ``key`` (kept ``timeout`` after the last one); the new count."""
    seconds = int(timeout.total_seconds())
    if cache.add(key, 1, timeout=seconds):
        return 1
    try:
        failures = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=seconds)
        return 1
    cache.touch(key, timeout=seconds)
    return failures


def _lock(key: str, length: timedelta) -> None:
    # The value is the moment the lock ends, so the refusal can say how long to wait.
    cache.set(f"{key}:lock", time.time() + length.total_seconds(), timeout=math.ceil(length.total_seconds()))


def wait_seconds(username: str, ip: str | None) -> int:
    """Seconds until ``username`` may try again from ``ip``; 0 when not locked."""
    keys = [f"{_pair_key(username, ip)}:lock", *([f"{_address_key(ip)}:lock"] if ip else [])]
    try:
        ends = cache.get_many(keys).values()
    except Exception:  # any cache failure: degrade, never refuse everyone
        logger.warning("Sign-in throttle: cache unreachable, counting failures from the audit log", exc_info=True)
        return _wait_from_audit_log(username, ip)
    return max([math.ceil(end - time.time()) for end in ends] + [0])


def note_failure(username: str, ip: str | None) -> None:
    """Count a wrong password for ``username`` from ``ip``; lock the pair or address if due."""
    try:
        pair = _pair_key(username, ip)
        length = delay_after(_count(pair, PAIR_MEMORY))
        if length:
            _lock(pair, length)
        if ip and _count(_address_key(ip), ADDRESS_WINDOW) >= ADDRESS_MAX_FAILURES:
            _lock(_address_key(ip), ADDRESS_WINDOW)
    except Exception:  # the audit log has the failure; wait_seconds reads it then
        logger.warning("Sign-in throttle: cache unreachable, failure not counted there")


def clear(username: str, ip: str | None) -> None:
    """The right password was given: forget the pair's failures (not the address's)."""
    pair = _pair_key(username, ip)
    try:
        cache.delete_many([pair, f"{pair}:lock"])
    except Exception:
        logger.warning("Sign-in throttle: cache unreachable, count not cleared")


def _wait_from_audit_log(username: str, ip: str | None) -> int:
    """:func:`wait_seconds` from the audit log, when the cache cannot be reached.

    The same rules over the ``login_failed`` rows (written for every failed
    ``authenticate()``): the pair's failures since its last sign-in, and the address's
    failures in the last ``ADDRESS_WINDOW`` (a sliding window here).
    """
    now = timezone.now()
    failed = AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN_FAILED, ip_address=ip)
    name = _normal(username)
    since = now - PAIR_MEMORY
    last_login = (AuditEvent.objects.filter(action=AuditEvent.Action.LOGIN, actor_name__iexact=name, ip_address=ip,
                                            created_at__gte=since)
                  .aggregate(last=Max("created_at"))["last"])
    pair = (failed.filter(actor_name__iexact=name, created_at__gt=max(since, last_login or since))
            .aggregate(failures=Count("id"), last=Max("created_at")))
    ends: list[datetime] = []
    if pair["failures"] >= MAX_FAILURES:
        ends.append(pair["last"] + delay_after(pair["failures"]))
    if ip:
        # The address is locked until its ADDRESS_MAX_FAILURES-th latest failure leaves the window.
        oldest_counted = (failed.filter(created_at__gte=now - ADDRESS_WINDOW).order_by("-created_at")
                          .values_list("created_at", flat=True)[ADDRESS_MAX_FAILURES - 1:ADDRESS_MAX_FAILURES])
        ends.extend(moment + ADDRESS_WINDOW for moment in oldest_counted)
    return max([math.ceil((end - now).total_seconds()) for end in ends] + [0])


class ThrottledModelBackend(ModelBackend):
    """Django's username/password backend behind the sign-in throttle (settings.AUTHENTICATION_BACKENDS).

    Every door that calls ``authenticate()`` passes here: while locked, even the right
    password is refused (``PermissionDenied`` stops ``authenticate()``, which then reports a
    failed sign-in); otherwise a wrong password is counted and a right one clears the count.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        ip = services.client_ip(request) if request is not None else None
        name = _normal(username)
        if wait_seconds(name, ip):
            raise PermissionDenied("Too many failed sign-ins.")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            note_failure(name, ip)
        else:
            clear(name, ip)
        return user


class ThrottleMessageMixin:
    """Refuse a locked sign-in with a message that says so, before asking for the password.

    The backend refuses it anyway; this only tells the person how long to wait, and lets
    the view answer 429 (:func:`refused`).
    """

    def clean(self):
        username = self.cleaned_data.get("username")
        if username:
            wait = wait_seconds(username, services.client_ip(self.request) if self.request is not None else None)
            if wait:
                minutes = math.ceil(wait / 60)
                raise ValidationError(
                    "Too many failed sign-ins; try again in %(minutes)d minute%(plural)s.",
                    code="throttled", params={"minutes": minutes, "plural": "" if minutes == 1 else "s"},
                )
        return super().clean()


class SignInForm(ThrottleMessageMixin, AuthenticationForm):
    """The portal's login form: with ``SLIPWAY_LOCAL_LOGIN=staff`` only platform staff pass it (break-glass)."""

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if not sso.password_sign_in_allowed(user):
            raise ValidationError("Password sign-in is kept for platform staff: use the single sign-on button above.",
                                  code="password_sign_in_off")


class AdminSignInForm(ThrottleMessageMixin, AdminAuthenticationForm):
    """The admin console's login form (staff only, as Django's)."""


def refused(form) -> bool:
    """Whether ``form`` was refused by the throttle (the view answers 429)."""
    return form.has_error(NON_FIELD_ERRORS, "throttled")
