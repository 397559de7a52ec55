"""``slipway login`` in a browser: the OAuth 2.0 Device Authorization Grant (RFC 8628), served by Slipway.

1. The command line asks for a login (:func:`start`, ``POST /api/v1/auth/device/``) and gets a
   **device code** (256 random bits, for itself) and a **user code** (``ABCD-EFGH``, for the person).
2. The person opens the portal's device page signed in — whatever signs them in to the portal —
   checks that it shows the same code, names the token and approves (:func:`approve`) or denies.
3. The command line polls ``POST /api/v1/auth/token/`` with the device code (:func:`redeem`) every
   ``interval`` seconds and, once approved, receives a personal API token made by
   :func:`teams.services.create_api_token`: the same token the API-tokens page makes, listed and
   revoked there.

Both codes are stored as digests only. A login lives ``SLIPWAY_DEVICE_LOGIN_TTL_SECONDS``; its
token is handed out once. Throttles: a poll sooner than the interval is answered ``slow_down`` and
the interval grows by 5 s (per device code); an address may start at most :data:`MAX_PER_ADDRESS`
logins within :data:`ADDRESS_WINDOW`; a person who types :data:`MAX_WRONG_CODES` unknown codes
within :data:`WRONG_CODE_WINDOW` is refused for the rest of it (codes cannot be guessed from the
page). The token handed out always expires: after the days the page set, else
``SLIPWAY_DEVICE_TOKEN_DAYS`` (90); the tokens page lists it as made by ``slipway login``.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.crypto import salted_hmac

from teams.models import ApiToken, AuditEvent, DeviceLogin, hash_token
from teams.services import audit, create_api_token

logger = logging.getLogger(__name__)

#: RFC 8628's grant type, the only one ``auth/token/`` knows.
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code"
#: Consonants that cannot be misread for one another (no vowels: no words), as RFC 8628 §6.1 suggests.
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
USER_CODE_LENGTH = 8
#: What each too-early poll adds to the interval (RFC 8628 §3.5).
SLOW_DOWN_STEP = 5
MAX_PER_ADDRESS = 20
#: The window :data:`MAX_PER_ADDRESS` counts in (a code lives SLIPWAY_DEVICE_LOGIN_TTL_SECONDS, 10 minutes).
ADDRESS_WINDOW = timedelta(minutes=2)
MAX_WRONG_CODES = 10
WRONG_CODE_WINDOW = timedelta(minutes=15)
#: Ended logins are kept this long (to answer ``expired_token`` rather than ``invalid_grant``), then deleted.
KEEP_ENDED = timedelta(days=1)


class DeviceGrantError(Exception):
    """A refusal of ``auth/token/`` or ``auth/device/`` in RFC 8628's words: ``error`` and a description."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


class TooManyWrongCodes(Exception):
    """The person typed too many unknown codes lately (the page answers 429)."""


@dataclass(frozen=True)
class Started:
    login: DeviceLogin
    device_code: str
    user_code: str


def normal_user_code(text: str) -> str:
    """``abcd efgh``, ``ABCD-EFGH`` → ``ABCDEFGH``: what the person typed, without case or separators."""
    return "".join(ch for ch in str(text).upper() if ch.isalnum())[:2 * USER_CODE_LENGTH]


def shown_user_code(code: str) -> str:
    """``ABCDEFGH`` → ``ABCD-EFGH``."""
    half = USER_CODE_LENGTH // 2
    return f"{code[:half]}-{code[half:]}"


def _user_code_hash(code: str) -> str:
    return salted_hmac("slipway.device.user_code", normal_user_code(code), algorithm="sha256").hexdigest()


def token_name_for(client_name: str) -> str:
    """The name a device login's token gets unless the person changes it: ``slipway CLI on <host>``."""
    return f"slipway CLI on {client_name}"[:100] if client_name else "slipway CLI"


def _clean_client_name(raw) -> str:
    name = str(raw or "").strip()
    if len(name) > 64 or any(not ch.isprintable() for ch in name):
        raise DeviceGrantError("invalid_request", "client_name: at most 64 printable characters (the host's name).")
    return name


def start(client_name: str = "", ip: str | None = None) -> Started:
    """A new login for the command line on ``client_name`` (its host), asked from ``ip``."""
    name = _clean_client_name(client_name)
    now = timezone.now()
    DeviceLogin.objects.filter(expires_at__lt=now - KEEP_ENDED).delete()
    # Only the address's recent requests count: a neighbour behind the same NAT can hold an
    # office's sign-ins up for ADDRESS_WINDOW at most, not for a code's whole life (review 4 #8).
    if ip and DeviceLogin.objects.filter(requested_ip=ip, created_at__gt=now - ADDRESS_WINDOW,
                                         state=DeviceLogin.State.PENDING).count() >= MAX_PER_ADDRESS:
        raise DeviceGrantError("slow_down", "Too many sign-ins are waiting from this address; "
                                            "approve or let them expire, then try again.", status=429)
    for _ in range(5):  # a user code taken by a live login: draw another
        device_code = secrets.token_urlsafe(32)
        user_code = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))
        try:
            with transaction.atomic():
                login = DeviceLogin.objects.create(
                    device_code_hash=hash_token(device_code), user_code_hash=_user_code_hash(user_code),
                    client_name=name, requested_ip=ip, created_at=now,
                    expires_at=now + timedelta(seconds=settings.SLIPWAY_DEVICE_LOGIN_TTL_SECONDS),
                    interval=settings.SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS)
        except IntegrityError:
            continue
        return Started(login, device_code, shown_user_code(user_code))
    raise RuntimeError("no free user code after 5 draws")  # 20**8 codes: not in this universe


