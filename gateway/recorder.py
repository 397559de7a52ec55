"""What a gateway process counts, aggregated in memory and added to the database every few seconds.

* :class:`~inference.models.TrafficWindow` — per endpoint, revision and :data:`STEP` seconds: requests by
  status class, streams, tokens, busy seconds, the latency histogram of whole requests and the
  time-to-first-byte histogram of streams (:mod:`inference.histogram`), the most in flight at once;
* :class:`~inference.models.KeyUsage` — per key, endpoint and hour: requests by class, errors (no answer
  from a replica), input and output tokens;
* :class:`~inference.models.GatewayLoad` — this process's held, in-flight and requests a second per
  endpoint, written every :data:`LOAD_SECONDS` (absolute figures of this process, one row each).

Every count is an *increment*: several gateway processes add to the same rows and their sums add up. The
histograms are lists, which no SQL ``x = x + excluded.x`` adds, so one flush makes sure its rows exist
(``INSERT … ON CONFLICT DO NOTHING``) and then, in one transaction, locks them (``SELECT … FOR UPDATE``;
SQLite's IMMEDIATE transactions lock the database), adds in Python and writes them back: two processes'
flushes of the same row serialize, neither is lost.

A flush writes endpoint by endpoint, each in its own transactions, and tells a database that cannot write now
from one that refuses a group's data (:data:`OUTAGES`). Down, unreachable or locked: what it did not write is
kept and written at the next flush (:class:`Unwritten`). Refused for its data (a value out of a column's range, a
row breaking a constraint), the group would fail again at every flush, and, put back with the others, kept every
team's counts from the database: it is dropped and logged, the other endpoints' counts written. No sum exceeds its
column (:data:`COLUMN_MAX`): a count that would is held at the column's largest value.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import InterfaceError, OperationalError, transaction

from inference import histogram
from inference.models import ApiKey, GatewayLoad, InferenceEndpoint, KeyUsage, TrafficWindow

logger = logging.getLogger("slipway.gateway")

#: Seconds of one traffic window.
STEP = 10
#: Seconds between two flushes of the counts, and between two writes of the load.
FLUSH_SECONDS = 2.0  # 5 s made the canary rule's newest rows 5 s late (inference.canary)
LOAD_SECONDS = 2.0

TRAFFIC_COUNTS = ("requests", "status_2xx", "status_4xx", "status_5xx", "streams", "input_tokens", "output_tokens",
                  "busy_seconds")
USAGE_COUNTS = ("requests_2xx", "requests_4xx", "requests_5xx", "errors", "input_tokens", "output_tokens")

#: The largest value of the counts' columns (``PositiveBigIntegerField``: a signed 64-bit integer).
COLUMN_MAX = 2**63 - 1
#: What a database raises when it cannot write now (down, unreachable, a lock held past the gateway's wait), as
#: opposed to refusing the data it was given: the counts are kept for the next flush.
OUTAGES = (OperationalError, InterfaceError)


class Unwritten(Exception):
    """The database could not write now (:data:`OUTAGES`): ``left`` (a :meth:`Recorder.take` pair) is what it did
    not write, to put back; the endpoints written before it are not in it (put back, they would count twice)."""

    def __init__(self, left: tuple[dict, dict]) -> None:
        super().__init__("the database could not write the gateway's counts")
        self.left = left


def gateway_id() -> str:
    """This process: host and pid (GatewayLoad.gateway)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:64]


def status_class(status: int) -> str:
    return "5xx" if status >= 500 else "4xx" if status >= 400 else "2xx"


@dataclass(frozen=True)
class Outcome:
    """One request as the gateway saw it end."""

    endpoint_id: int
    team_id: int
    revision: int
    key_id: int | None
    status: int
    at: datetime  #: when it arrived
    latency_ms: float
    stream: bool = False
    ttfb_ms: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    busy_seconds: float = 0.0
    error: bool = False  #: no (whole) answer from a replica


@dataclass
class Window:
    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TRAFFIC_COUNTS, 0))
    latency: list[int] = field(default_factory=histogram.empty)
    ttft: list[int] = field(default_factory=histogram.empty)
    in_flight_max: int = 0


