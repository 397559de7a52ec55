"""The canary rule: compare a candidate revision with the stable one, window by window, and act
(docs/serving.md "Revisions, canary and rollback").

**Windows.** The gateways write each revision's figures in 10 s rows (:class:`inference.models.TrafficWindow`,
``step`` 10). A *window* is 30 s: three rows. At each evaluation (a beat task every
``SLIPWAY_CANARY_EVALUATE_SECONDS``, 2 s) the newest window ends at the last 10 s boundary at least
:data:`SETTLE_SECONDS` old (the gateways add their counts every few seconds: a younger row may still
grow), and the windows before it are the adjacent 30 s before — so windows slide by 10 s from one
evaluation to the next, and "two consecutive bad windows" are the newest two adjacent ones.

**A window's verdict** (:func:`judge`, pure): none unless both revisions answered at least
``SLIPWAY_CANARY_MIN_REQUESTS`` (20) requests in it — with fewer, one error is 5 points or more and a
single slow request is the p95, so chance would decide; bad when the candidate's 5xx rate exceeds the
stable's by more than ``SLIPWAY_CANARY_ERROR_DELTA`` (0.02: 2 percentage points) or its p95 latency
exceeds the stable's × ``SLIPWAY_CANARY_LATENCY_FACTOR`` (1.5); good otherwise. The rows hold only what the
revisions answered: the requests the gateway refuses itself (no key, a rate limit) are counted apart
(``gateway.server.Gateway._refuse``), or a keyless flood's sub-millisecond 401s would be the stable's p95.

**Acting** (:func:`evaluate`): the newest ``SLIPWAY_CANARY_BAD_WINDOWS`` (2) windows all bad → the
candidate is rolled back (:func:`inference.revisions.roll_back`: weight 0, ``rolled_back`` with the figures
of those windows, its units released, its objects deleted, an event told to the owner). With
``auto_promote_windows`` N, the newest N windows all good → promoted. Both moves are conditional
updates: two evaluators at once make one.

**Reaction time.** Errors that start at *s* make the window holding *s* bad as soon as they weigh enough
in it (a candidate failing half its answers: after about 1.2 s of its 30 s, 4 % of its requests at 50 %
errors is the 2 points); the next window is all bad. That pair is the newest once its end (*s* + about
31 s, rounded up to the next 10 s boundary: at most *s* + 42 s) is :data:`SETTLE_SECONDS` old, and the next
evaluation starts within one period: at most *s* + 42 + 3 + 2 = *s* + 47 s, the gateways adding their
counts every 2 s (a 10 s period and 5 s flushes left 3 s of the 60 promised for a worker busy with other
tasks under load: loaded CI runs took 61 and 67 s). Errors just above the
threshold need most of a window to weigh enough: up to about *s* + 80 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from inference import histogram, revisions
from inference.constants import RevisionState
from inference.models import EndpointRevision, InferenceEndpoint, TrafficWindow

#: The gateways' row length, and the window's.
ROW_SECONDS = 10
WINDOW_SECONDS = 30
#: How old a row must be before it is read: the gateways flush their counts every few seconds.
SETTLE_SECONDS = 3

GOOD, BAD, NONE = "good", "bad", "none"


@dataclass(frozen=True)
class Figures:
    """One revision's requests in one window: how many, how many 5xx, and its p95 latency (ms; None: none)."""

    requests: int
    errors: int
    p95_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def as_dict(self) -> dict:
        return {"requests": self.requests, "errors_5xx": self.errors, "error_rate": round(self.error_rate, 4),
                "p95_ms": None if self.p95_ms is None else round(self.p95_ms, 1)}


@dataclass(frozen=True)
class Rule:
    error_delta: float = 0.02
    latency_factor: float = 1.5
    min_requests: int = 20
    bad_windows: int = 2

    @classmethod
    def from_settings(cls) -> Rule:
        return cls(settings.SLIPWAY_CANARY_ERROR_DELTA, settings.SLIPWAY_CANARY_LATENCY_FACTOR,
                   settings.SLIPWAY_CANARY_MIN_REQUESTS, settings.SLIPWAY_CANARY_BAD_WINDOWS)


