"""How a browser gets into a workspace: its own host, its own cookie, never the portal's session.

A workspace's notebook runs its owner's image and its owner's JavaScript, so it is served on a host
of its own (``ws-7.<SLIPWAY_WORKSPACE_HOST>`` on a real cluster, ``ws-7.localhost:<proxy port>`` on
the sandbox, docs/workspaces.md "Who may open it"): the portal's cookies (``sessionid``,
``csrftoken``) are host-only cookies of the portal's host and never reach it, and one workspace's
page cannot read another's (another origin). The way in is an exchange:

1. **Open** on the portal (signed in, allowed on the workspace, the workspace running) makes a
   *ticket* (:func:`issue_ticket`): Django-signed, single-purpose (its own salt), bound to the user,
   the workspace and the workspace's current *access version*, valid for :data:`TICKET_SECONDS`
   and redeemable once; the browser is sent to the workspace host with it (:data:`TICKET_PARAM`).
2. The workspace host's gate (the ingress controller's ``auth-url``, ``/workspaces/auth/``; the
   sandbox's proxy, :mod:`workspaces.proxy`) redeems it (:func:`redeem_ticket`) and sets the
   workspace *cookie* (:func:`make_cookie`): host-only, HttpOnly, SameSite=Lax, Secure and
   ``__Host-``-prefixed over https, valid for ``SLIPWAY_WORKSPACE_COOKIE_SECONDS`` after its last use
   (:func:`needs_refresh`: renewed while it is used).
3. Every request is checked by that cookie (:func:`read_cookie`, then
   :func:`workspaces.services.authorize` decides with the workspace's current rules).

The access version is the keyed digest of the workspace's secret env, which holds its Jupyter token
(:func:`workloads.secrets.reference`): rotating the token (:func:`workspaces.services.rotate_token`)
changes it, so every ticket and cookie issued before no longer opens anything. A cookie is also bound
to the user's session hash (a password change ends it, as it ends their portal sessions).
"""

from __future__ import annotations

import secrets as token_source
import time
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.utils.crypto import constant_time_compare

from workloads import crypto
from workloads.models import SecretEnv
from workspaces.manifests import TOKEN_ENV

#: The query parameter that carries a ticket to the workspace host.
TICKET_PARAM = "slipway-ticket"
#: How long a ticket may wait to be redeemed (the redirect from the portal takes a moment).
TICKET_SECONDS = 60
#: The workspace cookie's name: ``__Host-`` over https (no Domain, Path=/, Secure: no sibling host can set it).
COOKIE = "slipway-workspace"
SECURE_COOKIE = f"__Host-{COOKIE}"
#: A cookie in use is renewed once it is this old (its lifetime counts from its last renewal).
REFRESH_SECONDS = 300

_TICKET_SALT = "workspaces.access.ticket"
_COOKIE_SALT = "workspaces.access.cookie"
_USED = "slipway:ws-ticket:{nonce}"


@dataclass(frozen=True)
class Pass:
    """Who a valid ticket or cookie speaks for: a user, on one workspace, at one access version."""

    user_id: int
    workspace_id: int
    version: str
    session_hash: str = ""
    age: float = 0.0  #: seconds since the cookie was (re)issued


def new_token() -> str:
    """A Jupyter token: 256 random bits, URL-safe."""
    return token_source.token_urlsafe(32)


def credentials(workspace) -> tuple[str | None, str]:
    """``(Jupyter token, access version)`` of ``workspace``: the token from its sealed secret env (None once it
    ended), the version its keyed digest (which reveals nothing of the token, and changes with it)."""
    row = SecretEnv.objects.filter(ref=workspace.ref).values_list("sealed", "digest").first()
    if not row or not row[0]:
        return None, ""
    return crypto.unseal(row[0]).get(TOKEN_ENV), row[1]


