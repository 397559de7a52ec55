"""Per-key rate limits shared by every gateway process, in Redis: fixed one-minute windows.

A key with ``requests_per_minute`` counts each request with ``INCR`` on its minute's counter (expiring after
two minutes); the request that takes it past the limit, and every one after it in that minute, get 429. A key
with ``tokens_per_minute`` is refused while its minute's token counter is at or past the limit; the tokens of
an answer (prompt + completion) are added with ``INCRBY`` once it is counted (docs/serving.md "Limits"), so
the request that crosses the limit is served and the ones after it wait for the next minute.

Redis unreachable: the gateway **fails open** (serves without limits) and logs one line per half minute —
a limit protects a replica's capacity, not a secret, and the gateway must not stop serving because its
counter store is down. Keys without limits never touch Redis.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

logger = logging.getLogger("slipway.gateway")

WINDOW_SECONDS = 60
#: Counters live two windows (the current one is read while the next one begins).
EXPIRE_SECONDS = 2 * WINDOW_SECONDS
#: Seconds a Redis call may take before the gateway gives up on it (and serves).
REDIS_TIMEOUT = 0.25
#: Seconds between two log lines about Redis being unreachable.
LOG_EVERY = 30.0


@dataclass(frozen=True)
class Refusal:
    """A request over a limit: which one, and seconds until its window ends (``Retry-After``)."""

    limit: str  # "requests" or "tokens"
    retry_after: int


def window(at: float) -> tuple[int, int]:
    """The window ``at`` (Unix seconds) falls in and the whole seconds left in it (at least 1)."""
    minute = int(at // WINDOW_SECONDS)
    return minute, max(int((minute + 1) * WINDOW_SECONDS - at + 0.999), 1)


def counter(kind: str, key_id: int, minute: int) -> str:
    return f"slipway:gateway:{kind}:{key_id}:{minute}"


class Limiter:
    """The limits' counters of one gateway process (a pool of Redis connections)."""

    def __init__(self, url: str) -> None:
        self.client = aioredis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT,
                                              socket_connect_timeout=REDIS_TIMEOUT) if url else None
        self.logged = 0.0

    def _failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self.logged >= LOG_EVERY:
            self.logged = now
            logger.warning("gateway: rate limits not enforced, Redis unreachable (%s)", exc)

    async def admit(self, key_id: int, requests_per_minute: int | None, tokens_per_minute: int | None,
                    at: float | None = None) -> Refusal | None:
        """Count a request of the key and say whether it is over one of its limits (None: it may go)."""
        if self.client is None or (requests_per_minute is None and tokens_per_minute is None):
            return None
        minute, left = window(time.time() if at is None else at)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                if requests_per_minute is not None:
                    name = counter("requests", key_id, minute)
                    pipe.incr(name).expire(name, EXPIRE_SECONDS)
                if tokens_per_minute is not None:
                    pipe.get(counter("tokens", key_id, minute))
                answers = await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return None
        if requests_per_minute is not None and answers[0] > requests_per_minute:
            return Refusal("requests", left)
        if tokens_per_minute is not None and int(answers[-1] or 0) >= tokens_per_minute:
            return Refusal("tokens", left)
        return None

    async def add_tokens(self, key_id: int, tokens: int, at: float | None = None) -> None:
        """Add an answer's tokens to the key's minute (only keys with a token limit are counted)."""
        if self.client is None or tokens <= 0:
            return
        minute, _ = window(time.time() if at is None else at)
        name = counter("tokens", key_id, minute)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                await pipe.incrby(name, tokens).expire(name, EXPIRE_SECONDS).execute()
        except (RedisError, OSError) as exc:
            self._failed(exc)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
