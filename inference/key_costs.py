"""Usage per API key in money: each endpoint's ledger cost, hour by hour, split over the keys that used it
(docs/serving.md "Usage per key").

The rule, per endpoint and ledger hour (:func:`billing.ledger.usage_hour`):

1. The hour's cost is the endpoint's ledger cost in it (closed row plus the open segment up to now:
   :func:`billing.ledger.cost_by_hour`), rounded to the cent (half up).
2. When the keys' requests to it that hour carried tokens, each key's weight is its tokens (input + output);
   else, when there were requests, its requests (every status class); a key with weight 0 gets 0.
3. The cents are split in proportion to the weights by the largest-remainder method: each key gets the whole
   cents of its exact share, and the cents left over go one each to the largest remainders (ties: the lower
   key id first). So the shares sum EXACTLY to the hour's cost, and no key is more than a cent off its exact
   share.
4. An hour with cost and no request from any key is the endpoint's "unattributed (idle)" line: the replicas
   held their GPUs and nobody called them.

Every figure is computed from :class:`~inference.models.KeyUsage` rows and the ledger when asked, never
stored, so it cannot drift from the ledger. Totals are sums of the hourly figures (so they equal the sum of
the hours' costs rounded to the cent).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import Q

from billing import ledger
from inference.models import ApiKey, InferenceEndpoint, KeyUsage

CENT = Decimal("0.01")
#: The name of the line of an hour's cost no key called for (``key_id`` None).
IDLE_NAME = "unattributed (idle)"
#: The counters of a key's hour, as the gateway writes them.
COUNTERS = ("requests_2xx", "requests_4xx", "requests_5xx", "errors", "input_tokens", "output_tokens")


# -- the pure split ---------------------------------------------------------------------------------------


def split_cents(total_cents: int, weights: Sequence[tuple[Hashable, int]]) -> dict[Hashable, int]:
    """``total_cents`` split over ``weights`` (``[(key, weight ≥ 0)]``, at least one > 0) in proportion, by the
    largest-remainder method: the parts are whole cents and sum to ``total_cents`` exactly. Ties of remainders
    go to the key listed first."""
    total_weight = sum(weight for _key, weight in weights)
    if total_cents < 0 or total_weight <= 0 or any(weight < 0 for _key, weight in weights):
        raise ValueError("split_cents needs a non-negative total and non-negative weights with a positive sum")
    parts: dict[Hashable, int] = {}
    remainders: list[tuple[int, int, Hashable]] = []
    for position, (key, weight) in enumerate(weights):
        whole, remainder = divmod(total_cents * weight, total_weight)
        parts[key] = parts.get(key, 0) + whole
        remainders.append((-remainder, position, key))
    left = total_cents - sum(parts.values())
    for _remainder, _position, key in sorted(remainders)[:left]:
        parts[key] += 1
    return parts


def to_cents(amount: Decimal) -> int:
    """``amount`` rounded to the cent (half up), in cents."""
    return int(amount.quantize(CENT, ROUND_HALF_UP) * 100)


def split_hour(cost: Decimal, usage: Sequence[tuple[Hashable, int, int]]) -> tuple[dict[Hashable, Decimal], Decimal]:
    """One hour's ``cost`` over the keys of ``usage`` (``[(key, tokens, requests)]``, in tie-break order): returns
    ``({key: share}, idle)`` in money to the cent, which sum exactly to ``cost`` rounded to the cent.

    By tokens when the hour has any, else by requests; with neither, the whole cost is idle.
    """
    cents = to_cents(cost)
    tokens = sum(t for _k, t, _r in usage)
    requests = sum(r for _k, _t, r in usage)
    if tokens > 0:
        parts = split_cents(cents, [(key, t) for key, t, _r in usage])
    elif requests > 0:
        parts = split_cents(cents, [(key, r) for key, _t, r in usage])
    else:
        return {key: Decimal(0) * CENT for key, _t, _r in usage}, Decimal(cents) * CENT
    return {key: Decimal(part) * CENT for key, part in parts.items()}, Decimal(0) * CENT


# -- the report -------------------------------------------------------------------------------------------


@dataclass
class KeyLine:
    """One key's figures over a span (an hour, or the period's total); ``key_id`` None: the idle line."""

    key_id: int | None
    name: str
    prefix: str
    endpoint_id: int | None = None
    endpoint_name: str = ""
    hour: datetime | None = None
    requests_2xx: int = 0
    requests_4xx: int = 0
    requests_5xx: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = field(default_factory=lambda: Decimal(0) * CENT)

    @property
    def requests(self) -> int:
        return self.requests_2xx + self.requests_4xx + self.requests_5xx

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: KeyLine) -> None:
        for name in (*COUNTERS, "cost"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"requests": self.requests,
                                                                         "tokens": self.tokens}


@dataclass
class KeyUsageReport:
    since: datetime
    until: datetime
    hours: list[KeyLine]  #: per key, endpoint and hour (idle lines too), by hour then key
    totals: list[KeyLine]  #: per key over the period (the idle line last), by cost, highest first
    ledger_cost: Decimal  #: the endpoints' ledger cost over the period, each hour rounded to the cent
    currency: str

    @property
    def attributed(self) -> Decimal:
        return sum((line.cost for line in self.totals if line.key_id is not None), Decimal(0) * CENT)


def key_usage(endpoints: Sequence[InferenceEndpoint], since: datetime, until: datetime,
              now: datetime | None = None) -> KeyUsageReport:
    """The usage and cost per key of ``endpoints`` (one team's) in the ledger hours of ``[since, until)``."""
    hours: list[KeyLine] = []
    ledger_cost = Decimal(0) * CENT
    if endpoints:
        team_id = endpoints[0].team_id
        costs = ledger.cost_by_hour(team_id, [e.ref for e in endpoints], since, until, now)
        first = ledger.usage_hour(since)
        rows = (KeyUsage.objects.filter(endpoint__in=endpoints, hour__gte=first, hour__lt=until)
                .values("key_id", "endpoint_id", "hour", *COUNTERS))
        keys = {k.pk: k for k in ApiKey.objects.filter(pk__in={row["key_id"] for row in rows})}
        by_hour: dict[tuple[int, datetime], list[dict]] = {}
        hour_of = functools.cache(ledger.usage_hour)  # a month's rows name its 720 hours again and again
        for row in rows:
            by_hour.setdefault((row["endpoint_id"], hour_of(row["hour"])), []).append(row)
        for endpoint in endpoints:
            endpoint_costs = costs.get(endpoint.ref, {})
            for hour in sorted(set(endpoint_costs) | {h for (e, h) in by_hour if e == endpoint.pk}):
                hours.extend(_hour_lines(endpoint, hour, endpoint_costs.get(hour, Decimal(0)),
                                         by_hour.get((endpoint.pk, hour), []), keys))
                ledger_cost += to_cents(endpoint_costs.get(hour, Decimal(0))) * CENT
    hours.sort(key=lambda line: (line.hour, line.endpoint_id, line.key_id is None, line.key_id or 0))
    return KeyUsageReport(since, until, hours, _totals(hours), ledger_cost, settings.SLIPWAY_CURRENCY)


def _hour_lines(endpoint: InferenceEndpoint, hour: datetime, cost: Decimal, rows: list[dict],
                keys: dict[int, ApiKey]) -> list[KeyLine]:
    rows = sorted(rows, key=lambda row: row["key_id"])
    shares, idle = split_hour(cost, [(row["key_id"], row["input_tokens"] + row["output_tokens"],
                                      row["requests_2xx"] + row["requests_4xx"] + row["requests_5xx"])
                                     for row in rows])
    lines = [KeyLine(row["key_id"], keys[row["key_id"]].name, keys[row["key_id"]].prefix, endpoint.pk, endpoint.name,
                     hour, **{name: row[name] for name in COUNTERS}, cost=shares[row["key_id"]]) for row in rows]
    if idle:
        lines.append(KeyLine(None, IDLE_NAME, "", endpoint.pk, endpoint.name, hour, cost=idle))
    return lines


def _totals(hours: list[KeyLine]) -> list[KeyLine]:
    totals: dict[int | None, KeyLine] = {}
    for line in hours:
        if line.key_id not in totals:
            totals[line.key_id] = KeyLine(line.key_id, line.name, line.prefix)
        totals[line.key_id].add(line)
    return sorted(totals.values(), key=lambda t: (t.key_id is None, -t.cost, -t.tokens, t.key_id or 0))


def endpoint_key_usage(endpoint: InferenceEndpoint, since: datetime, until: datetime,
                       now: datetime | None = None) -> KeyUsageReport:
    """Usage and cost per key of one endpoint (its own keys and its team's keys that called it)."""
    return key_usage([endpoint], since, until, now)


def team_key_usage(team, since: datetime, until: datetime, now: datetime | None = None) -> KeyUsageReport:
    """Usage and cost per key over every endpoint of ``team`` that may have run or been called in the period."""
    endpoints = list(InferenceEndpoint.objects.filter(team=team).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=since)).order_by("pk"))
    return key_usage(endpoints, since, until, now)


#: The CSV's columns (API and portal): one row per key, endpoint and hour.
CSV_COLUMNS = ["hour", "endpoint_id", "endpoint_name", "key_id", "name", "prefix", *COUNTERS, "requests", "tokens",
               "cost", "currency"]


def csv_rows(report: KeyUsageReport) -> list[dict]:
    return [{**line.as_dict(), "hour": line.hour.isoformat(), "key_id": line.key_id or "",
             "currency": report.currency} for line in report.hours]


def usage_panel(team, since: datetime, until: datetime) -> dict:
    """The Usage page's card of API keys (``EndpointKind.usage_panel``): the team's usage per key in money over
    the page's month, up to now."""
    from django.utils import timezone

    return {"usage": team_key_usage(team, since, min(until, timezone.now())), "team": team}
