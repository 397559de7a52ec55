"""Cold-start timelines: each new replica of an endpoint, from Slipway's decision to its first answer.

Every new pod of an endpoint gets a :class:`~inference.models.ColdStart` row holding the instant of each
stage of :data:`~inference.constants.COLD_START_STAGES` it reached (docs/serving.md "Cold starts"):

* ``admitted`` — when Slipway decided the replica should exist (:func:`admitted_at`):

  - **from zero** (the endpoint was scaled to zero when the pod appeared; of several new pods, the oldest):
    the wake, which is the pod's creation — KEDA's activation scales the Deployment from 0 and its ReplicaSet creates the pod at once.
    The time a request waited at the gateway before that activation is the gateway's figure (its held
    requests), not the replica's;
  - **its first replicas** (no replica of its current attempt was ready before the pod's creation): the
    endpoint's admission (``admitted_at``), which reserved its minimum — the apply that follows and the
    cluster's reaction are the timeline's, a wait in the queue is not;
  - **a burst replica**: the latest ``burst_granted`` scaling decision at most :data:`GRANT_WINDOW` before
    the pod's creation that no other timeline took;
  - **any other new replica** (a scale-up within the granted ceiling, a rolling update's new pod, the
    replacement of a lost one): its creation, when the autoscaler's or the Deployment's decision made it;
* ``scheduled`` … ``ready`` — what the cluster shows (:mod:`cluster.startup`), written by the reconcile
  cycle (:func:`record`, through the kind's ``after_observation``); each stage keeps the first instant seen;
* ``first_byte`` — the gateway's first answer after a wake (:func:`record_first_byte`).

A replica that is not from zero is **complete** at ``ready``; one from zero at ``first_byte``.

**Attribution** (:func:`attribute`): a stage's duration is its instant minus the previous stage's when that
one was reached; the timeline's elapsed time runs from ``admitted`` to its last stage. Time that led to a
stage whose predecessors were not seen is **unattributed** — no stage explains it — and shown as such.

**Retention**: the newest :data:`KEEP` timelines of each endpoint; older ones are deleted by the cycle as
it records new ones (:func:`prune`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Func, JSONField, Value

from cluster.startup import ReplicaStart
from cluster.status import parse_time
from inference.constants import COLD_START_STAGES, EndpointState, RevisionState, ScalingDecision
from inference.models import ColdStart, EndpointRevision, InferenceEndpoint

#: Timelines kept per endpoint: the newest, as the cycle prunes (:func:`prune`).
KEEP = 200
#: How long before a pod's creation a burst grant may be what decided it: the grant's apply and the
#: autoscaler's reaction take seconds; older grants were followed by their own replicas.
GRANT_WINDOW = timedelta(minutes=2)
#: The label of time no stage explains, in the segments of a timeline.
UNATTRIBUTED = "unattributed"
#: What the page and the API call each stage.
STAGE_LABELS = {"admitted": "Admitted", "scheduled": "Scheduled on a node", "image_pulled": "Image pulled",
                "container_started": "Container started", "model_loaded": "Model loaded", "ready": "Ready",
                "first_byte": "First response byte", UNATTRIBUTED: "Unattributed"}


class _KeepFirst(Func):
    """``new || stages`` (PostgreSQL's jsonb concatenation: the right side wins): the stages already
    recorded keep their first instant, whatever a later observation or the gateway writes."""

    template = "(%(expressions)s)"
    arg_joiner = " || "
    output_field = JSONField()

    def as_sqlite(self, compiler, connection, **extra_context):
        # SQLite's || joins text; its JSON1 json_patch(target, patch) merges objects (RFC 7396), the
        # patch winning: applying the recorded stages as the patch keeps their first instants too.
        return self.as_sql(compiler, connection, function="json_patch", template="%(function)s(%(expressions)s)",
                           arg_joiner=", ", **extra_context)


def _merged(new: dict[str, str]) -> _KeepFirst:
    return _KeepFirst(Value(new, output_field=JSONField()), F("stages"))


def _iso(instants: dict[str, datetime]) -> dict[str, str]:
    return {stage: at.isoformat() for stage, at in instants.items()}


# -- attribution (pure) ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attribution:
    """Where a timeline's seconds went: ``segments`` in order, each a stage (or :data:`UNATTRIBUTED`) and
    its seconds; ``elapsed`` from ``admitted`` to the last stage reached."""

    segments: tuple[tuple[str, float], ...]
    elapsed: float

    @property
    def durations(self) -> dict[str, float]:
        return {stage: seconds for stage, seconds in self.segments if stage != UNATTRIBUTED}

    @property
    def unattributed(self) -> float:
        return sum(seconds for stage, seconds in self.segments if stage == UNATTRIBUTED)

    @property
    def attributed_share(self) -> float:
        """The part of the elapsed seconds named stages explain (1 when no time elapsed)."""
        if self.elapsed <= 0:
            return 1.0
        return max(0.0, 1.0 - self.unattributed / self.elapsed)


def attribute(instants: dict[str, datetime]) -> Attribution:
    """The attribution of a timeline's instants (docs/serving.md "Cold starts": the rule).

    An instant earlier than one before it (the portal's and the cluster's clocks differ by a little, the
    cluster writes whole seconds) counts from the latest instant so far: a stage never takes negative
    time, and the segments always sum to the elapsed time. A stage reached after stages never seen gets
    no duration: the time since the last one seen is unattributed.
    """
    start = instants.get("admitted")
    if start is None:
        return Attribution((), 0.0)
    segments: list[tuple[str, float]] = []
    latest, previous_seen = start, True
    for stage in COLD_START_STAGES[1:]:
        at = instants.get(stage)
        if at is None:
            previous_seen = False
            continue
        gap = max((at - latest).total_seconds(), 0.0)
        segments.append((stage if previous_seen else UNATTRIBUTED, gap))
        latest, previous_seen = max(latest, at), True
    return Attribution(tuple(segments), (latest - start).total_seconds())


def instants_of(stages: dict[str, str]) -> dict[str, datetime]:
    """A row's stages as datetimes, in the stages' order (unknown or malformed entries left out)."""
    parsed = {stage: parse_time(stages.get(stage)) for stage in COLD_START_STAGES}
    return {stage: at for stage, at in parsed.items() if at is not None}


def quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``values`` (None when empty): a value that occurred."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


# -- recording (the reconcile cycle) ---------------------------------------------------------------------------


def _revision(endpoint: InferenceEndpoint) -> int:
    """The endpoint's newest live revision (its pods carry none: the one a new replica most likely runs)."""
    number = (EndpointRevision.objects.filter(endpoint=endpoint)
              .exclude(state__in=(RevisionState.RETIRED, RevisionState.ROLLED_BACK))
              .order_by("-number").values_list("number", flat=True).first())
    return number or 1


@dataclass
class _History:
    """What deciding a new replica's ``admitted`` reads, once per observation that shows new pods."""

    readies: list[datetime]  #: when the endpoint's replicas of its current attempt became ready
    grants: list[datetime]  #: burst grants recent enough to have decided a new pod, oldest first
    claimed: set[datetime]  #: the ``admitted`` instants timelines took already
    woke: bool = False  #: a new replica of this observation woke the endpoint (the first one: the others follow it)


def _history(endpoint: InferenceEndpoint, starts: Iterable[ReplicaStart]) -> _History:
    rows = list(ColdStart.objects.filter(endpoint=endpoint).values_list("started_at", "stages")[:KEEP])
    since = endpoint.admitted_at
    readies = [at for started, stages in rows if since is None or started >= since
               if (at := parse_time(stages.get("ready"))) is not None]
    created = [s.created for s in starts if s.created is not None]
    grants = []
    if created:
        grants = list(endpoint.scaling_events.filter(decision=ScalingDecision.BURST_GRANTED,
                                                     at__gte=min(created) - GRANT_WINDOW)
                      .order_by("at").values_list("at", flat=True))
    claimed = {at for _started, stages in rows if (at := parse_time(stages.get("admitted"))) is not None}
    return _History(readies, grants, claimed)


def admitted_at(endpoint: InferenceEndpoint, start: ReplicaStart, past: _History, now: datetime
                ) -> tuple[datetime, bool]:
    """When Slipway decided ``start``'s replica should exist, and whether it woke the endpoint from zero
    (the module's rule). ``endpoint`` is as the cycle read it, before this observation."""
    created = start.created or start.stages.get("scheduled") or now
    asleep = endpoint.state == EndpointState.SCALED_TO_ZERO
    if asleep and not past.woke:
        past.woke = True  # the oldest new pod is the wake's; others the autoscaler added since are scale-ups
        return created, True
    admitted = endpoint.admitted_at
    if (not asleep and admitted is not None and admitted <= created
            and not any(ready <= created for ready in past.readies)):
        return admitted, False
    for grant in reversed(past.grants):
        if created - GRANT_WINDOW <= grant <= created and grant not in past.claimed:
            past.claimed.add(grant)
            return grant, False
    return created, False


def record(endpoint: InferenceEndpoint, starts: Sequence[ReplicaStart], now: datetime) -> int:
    """Write what one observation shows of the endpoint's starting replicas: a timeline for each new one,
    the stages the known ones reached since. Returns how many timelines were created.

    Costs nothing for an endpoint none of whose replicas is starting (``starts`` is empty), one query when
    nothing is new, and a few more when a replica is.
    """
    if not starts:
        return 0
    known = {row.pod: row for row in ColdStart.objects.filter(endpoint=endpoint, pod__in=[s.pod for s in starts])
             .only("pk", "pod", "from_zero", "stages", "complete")}
    fresh = [s for s in starts if s.pod not in known]
    for start in starts:
        row = known.get(start.pod)
        if row is None:
            continue
        missing = {stage: at for stage, at in start.stages.items() if stage not in row.stages}
        if not missing:
            continue
        changes: dict = {"stages": _merged(_iso(missing))}
        if not row.from_zero and "ready" in {*missing, *row.stages}:
            changes["complete"] = True  # a replica not from zero is complete once ready
        ColdStart.objects.filter(pk=row.pk).update(**changes)
    if not fresh:
        return 0
    past = _history(endpoint, fresh)
    revision = None
    rows = []
    for start in fresh:
        admitted, from_zero = admitted_at(endpoint, start, past, now)
        if start.revision is None and revision is None:
            revision = _revision(endpoint)
        instants = {"admitted": admitted, **start.stages}
        rows.append(ColdStart(endpoint=endpoint, pod=start.pod[:253], revision=start.revision or revision or 1,
                              from_zero=from_zero, started_at=admitted, stages=_iso(instants),
                              complete=not from_zero and "ready" in instants))
    created = len(ColdStart.objects.bulk_create(rows, ignore_conflicts=True))
    prune(endpoint)
    return created


def prune(endpoint: InferenceEndpoint, keep: int = KEEP) -> int:
    """Delete the endpoint's timelines beyond its newest ``keep``; how many went."""
    stale = list(ColdStart.objects.filter(endpoint=endpoint).values_list("pk", flat=True)[keep:])
    if not stale:
        return 0
    return ColdStart.objects.filter(pk__in=stale).delete()[0]


def record_first_byte(endpoint_id: int, at: datetime) -> None:
    """The gateway sent the first byte of an answer at ``at`` after a wake from zero: the newest timeline of
    the endpoint that woke it (``from_zero``) and has no first byte yet, begun by ``at``, gets it and is
    complete. Nothing when there is none (the endpoint was not woken, or that first byte was recorded).

    Synchronous (the ORM): an asynchronous gateway calls it from a thread. Safe to call twice and alongside
    the cycle: the first byte recorded stays, and the cycle's stages never overwrite it.
    """
    pk = (ColdStart.objects.filter(endpoint_id=endpoint_id, from_zero=True, started_at__lte=at)
          .exclude(stages__has_key="first_byte").order_by("-started_at", "-pk").values_list("pk", flat=True).first())
    if pk is None:
        return
    ColdStart.objects.filter(pk=pk).exclude(stages__has_key="first_byte").update(
        stages=_merged({"first_byte": at.isoformat()}), complete=True)


# -- reading (the page and the API) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeline:
    """One timeline as the page and the API show it."""

    row: ColdStart
    instants: dict[str, datetime]
    attribution: Attribution

    @property
    def to_ready(self) -> float | None:
        """Seconds from ``admitted`` to ``ready`` (None before it is ready)."""
        ready = self.instants.get("ready")
        return (ready - self.instants["admitted"]).total_seconds() if ready and "admitted" in self.instants else None


def timeline(row: ColdStart) -> Timeline:
    instants = instants_of(row.stages)
    return Timeline(row, instants, attribute(instants))


def timelines(endpoint: InferenceEndpoint, limit: int) -> list[Timeline]:
    """The endpoint's newest ``limit`` timelines, newest first."""
    return [timeline(row) for row in endpoint.cold_starts.all()[:limit]]


@dataclass(frozen=True)
class StageFigures:
    """A stage's durations over the endpoint's history: median and 95th percentile, and how many."""

    stage: str
    p50: float | None
    p95: float | None
    samples: int

    @property
    def label(self) -> str:
        return STAGE_LABELS.get(self.stage, self.stage)


#: The figures over whole timelines, beside the stages': admitted → ready, admitted → first byte.
TO_READY, TO_FIRST_BYTE = "to_ready", "to_first_byte"


@dataclass(frozen=True)
class History:
    """p50/p95 per stage over an endpoint's kept timelines, and of the time to ready and to the first byte."""

    stages: tuple[StageFigures, ...]
    to_ready: StageFigures
    to_first_byte: StageFigures
    complete: int  #: complete timelines (the form's hint waits for one)

    @property
    def hint_seconds(self) -> float | None:
        """What the form's cold-start hint says a new replica takes: the median time to ready over complete
        timelines, None until there is one."""
        return self.to_ready.p50 if self.complete else None


def _figures(stage: str, values: list[float]) -> StageFigures:
    return StageFigures(stage, quantile(values, 0.5), quantile(values, 0.95), len(values))


def history(endpoint: InferenceEndpoint) -> History:
    """The endpoint's figures over every timeline it keeps (at most :data:`KEEP`): one query."""
    per_stage: dict[str, list[float]] = {stage: [] for stage in COLD_START_STAGES[1:]}
    to_ready: list[float] = []
    to_first_byte: list[float] = []
    complete = 0
    for stages, done in endpoint.cold_starts.values_list("stages", "complete")[:KEEP]:
        instants = instants_of(stages)
        for stage, seconds in attribute(instants).durations.items():
            per_stage[stage].append(seconds)
        start = instants.get("admitted")
        if start is not None and "ready" in instants:
            to_ready.append(max((instants["ready"] - start).total_seconds(), 0.0))
        if start is not None and "first_byte" in instants:
            to_first_byte.append(max((instants["first_byte"] - start).total_seconds(), 0.0))
        complete += bool(done)
    return History(tuple(_figures(stage, values) for stage, values in per_stage.items()),
                   _figures(TO_READY, to_ready), _figures(TO_FIRST_BYTE, to_first_byte), complete)