@dataclass(frozen=True)
class Judgement:
    verdict: str  #: GOOD, BAD or NONE
    why: str


def judge(candidate: Figures, stable: Figures, rule: Rule) -> Judgement:
    """One window's verdict on the candidate against the stable revision (see the module's docstring)."""
    if candidate.requests < rule.min_requests or stable.requests < rule.min_requests:
        return Judgement(NONE, f"too few requests for a verdict (candidate {candidate.requests}, stable "
                               f"{stable.requests}; at least {rule.min_requests} each)")
    reasons = []
    if candidate.error_rate - stable.error_rate > rule.error_delta:
        reasons.append(f"5xx rate {candidate.error_rate:.1%} against the stable's {stable.error_rate:.1%} "
                       f"(more than {rule.error_delta * 100:g} points above)")
    if candidate.p95_ms is not None and stable.p95_ms is not None and candidate.p95_ms > stable.p95_ms * rule.latency_factor:
        reasons.append(f"p95 {candidate.p95_ms:.0f} ms against the stable's {stable.p95_ms:.0f} ms "
                       f"(more than {rule.latency_factor:g}×)")
    if reasons:
        return Judgement(BAD, "; ".join(reasons))
    return Judgement(GOOD, "within the thresholds")


def window_ends(now: datetime, count: int) -> list[datetime]:
    """The ends of the newest ``count`` adjacent windows at ``now``, newest first."""
    epoch = int((now - timedelta(seconds=SETTLE_SECONDS)).timestamp())
    newest = datetime.fromtimestamp(epoch - epoch % ROW_SECONDS, tz=now.tzinfo or timezone.get_current_timezone())
    return [newest - timedelta(seconds=WINDOW_SECONDS * i) for i in range(count)]


#: One gateway row as the rule reads it: (revision, start, requests, 5xx, latency histogram).
Row = tuple[int, datetime, int, int, list]


def rows_of(endpoint_ids, start: datetime, end: datetime) -> dict[int, list[Row]]:
    """The gateways' 10 s rows of ``endpoint_ids`` in [start, end), by endpoint: one query for them all."""
    found: dict[int, list[Row]] = {}
    for endpoint_id, *row in TrafficWindow.objects.filter(
            endpoint_id__in=list(endpoint_ids), step=ROW_SECONDS, start__gte=start, start__lt=end).values_list(
            "endpoint_id", "revision", "start", "requests", "status_5xx", "latency"):
        found.setdefault(endpoint_id, []).append(tuple(row))
    return found


def figures(rows: list[Row], revision: int, start: datetime, end: datetime) -> Figures:
    """A revision's figures over [start, end) from its rows (histograms merged: the p95 of all its requests)."""
    mine = [r for r in rows if r[0] == revision and start <= r[1] < end]
    latency = histogram.merge(r[4] for r in mine)
    return Figures(sum(r[2] for r in mine), sum(r[3] for r in mine), histogram.quantile(latency, 0.95))


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    candidate: Figures
    stable: Figures
    judgement: Judgement

    def as_dict(self) -> dict:
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "verdict": self.judgement.verdict,
                "why": self.judgement.why, "candidate": self.candidate.as_dict(), "stable": self.stable.as_dict()}


def span(now: datetime, count: int) -> tuple[datetime, datetime]:
    """[start, end) of the newest ``count`` windows at ``now``."""
    ends = window_ends(now, count)
    return ends[-1] - timedelta(seconds=WINDOW_SECONDS), ends[0]


def windows(rows: list[Row], candidate: int, stable: int, now: datetime, count: int, rule: Rule) -> list[Window]:
    """The newest ``count`` windows' verdicts from an endpoint's rows, newest first."""
    out = []
    for end in window_ends(now, count):
        start = end - timedelta(seconds=WINDOW_SECONDS)
        c = figures(rows, candidate, start, end)
        s = figures(rows, stable, start, end)
        out.append(Window(start, end, c, s, judge(c, s, rule)))
    return out


