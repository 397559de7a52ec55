"""API keys as the gateway enforces them: a cache of every key by digest, refreshed every second.

The first load reads every key; each refresh reads only the keys whose ``updated_at`` moved past the last one
seen (every change of a key — revoke, disable, enable, a new limit — moves it), less a few seconds of overlap
so that a change committed late with an earlier ``updated_at`` is not missed. So a revocation reaches every
gateway process within the refresh period plus one query (bench/gateway.py measures it).

A request's key is checked at request time against the cache (:meth:`KeyCache.check`): not revoked, not
disabled, not expired *now*, of the endpoint's team, and for this endpoint or for all of the team's.
``last_used_at`` is written at most once a minute per key, in batches (:meth:`KeyCache.used`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from inference.models import ApiKey
from teams.models import hash_token

#: Seconds of ``updated_at`` re-read at each refresh (transactions commit out of ``updated_at`` order).
OVERLAP_SECONDS = 5
#: ``last_used_at`` is written at most this often per key (and process).
LAST_USED_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Key:
    """What the gateway needs of a key."""

    id: int
    team_id: int
    endpoint_id: int | None
    usable: bool  #: not revoked, not disabled (expiry is checked at request time)
    expires_at: datetime | None
    requests_per_minute: int | None
    tokens_per_minute: int | None

    def valid_for(self, team_id: int, endpoint_id: int, now: datetime) -> bool:
        return (self.usable and (self.expires_at is None or self.expires_at > now) and self.team_id == team_id
                and (self.endpoint_id is None or self.endpoint_id == endpoint_id))


FIELDS = ("pk", "digest", "team_id", "endpoint_id", "revoked_at", "disabled_at", "expires_at",
          "requests_per_minute", "tokens_per_minute", "updated_at")


class KeyCache:
    """Every key by digest, kept fresh by :meth:`refresh` (run in a worker thread: it queries)."""

    def __init__(self) -> None:
        self.by_digest: dict[str, Key] = {}
        self.seen: datetime | None = None  #: the newest ``updated_at`` read
        self.loaded = False
        #: Keys used since the last write of ``last_used_at``, and when this process last wrote each.
        self.pending_use: dict[int, datetime] = {}
        self.written_use: dict[int, datetime] = {}

    def refresh(self) -> int:
        """Read the keys changed since the last refresh (all of them the first time); how many were read."""
        rows = ApiKey.objects.all()
        if self.seen is not None:
            rows = rows.filter(updated_at__gt=self.seen - timedelta(seconds=OVERLAP_SECONDS))
        count = 0
        for pk, digest, team_id, endpoint_id, revoked, disabled, expires, rpm, tpm, updated in rows.values_list(*FIELDS):
            self.by_digest[digest] = Key(pk, team_id, endpoint_id, revoked is None and disabled is None, expires,
                                         rpm, tpm)
            if self.seen is None or updated > self.seen:
                self.seen = updated
            count += 1
        self.loaded = True
        return count

    def check(self, authorization: str, team_id: int, endpoint_id: int, now: datetime) -> Key | None:
        """The key an ``Authorization`` header carries if it may call the endpoint now, else None."""
        scheme, _, raw = authorization.partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            return None
        key = self.by_digest.get(hash_token(raw))
        return key if key is not None and key.valid_for(team_id, endpoint_id, now) else None

    def used(self, key: Key, now: datetime) -> None:
        """Remember that ``key`` was used now (written by :meth:`write_last_used` at most once a minute)."""
        written = self.written_use.get(key.id)
        if written is None or now - written >= LAST_USED_EVERY:
            self.pending_use[key.id] = now

    def take_used(self) -> dict[int, datetime]:
        """The keys used since the last write (on the loop; :meth:`write_last_used` runs in a thread)."""
        pending, self.pending_use = self.pending_use, {}
        for pk, at in pending.items():
            self.written_use[pk] = at
        return pending

    @staticmethod
    def write_last_used(pending: dict[int, datetime]) -> int:
        """Write ``last_used_at`` of :meth:`take_used`'s keys in one statement; how many keys. It does not move
        ``updated_at``: a use is not a change the gateways need to reload."""
        if not pending:
            return 0
        now = max(pending.values())
        written = ApiKey.objects.filter(pk__in=list(pending)).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)).update(last_used_at=now)
        return written