def rotate(workspace) -> bool:
    """Replace its Jupyter token by a new one (sealed, with its digest: the new access version), conditional on the
    sealed value read (of two rotations racing, one writes its token and the other changes nothing). False when
    it has no token left or lost such a race."""
    row = SecretEnv.objects.filter(ref=workspace.ref).exclude(sealed="").values_list("pk", "sealed").first()
    if row is None:
        return False
    values = {**crypto.unseal(row[1]), TOKEN_ENV: new_token()}
    digest = crypto.digest(values)
    if not SecretEnv.objects.filter(pk=row[0], sealed=row[1]).update(sealed=crypto.seal(values), digest=digest):
        return False
    if getattr(workspace, "stored_secret_digest", None) is not None:
        workspace.stored_secret_digest = digest  # what this instance's manifests name (workloads.secrets.reference)
    return True


def issue_ticket(user, workspace_id: int, version: str) -> str:
    """A one-use ticket for ``user`` on workspace ``workspace_id`` at access ``version`` (:data:`TICKET_SECONDS`)."""
    return signing.dumps({"u": user.pk, "w": workspace_id, "v": version, "n": token_source.token_urlsafe(12)},
                         salt=_TICKET_SALT, compress=True)


def redeem_ticket(ticket: str, workspace_id: int) -> Pass | None:
    """The ticket's pass when it is genuine, fresh, for ``workspace_id`` and not redeemed before (then it is spent)."""
    try:
        data = signing.loads(ticket, salt=_TICKET_SALT, max_age=TICKET_SECONDS)
    except signing.BadSignature:  # SignatureExpired is one
        return None
    if not isinstance(data, dict) or data.get("w") != workspace_id or not isinstance(data.get("u"), int):
        return None
    # Spent at its first use (the cache is shared by every web process and the proxy: Redis in production).
    if not cache.add(_USED.format(nonce=data.get("n")), 1, timeout=TICKET_SECONDS * 2):
        return None
    return Pass(user_id=data["u"], workspace_id=workspace_id, version=str(data.get("v", "")))


def make_cookie(user, workspace_id: int, version: str) -> str:
    """The workspace cookie's value for ``user`` (signed and timestamped; it names no secret)."""
    return signing.dumps({"u": user.pk, "w": workspace_id, "v": version, "s": user.get_session_auth_hash(),
                          "t": int(time.time())}, salt=_COOKIE_SALT, compress=True)


def read_cookie(value: str, workspace_id: int) -> Pass | None:
    """The pass of a workspace cookie that is genuine, unexpired and for ``workspace_id`` (None otherwise)."""
    if not value:
        return None
    try:
        data = signing.loads(value, salt=_COOKIE_SALT, max_age=settings.SLIPWAY_WORKSPACE_COOKIE_SECONDS)
    except signing.BadSignature:  # SignatureExpired is one
        return None
    if not isinstance(data, dict) or data.get("w") != workspace_id or not isinstance(data.get("u"), int):
        return None
    return Pass(user_id=data["u"], workspace_id=workspace_id, version=str(data.get("v", "")),
                session_hash=str(data.get("s", "")), age=max(0.0, time.time() - float(data.get("t", 0))))


def session_matches(user, found: Pass) -> bool:
    """Whether the cookie was issued to ``user`` as they are now (a password change ends it)."""
    return constant_time_compare(found.session_hash, user.get_session_auth_hash())


def needs_refresh(found: Pass) -> bool:
    """Whether a cookie in use should be issued again, so that its lifetime counts from its last use."""
    return found.age >= REFRESH_SECONDS


def cookie_name(secure: bool) -> str:
    return SECURE_COOKIE if secure else COOKIE


def cookie_from(cookies: Mapping[str, str]) -> str:
    """The workspace cookie among a request's cookies (the ``__Host-`` one first)."""
    return cookies.get(SECURE_COOKIE) or cookies.get(COOKIE) or ""


def cookie_attributes(*, secure: bool) -> dict:
    """The workspace cookie's attributes as ``set_cookie`` takes them (Django's and aiohttp's alike): host-only
    (no Domain), Path=/, HttpOnly, SameSite=Lax, Secure over https; it lasts ``SLIPWAY_WORKSPACE_COOKIE_SECONDS``."""
    return {"max_age": settings.SLIPWAY_WORKSPACE_COOKIE_SECONDS, "path": "/", "secure": secure, "httponly": True,
            "samesite": "Lax"}