def _count(revision: EndpointRevision, rule: Rule) -> int:
    return max(rule.bad_windows, revision.auto_promote_windows, 1)


def _run(seen: list[Window], verdict: str) -> int:
    """How many of the newest windows in a row have ``verdict``."""
    count = 0
    for window in seen:
        if window.judgement.verdict != verdict:
            break
        count += 1
    return count


def evaluate(revision: EndpointRevision, now: datetime | None = None, rule: Rule | None = None,
             stable: int | None = None, rows: list[Row] | None = None) -> str:
    """Judge one candidate now and act: "rolled_back", "promoted" or "kept".

    ``stable`` (its stable revision's number) and ``rows`` (its endpoint's rows over the windows) when the
    caller read them for many candidates at once (:func:`evaluate_all`); read here otherwise."""
    now = now or timezone.now()
    rule = rule or Rule.from_settings()
    endpoint = revision.endpoint
    if stable is None:
        stable = endpoint.revisions.filter(state=RevisionState.STABLE).values_list("number", flat=True).first()
    if stable is None or not revision.replicas:
        return "kept"  # not serving yet: nothing to compare
    if rows is None:
        rows = rows_of([endpoint.pk], *span(now, _count(revision, rule))).get(endpoint.pk, [])
    seen = windows(rows, revision.number, stable, now, _count(revision, rule), rule)
    bad, good = _run(seen, BAD), _run(seen, GOOD)
    if bad >= rule.bad_windows:
        decided = seen[:rule.bad_windows]
        verdict = {"by": "rule", "rule": {"error_delta": rule.error_delta, "latency_factor": rule.latency_factor,
                                          "min_requests": rule.min_requests, "bad_windows": rule.bad_windows},
                   "stable_revision": stable, "windows": [w.as_dict() for w in decided]}
        newest = decided[0]
        words = (f"rolled back revision {revision.number} on its own: {newest.judgement.why}, in "
                 f"{rule.bad_windows} consecutive 30 s windows (to {newest.end:%H:%M:%S} UTC)")
        return "rolled_back" if revisions.roll_back(endpoint, verdict, words, now) else "kept"
    if revision.auto_promote_windows and good >= revision.auto_promote_windows:
        verdict = {"by": "rule", "promoted_after_windows": good, "stable_revision": stable,
                   "windows": [w.as_dict() for w in seen[:revision.auto_promote_windows]]}
        try:
            revisions.promote(None, endpoint, verdict, now)
        except revisions.RolloutConflict:
            return "kept"
        return "promoted"
    if (revision.good_windows, revision.bad_windows) != (good, bad):  # written only when they move
        EndpointRevision.objects.filter(pk=revision.pk, state=RevisionState.CANARY).update(
            good_windows=good, bad_windows=bad)
    return "kept"


def evaluate_all(now: datetime | None = None) -> dict[str, str]:
    """Every live, admitted candidate, judged now: {endpoint ref: what was done}."""
    now = now or timezone.now()
    rule = Rule.from_settings()
    done = {}
    # An endpoint deleted (or failed) with its canary live serves nothing any more: nothing to judge.
    live = list(EndpointRevision.objects.filter(
        state=RevisionState.CANARY, replicas__gt=0, endpoint__state__in=InferenceEndpoint.HOLDING_STATES,
    ).select_related("endpoint__team", "endpoint__created_by", "endpoint__flavor"))
    if not live:
        return done
    # Three queries however many candidates: them, their stable revisions, and every row of their windows.
    ids = [rev.endpoint_id for rev in live]
    stables = dict(EndpointRevision.objects.filter(endpoint_id__in=ids, state=RevisionState.STABLE).values_list(
        "endpoint_id", "number"))
    rows = rows_of(ids, *span(now, max(_count(rev, rule) for rev in live)))
    for revision in live:
        done[revision.endpoint.ref] = evaluate(revision, now, rule, stables.get(revision.endpoint_id),
                                               rows.get(revision.endpoint_id, []))
    return done