# -- the portal's page --------------------------------------------------------------------------


def _wrong_code_key(user) -> str:
    return f"slipway:device:wrong:{hashlib.sha256(str(user.pk).encode()).hexdigest()[:16]}"


def _wrong_codes(user) -> int:
    try:
        return int(cache.get(_wrong_code_key(user)) or 0)
    except Exception:  # the cache is down: the codes are still unguessable in 10 minutes
        logger.warning("Device login throttle: cache unreachable")
        return 0


def _count_wrong_code(user) -> None:
    key, seconds = _wrong_code_key(user), int(WRONG_CODE_WINDOW.total_seconds())
    try:
        if not cache.add(key, 1, timeout=seconds):
            cache.incr(key)
    except Exception:
        logger.warning("Device login throttle: cache unreachable, wrong code not counted")


def pending(user, user_code: str) -> DeviceLogin:
    """The live, undecided login of ``user_code``, for ``user`` to decide.

    ``ValidationError`` on ``user_code`` when there is none (each such answer counts towards
    :class:`TooManyWrongCodes`).
    """
    if _wrong_codes(user) >= MAX_WRONG_CODES:
        raise TooManyWrongCodes("Too many unknown codes: wait a quarter of an hour, then run `slipway login` again.")
    code = normal_user_code(user_code)
    login = None
    if len(code) == USER_CODE_LENGTH:
        login = (DeviceLogin.objects.filter(user_code_hash=_user_code_hash(code), state=DeviceLogin.State.PENDING,
                                            expires_at__gt=timezone.now()).first())
    if login is None:
        _count_wrong_code(user)
        raise ValidationError({"user_code": ["No sign-in is waiting for this code (it may have expired): check the "
                                             "code your terminal shows, or run `slipway login` again."]})
    return login


def _decide(user, login: DeviceLogin, state: str, ip: str | None, **token) -> DeviceLogin:
    with transaction.atomic():
        decided = (DeviceLogin.objects.filter(pk=login.pk, state=DeviceLogin.State.PENDING,
                                              expires_at__gt=timezone.now())
                   .update(state=state, user=user, decided_at=timezone.now(), **token))
        if not decided:
            raise ValidationError({"user_code": ["This sign-in was decided or expired meanwhile: run `slipway login` "
                                                 "again if you still need it."]})
        audit(AuditEvent.Action.DEVICE_LOGIN, actor=user, target=f"device login {login.pk} ({login.client_name})",
              ip=ip, decision=state, requested_from=login.requested_ip)
    login.refresh_from_db()
    return login


def approve(user, login: DeviceLogin, token_name: str, expires_days: int | None, ip: str | None = None) -> DeviceLogin:
    """``user`` lets the waiting command line have a token named ``token_name`` (expiring as the tokens page's)."""
    return _decide(user, login, DeviceLogin.State.APPROVED, ip, token_name=token_name[:100] or token_name_for(""),
                   token_expires_days=expires_days)


def deny(user, login: DeviceLogin, ip: str | None = None) -> DeviceLogin:
    """``user`` refuses it: the command line is told ``access_denied``."""
    return _decide(user, login, DeviceLogin.State.DENIED, ip)


# -- the command line's poll ------------------------------------------------------------------------


def redeem(grant_type: str, device_code: str, ip: str | None = None) -> tuple[ApiToken, str]:
    """The token of an approved login, once; else a :class:`DeviceGrantError` in RFC 8628's words."""
    if grant_type != GRANT_TYPE:
        raise DeviceGrantError("unsupported_grant_type", f"grant_type must be {GRANT_TYPE}.")
    if not device_code:
        raise DeviceGrantError("invalid_request", "device_code is required.")
    login = DeviceLogin.objects.select_related("user").filter(device_code_hash=hash_token(device_code)).first()
    if login is None or login.state == DeviceLogin.State.REDEEMED:
        raise DeviceGrantError("invalid_grant", "Unknown or already used device code: run `slipway login` again.")
    now = timezone.now()
    if login.expires_at <= now:
        raise DeviceGrantError("expired_token", "The code expired before it was approved: run `slipway login` again.")
    # One poll per interval: the conditional update lets one of two racing polls through.
    early = login.last_polled_at is not None and now - login.last_polled_at < timedelta(seconds=login.interval)
    moved = 0 if early else DeviceLogin.objects.filter(pk=login.pk, last_polled_at=login.last_polled_at).update(
        last_polled_at=now)
    if not moved:
        DeviceLogin.objects.filter(pk=login.pk).update(interval=F("interval") + SLOW_DOWN_STEP, last_polled_at=now)
        raise DeviceGrantError("slow_down", f"Polled too often: wait {login.interval + SLOW_DOWN_STEP} s between polls.")
    if login.state == DeviceLogin.State.DENIED or (login.user is not None and not login.user.is_active):
        raise DeviceGrantError("access_denied", "The sign-in was denied in the browser.")
    if login.state == DeviceLogin.State.PENDING:
        raise DeviceGrantError("authorization_pending", "Waiting for the code to be approved in the browser.")
    with transaction.atomic():
        if not DeviceLogin.objects.filter(pk=login.pk, state=DeviceLogin.State.APPROVED).update(
                state=DeviceLogin.State.REDEEMED):
            raise DeviceGrantError("invalid_grant", "Unknown or already used device code: run `slipway login` again.")
        # Never without an expiry (security review 4 #8): the page's, else the setting's default.
        days = login.token_expires_days or settings.SLIPWAY_DEVICE_TOKEN_DAYS
        return create_api_token(login.user, login.token_name, days, ip=ip, origin=ApiToken.Origin.DEVICE)
