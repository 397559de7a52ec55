"""Sign-in throttling: after repeated failures for a username or from an address, refuse for a while.

Counters live in the cache (shared by every web process: Redis in production, the database
cache locally), keyed by a hash of the username and by the client address, each expiring
``WINDOW`` after its last failure. A successful sign-in clears the username's counter.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.core.cache import cache

#: Failures allowed per username, and per client address, within the window.
MAX_FAILURES = 5
WINDOW = timedelta(minutes=15)


def _keys(username: str, ip: str | None) -> list[str]:
    user = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return [f"slipway:login-fail:user:{user}", *([f"slipway:login-fail:ip:{ip}"] if ip else [])]


def blocked(username: str, ip: str | None) -> bool:
    """Whether sign-ins for ``username`` or from ``ip`` are refused right now."""
    return any((cache.get(key) or 0) >= MAX_FAILURES for key in _keys(username, ip))


def note_failure(username: str, ip: str | None) -> None:
    for key in _keys(username, ip):
        if not cache.add(key, 1, timeout=int(WINDOW.total_seconds())):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=int(WINDOW.total_seconds()))
            cache.touch(key, timeout=int(WINDOW.total_seconds()))


def clear(username: str) -> None:
    cache.delete(_keys(username, None)[0])