# Every request asks for its window and its hour: each datetime is made once per window or hour, not per request
# (they showed in a profile of the gateway under bench/gateway.py's load).
@functools.lru_cache(maxsize=64)
def _utc_at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def window_start(at: datetime) -> datetime:
    return _utc_at(int(at.timestamp()) // STEP * STEP)


def hour_of(at: datetime) -> datetime:
    return _utc_at(int(at.timestamp()) // 3600 * 3600)


class Recorder:
    """The counts of one process since its last flush. Everything but :meth:`write`, :meth:`write_load` and
    :meth:`forget_load` runs on the event loop (no lock: the loop takes the buffers, a thread writes them)."""

    def __init__(self) -> None:
        self.gateway = gateway_id()
        self.traffic: dict[tuple[int, int, int, datetime], Window] = {}
        self.usage: dict[tuple[int, int, int, datetime], dict[str, int]] = {}
        #: Live figures per endpoint: requests in flight and held now, and requests since the last load write.
        self.in_flight: dict[int, int] = defaultdict(int)
        self.held: dict[int, int] = defaultdict(int)
        self.arrived: dict[int, int] = defaultdict(int)
        self.loaded: set[int] = set()  #: endpoints this process wrote a load row for (to write their zeros too)

    # -- on the event loop -------------------------------------------------------------------------------

    def begin(self, endpoint_id: int, team_id: int, revision: int, at: datetime) -> None:
        """A request starts being served (after any hold): counted in flight."""
        self.in_flight[endpoint_id] += 1
        self.arrived[endpoint_id] += 1
        win = self._window(endpoint_id, team_id, revision, at)
        win.in_flight_max = max(win.in_flight_max, self.in_flight[endpoint_id])

    def end(self, endpoint_id: int) -> None:
        self.in_flight[endpoint_id] -= 1

    def _window(self, endpoint_id: int, team_id: int, revision: int, at: datetime) -> Window:
        key = (endpoint_id, team_id, revision, window_start(at))
        win = self.traffic.get(key)
        if win is None:
            win = self.traffic[key] = Window()
        return win

    def add(self, outcome: Outcome) -> None:
        win = self._window(outcome.endpoint_id, outcome.team_id, outcome.revision, outcome.at)
        cls = status_class(outcome.status)
        counts = win.counts
        counts["requests"] += 1
        counts[f"status_{cls}"] += 1
        counts["streams"] += outcome.stream
        counts["input_tokens"] += outcome.input_tokens
        counts["output_tokens"] += outcome.output_tokens
        counts["busy_seconds"] += outcome.busy_seconds
        histogram.add(win.latency, outcome.latency_ms)
        if outcome.stream and outcome.ttfb_ms is not None:
            histogram.add(win.ttft, outcome.ttfb_ms)
        if outcome.key_id is not None:
            usage = self._usage(outcome.key_id, outcome.endpoint_id, outcome.team_id, outcome.at)
            usage[f"requests_{cls}"] += 1
            usage["errors"] += outcome.error
            usage["input_tokens"] += outcome.input_tokens
            usage["output_tokens"] += outcome.output_tokens

    def refused(self, key_id: int, endpoint_id: int, team_id: int, status: int, at: datetime) -> None:
        """A request of a valid key that the gateway refused itself (its rate limit, no replica ready in time, its
        body not sent in time): counted in the key's hour, which its team reads, and in no revision's window — no
        revision answered it, so it is neither a revision's traffic nor its latency (the canary rule and the
        autoscaler read those)."""
        self._usage(key_id, endpoint_id, team_id, at)[f"requests_{status_class(status)}"] += 1

    def _usage(self, key_id: int, endpoint_id: int, team_id: int, at: datetime) -> dict[str, int]:
        key = (key_id, endpoint_id, team_id, hour_of(at))
        usage = self.usage.get(key)
        if usage is None:
            usage = self.usage[key] = dict.fromkeys(USAGE_COUNTS, 0)
        return usage

    def take(self) -> tuple[dict, dict]:
        """The counts since the last flush, the buffers emptied (on the loop: :meth:`write` runs in a thread)."""
        traffic, self.traffic = self.traffic, {}
        usage, self.usage = self.usage, {}
        return traffic, usage

    def put_back(self, taken: tuple[dict, dict]) -> None:
        """Counts whose write failed, added back for the next flush (nothing counted twice: it rolled back)."""
        traffic, usage = taken
        for key, win in traffic.items():
            mine = self.traffic.setdefault(key, Window())
            for name, value in win.counts.items():
                mine.counts[name] += value
            mine.latency = histogram.merge([mine.latency, win.latency])
            mine.ttft = histogram.merge([mine.ttft, win.ttft])
            mine.in_flight_max = max(mine.in_flight_max, win.in_flight_max)
        for key, counts in usage.items():
            mine = self.usage.setdefault(key, dict.fromkeys(USAGE_COUNTS, 0))
            for name, value in counts.items():
                mine[name] += value

    def load(self, now: datetime, elapsed: float) -> list[GatewayLoad]:
        """This process's live figures per endpoint, and zeros for those that had some last time (on the loop)."""
        active = {e for e, n in self.in_flight.items() if n} | {e for e, n in self.held.items() if n} \
            | {e for e, n in self.arrived.items() if n}
        wanted = active | self.loaded
        arrived, self.arrived = self.arrived, defaultdict(int)
        self.loaded = active
        return [GatewayLoad(endpoint_id=e, gateway=self.gateway, held=max(self.held.get(e, 0), 0),
                            in_flight=max(self.in_flight.get(e, 0), 0),
                            requests_per_second=round(arrived.get(e, 0) / elapsed, 3) if elapsed > 0 else 0.0,
                            updated_at=now) for e in sorted(wanted)]

    # -- in a worker thread ------------------------------------------------------------------------------

    def write(self, taken: tuple[dict, dict]) -> tuple[int, int]:
        """Add taken counts to the database, endpoint by endpoint; (traffic rows, usage rows) written. Raises
        :class:`Unwritten` with what is left when the database cannot write (the module's docstring)."""
        traffic, usage = taken
        try:
            endpoints = {key[0] for key in traffic} | {key[1] for key in usage}
            alive = set(InferenceEndpoint.objects.filter(pk__in=endpoints).values_list("pk", flat=True)) \
                if endpoints else set()
            keys = set(ApiKey.objects.filter(pk__in={key[0] for key in usage}).values_list("pk", flat=True)) \
                if usage else set()
        except OUTAGES as exc:
            raise Unwritten(taken) from exc
        groups: dict[int, tuple[dict, dict]] = {}
        for key, win in traffic.items():
            if key[0] in alive:  # an endpoint deleted meanwhile: dropped
                groups.setdefault(key[0], ({}, {}))[0][key] = win
        for key, counts in usage.items():
            if key[1] in alive and key[0] in keys:
                groups.setdefault(key[1], ({}, {}))[1][key] = counts
        written = [0, 0]
        order = list(groups)
        for done, endpoint_id in enumerate(order):
            group_traffic, group_usage = groups[endpoint_id]
            try:
                self._write_group(group_traffic, group_usage)
            except OUTAGES as exc:
                left: tuple[dict, dict] = ({}, {})
                for later in order[done:]:
                    left[0].update(groups[later][0])
                    left[1].update(groups[later][1])
                raise Unwritten(left) from exc
            except Exception:
                logger.exception("gateway: counts of endpoint %s dropped, the database refused them (%d requests, "
                                 "%d key-hours)", endpoint_id,
                                 sum(win.counts["requests"] for win in group_traffic.values()), len(group_usage))
                continue
            written[0] += len(group_traffic)
            written[1] += len(group_usage)
        return written[0], written[1]

    def _write_group(self, traffic: dict, usage: dict) -> None:
        """One endpoint's counts. Each block is a transaction of its own, or a savepoint in the stop's transaction
        (``Gateway._last_write``): a group the database refuses undoes only itself there too."""
        with transaction.atomic():
            if traffic:
                TrafficWindow.objects.bulk_create(
                    [TrafficWindow(endpoint_id=e, team_id=t, revision=r, start=s, step=STEP,
                                   latency=histogram.empty(), ttft=histogram.empty()) for e, t, r, s in traffic],
                    ignore_conflicts=True)
            if usage:
                KeyUsage.objects.bulk_create([KeyUsage(key_id=k, endpoint_id=e, team_id=t, hour=h)
                                              for k, e, t, h in usage], ignore_conflicts=True)
        with transaction.atomic():
            if traffic:
                self._add_traffic(traffic)
            if usage:
                self._add_usage(usage)

    @staticmethod
    def _add_traffic(traffic: dict) -> None:
        wanted = {(e, r, s): win for (e, _t, r, s), win in traffic.items()}
        rows = list(TrafficWindow.objects.select_for_update().filter(
            endpoint_id__in={k[0] for k in wanted}, step=STEP, start__in={k[2] for k in wanted}).order_by("pk"))
        changed = []
        for row in rows:
            win = wanted.get((row.endpoint_id, row.revision, row.start))
            if win is None:
                continue
            for name in TRAFFIC_COUNTS:
                setattr(row, name, min(getattr(row, name) + win.counts[name], COLUMN_MAX))
            row.latency = histogram.merge([row.latency, win.latency])
            row.ttft = histogram.merge([row.ttft, win.ttft])
            row.in_flight_max = max(row.in_flight_max, win.in_flight_max)
            changed.append(row)
        TrafficWindow.objects.bulk_update(changed, [*TRAFFIC_COUNTS, "latency", "ttft", "in_flight_max"])

    @staticmethod
    def _add_usage(usage: dict) -> None:
        wanted = {(k, e, h): counts for (k, e, _t, h), counts in usage.items()}
        rows = list(KeyUsage.objects.select_for_update().filter(
            key_id__in={k[0] for k in wanted}, hour__in={k[2] for k in wanted}).order_by("pk"))
        changed = []
        for row in rows:
            counts = wanted.get((row.key_id, row.endpoint_id, row.hour))
            if counts is None:
                continue
            for name in USAGE_COUNTS:
                setattr(row, name, min(getattr(row, name) + counts[name], COLUMN_MAX))
            changed.append(row)
        KeyUsage.objects.bulk_update(changed, list(USAGE_COUNTS))

    @staticmethod
    def write_load(rows: list[GatewayLoad]) -> int:
        """One upsert of :meth:`load`'s rows (those of endpoints deleted meanwhile left out)."""
        if not rows:
            return 0
        alive = set(InferenceEndpoint.objects.filter(pk__in={r.endpoint_id for r in rows}).values_list("pk", flat=True))
        rows = [r for r in rows if r.endpoint_id in alive]
        GatewayLoad.objects.bulk_create(rows, update_conflicts=True, unique_fields=["endpoint", "gateway"],
                                        update_fields=["held", "in_flight", "requests_per_second", "updated_at"])
        return len(rows)

    def forget_load(self) -> None:
        """This process's rows, deleted as it stops (a gateway that went away holds nothing)."""
        GatewayLoad.objects.filter(gateway=self.gateway).delete()
