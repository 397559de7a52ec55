"""Revisions of an endpoint's serving spec, and the rollouts that move traffic between them
(docs/serving.md "Revisions, canary and rollback").

A **revision** is one version of the fields that decide what answers a request: image, command, args
and env (so the model). Creating an endpoint makes revision 1; an edit that changes any of them makes
N+1, other edits (replicas, autoscaling, secret env) make none. The edit says how it rolls out:

* **replace** (the default): the endpoint's Deployment takes the new spec and rolls as it always did.
  The new revision is ``rolling`` (it takes all the traffic: one Deployment serves it), and becomes
  ``stable`` once an observation shows the Deployment rolled out to it; the old one is ``retired``.
* **canary** at a ``weight`` (1–50 %): the endpoint keeps its spec (the stable revision), and the
  candidate runs beside it as ``<object_name>-canary`` with
  ``max(1, ceil(weight % × the stable's ready replicas))`` replicas, whose units come from the team's
  free quota like a burst replica (:func:`admit_candidate`; refused, the candidate waits with the
  quota's words in its ``reason`` and is asked again every cycle). The gateway sends it ``weight`` % of
  the requests once it is admitted (:func:`live_targets`). :mod:`inference.canary` compares it with the
  stable one and rolls it back (:func:`roll_back`) or promotes it (:func:`promote`).

Promotion gives the stable Deployment the candidate's spec (a rolling update): the candidate becomes
``rolling`` at weight 100 and the old stable ``retired``; once the rollout is observed complete
(:func:`follow`) it is ``stable``, and the candidate's objects are deleted and its units released.

Every move is a conditional update of the revision's state, under the team's admission lock whenever
units move, so two evaluators (or a user and an evaluator) make one move.
"""

from __future__ import annotations

import contextlib
import math
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from core.queueing import publish_on_commit
from inference import cleanup, histogram
from inference.constants import REVISION_ROLLED_BACK, RevisionState, Rollout
from inference.manifests import canary_name
from inference.models import EndpointRevision, InferenceEndpoint, TrafficWindow
from inference.specs import CanarySpec
from quotas import admission
from teams.services import lock_team
from workloads import lifecycle
from workloads.constants import SIM_GPU_MEMORY_ENV
from workloads.events import workload_moved
from workloads.services import enqueue_apply

#: The fields a revision holds: a change of any of them is a new revision.
SERVING_FIELDS = ("image", "command", "args", "env")
#: Revisions that may serve (weight > 0): the stable one, a rolling one, a candidate.
LIVE_STATES = (RevisionState.STABLE, RevisionState.ROLLING, RevisionState.CANARY)


class RolloutConflict(Exception):
    """The endpoint's revisions do not allow the action (the API answers 409)."""


def serving_spec(endpoint: InferenceEndpoint) -> dict:
    """The endpoint's serving fields as a revision keeps them."""
    return {"image": endpoint.image, "command": list(endpoint.command), "args": list(endpoint.args),
            "env": dict(endpoint.env)}


def first_revision(endpoint: InferenceEndpoint, user, now: datetime) -> EndpointRevision:
    """Revision 1 of a new endpoint (unsaved: written with its admission): stable, all the traffic."""
    return EndpointRevision(endpoint=endpoint, number=1, spec=serving_spec(endpoint), state=RevisionState.STABLE,
                            rollout=Rollout.REPLACE, weight=100, created_at=now, created_by=user)


def canary_replicas(weight: int, stable_ready: int) -> int:
    """A candidate's replicas: its share of the stable's ready replicas, rounded up, at least one."""
    return max(1, math.ceil(weight * stable_ready / 100))


def candidate(endpoint: InferenceEndpoint) -> EndpointRevision | None:
    """The revision in canary, if any (at most one: :func:`start` refuses a second)."""
    return endpoint.revisions.filter(state=RevisionState.CANARY).first()


def held_replicas(endpoint: InferenceEndpoint) -> int:
    """Replicas whose units the endpoint holds for a candidate, beyond its ceiling."""
    return EndpointRevision.objects.filter(endpoint_id=endpoint.pk).holding().aggregate(n=Sum("replicas"))["n"] or 0


def held_units(endpoint: InferenceEndpoint, ceiling: int | None = None) -> int:
    """What the endpoint's quota hold counts: its ceiling (or ``ceiling``) and its candidate's replicas."""
    return ((endpoint.ceiling if ceiling is None else ceiling) + held_replicas(endpoint)) * endpoint.gpus_per_replica


def deployment_revision(endpoint: InferenceEndpoint) -> int:
    """The revision the endpoint's own Deployment serves: the rolling one while it rolls, else the stable one."""
    row = endpoint.revisions.filter(state__in=(RevisionState.ROLLING, RevisionState.STABLE)).order_by(
        "-number").values_list("number", flat=True).first()
    return row or 0


def canary_spec(endpoint: InferenceEndpoint) -> CanarySpec | None:
    """The candidate's objects to render: an admitted candidate's (or a promoted one's until it rolled out)."""
    rev = endpoint.revisions.holding().order_by("-number").first()
    if rev is None:
        return None
    spec = rev.spec
    env = dict(spec.get("env") or {})
    if endpoint.gpu_memory_gb is not None and SIM_GPU_MEMORY_ENV not in env:
        env[SIM_GPU_MEMORY_ENV] = f"{endpoint.gpu_memory_gb:g}"  # as Workload.pod_env gives the stable pods
    return CanarySpec(revision=rev.number, image=spec["image"], replicas=rev.replicas,
                      command=tuple(spec.get("command") or ()), args=tuple(spec.get("args") or ()),
                      env=tuple(sorted(env.items())))


def live_targets(endpoint: InferenceEndpoint) -> list[tuple[int, int, str]]:
    """Where the gateway sends the endpoint's requests: ``(revision, weight %, Service name)``; weights sum to 100.

    The endpoint's own Service serves its stable (or rolling) revision; an admitted candidate's Service
    (``<object_name>-canary``) takes its weight from it. A candidate not admitted yet takes nothing.
    """
    return targets_of(endpoint.object_name, live_rows([endpoint.pk]).get(endpoint.pk, []))


def live_rows(endpoint_ids) -> dict[int, list[tuple]]:
    """The live revisions of these endpoints in one query: ``{endpoint id: [(number, state, weight, replicas)]}``
    (the route table reads every endpoint's each second)."""
    rows: dict[int, list[tuple]] = {}
    for endpoint_id, *row in (EndpointRevision.objects.filter(endpoint_id__in=endpoint_ids, state__in=LIVE_STATES)
                              .values_list("endpoint_id", "number", "state", "weight", "replicas")):
        rows.setdefault(endpoint_id, []).append(tuple(row))
    return rows


def targets_of(object_name: str, rows) -> list[tuple[int, int, str]]:
    """The rule of :func:`live_targets` over an endpoint's live revision rows (pure)."""
    main = max((number for number, state, _w, _r in rows if state == RevisionState.ROLLING), default=None)
    if main is None:
        main = max((number for number, state, _w, _r in rows if state == RevisionState.STABLE), default=None)
    if main is None:
        return []
    canary = next(((number, weight) for number, state, weight, replicas in rows
                   if state == RevisionState.CANARY and replicas > 0 and weight > 0), None)
    if canary is None:
        return [(main, 100, object_name)]
    return [(main, 100 - canary[1], object_name), (canary[0], canary[1], canary_name(object_name))]


def _next_number(endpoint: InferenceEndpoint) -> int:
    return (EndpointRevision.objects.filter(endpoint_id=endpoint.pk).aggregate(n=Max("number"))["n"] or 0) + 1


def serving_changes(current: InferenceEndpoint, changes: dict) -> dict:
    """Those of ``changes`` that change a serving field of ``current`` (the ones that make a revision)."""
    return {name: changes[name] for name in SERVING_FIELDS
            if name in changes and changes[name] != getattr(current, name)}


def start(user, current: InferenceEndpoint, serving: dict, rollout: str, weight: int | None,
          auto_promote_windows: int, now: datetime) -> EndpointRevision:
    """Record revision N+1 of ``current`` (locked by the caller, with its team) for the ``serving`` changes.

    Replace: the caller sets the fields on the endpoint (its Deployment rolls). Canary: the endpoint keeps
    its fields; the candidate is admitted now if the quota allows (else it waits, asked every cycle).
    Raises :class:`RolloutConflict` while a candidate is live (promote or roll it back first), and for a
    canary while a revision is rolling out: the endpoint's Service serves the rolling revision, so the stable
    one the rule compares a candidate with answers no request, and no window would ever give a verdict.
    """
    if candidate(current) is not None:
        raise RolloutConflict("A canary revision is live: promote it or roll it back before another rollout.")
    rolling = current.revisions.filter(state=RevisionState.ROLLING)
    if rollout == Rollout.CANARY:
        rolling_number = rolling.order_by("-number").values_list("number", flat=True).first()
        if rolling_number is not None:
            raise RolloutConflict(f"Revision {rolling_number} is still rolling out: start the canary once it is stable "
                                  f"(a canary is compared with the stable revision, which serves nothing meanwhile).")
    spec = {**serving_spec(current), **serving}
    number = _next_number(current)
    if rollout == Rollout.CANARY:
        revision = EndpointRevision.objects.create(
            endpoint=current, number=number, spec=spec, state=RevisionState.CANARY, rollout=Rollout.CANARY,
            weight=weight, auto_promote_windows=auto_promote_windows, created_at=now, created_by=user)
        admit_candidate(current, revision)
        return revision
    # A replace supersedes one still rolling: the Deployment now rolls to the newest spec. A promoted candidate
    # still holds its replicas (its units, its objects) until its rollout is done, which now never comes: they
    # go back here, as that rollout's end would have given them (the caller holds the team's lock).
    held = rolling.filter(replicas__gt=0).exists()
    rolling.update(state=RevisionState.RETIRED, weight=0, replicas=0, ended_at=now)
    if held:
        _release(current, now)
    current.revisions.filter(state=RevisionState.STABLE).update(weight=0)
    return EndpointRevision.objects.create(
        endpoint=current, number=number, spec=spec, state=RevisionState.ROLLING, rollout=Rollout.REPLACE, weight=100,
        created_at=now, created_by=user)


def admit_candidate(endpoint: InferenceEndpoint, revision: EndpointRevision) -> bool:
    """Grant the candidate its replicas' units from the team's free quota (as a burst replica's), or say why not.

    Runs under the team's admission lock (taken here when the caller has not), on the endpoint's row as it
    is then (:meth:`InferenceEndpoint.relock`: the reconcile cycle's copy may be older than a PATCH of its
    ceiling or its end). True when admitted now; its objects are applied after commit. Refused, its
    ``reason`` holds the quota's words; an endpoint ended meanwhile has nothing to admit.
    """
    if endpoint.state not in InferenceEndpoint.HOLDING_STATES:
        # Not on a cluster yet (queued): it is asked again once the endpoint runs.
        words = "waiting for the endpoint to be admitted"
        EndpointRevision.objects.filter(pk=revision.pk, state=RevisionState.CANARY, replicas=0).exclude(
            reason=words).update(reason=words)
        return False
    with transaction.atomic():
        lock_team(endpoint.team)
        if not endpoint.relock():
            return False  # ended meanwhile: its hold went with it
        replicas = canary_replicas(revision.weight, endpoint.replicas)
        units = held_units(endpoint) + replicas * endpoint.gpus_per_replica
        try:
            decision = admission.resize(endpoint.team, endpoint.ref, units, burst=True)
        except LookupError:
            return False  # its hold was released (its end): nothing to admit
        if not decision.admitted:
            words = f"waiting for quota: {decision.reason.words}"[:500]
            EndpointRevision.objects.filter(pk=revision.pk, state=RevisionState.CANARY, replicas=0).exclude(
                reason=words).update(reason=words)
            revision.reason = words
            return False
        moved = EndpointRevision.objects.filter(pk=revision.pk, state=RevisionState.CANARY, replicas=0).update(
            replicas=replicas, reason="")
        if not moved:
            # Rolled back (or admitted by another cycle) meanwhile: give the units back at once.
            admission.resize(endpoint.team, endpoint.ref, held_units(endpoint))
            return False
        revision.replicas, revision.reason = replicas, ""
        # The live revisions' weights sum to 100: the stable one serves what the candidate does not.
        endpoint.revisions.filter(state=RevisionState.STABLE).update(weight=100 - revision.weight)
        enqueue_apply(endpoint.identity)
    return True


def promote(user, endpoint: InferenceEndpoint, verdict: dict, now: datetime | None = None) -> EndpointRevision:
    """Promote the candidate: the stable Deployment takes its spec and rolls; it becomes ``rolling`` at
    weight 100 and the old stable ``retired``. Raises :class:`RolloutConflict` when there is no candidate, and
    when the endpoint ended: its row is read under the team's lock, which a delete takes too, so a promote that
    read the endpoint before a delete landed never gives a deleted endpoint a new spec and a rolling revision."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_team(endpoint.team)
        current = InferenceEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if current.state not in InferenceEndpoint.ACTIVE_STATES:
            raise RolloutConflict(f"The endpoint is {current.state}; it can no longer be changed.")
        rev = candidate(current)
        if rev is None:
            raise RolloutConflict("There is no canary revision to promote.")
        if not EndpointRevision.objects.filter(pk=rev.pk, state=RevisionState.CANARY).update(
                state=RevisionState.ROLLING, weight=100, verdict=verdict):
            raise RolloutConflict("The canary revision was rolled back or promoted meanwhile.")
        current.revisions.filter(state__in=(RevisionState.STABLE, RevisionState.ROLLING)).exclude(pk=rev.pk).update(
            state=RevisionState.RETIRED, weight=0, ended_at=now)
        for name in SERVING_FIELDS:
            setattr(current, name, rev.spec.get(name, getattr(current, name)))
        current.save(update_fields=list(SERVING_FIELDS))
        enqueue_apply(current.identity)
    rev.refresh_from_db()
    return rev


def roll_back(endpoint: InferenceEndpoint, verdict: dict, words: str, now: datetime | None = None) -> EndpointRevision | None:
    """Take the candidate out: weight 0, ``rolled_back`` with ``verdict``, its units released, its objects
    deleted after commit, an event (told to the owner). None when there was no candidate to move (another
    evaluator or a user moved it first: one rollback, one event)."""
    now = now or timezone.now()
    with transaction.atomic():
        lock_team(endpoint.team)
        rev = candidate(endpoint)
        if rev is None:
            return None
        if not EndpointRevision.objects.filter(pk=rev.pk, state=RevisionState.CANARY).update(
                state=RevisionState.ROLLED_BACK, weight=0, replicas=0, verdict=verdict, ended_at=now, reason=""):
            return None
        endpoint.revisions.filter(state=RevisionState.STABLE).update(weight=100)
        if rev.replicas:
            _release(endpoint, now)
        workload_moved.send(sender=InferenceEndpoint, workload=endpoint, state=REVISION_ROLLED_BACK,
                            reason=words, at=now)
    rev.refresh_from_db()
    return rev


def end_with_endpoint(endpoint: InferenceEndpoint, verdict: dict, now: datetime) -> None:
    """The endpoint ended (deleted, failed): its candidate ends with it, in the end's transaction.

    A candidate is taken out as a rollback takes it (``rolled_back``, weight 0, ``verdict`` saying it went with
    its endpoint), and a promoted one still rolling out holds its replicas no more. Its units went with the
    endpoint's hold and its objects go with the endpoint's (they carry its workload label), so nothing is
    released or deleted here, and no rollback event is told: nobody's rollout was undone under them. Left
    ``canary``, it was never judged again (the rule judges running endpoints only) and showed as live for ever.
    """
    ended = EndpointRevision.objects.filter(endpoint_id=endpoint.pk, state=RevisionState.CANARY).update(
        state=RevisionState.ROLLED_BACK, weight=0, replicas=0, verdict=verdict, ended_at=now, reason="")
    if ended:
        EndpointRevision.objects.filter(endpoint_id=endpoint.pk, state=RevisionState.STABLE).update(weight=100)
    EndpointRevision.objects.filter(endpoint_id=endpoint.pk, state=RevisionState.ROLLING, replicas__gt=0).update(
        replicas=0)


def on_endpoint_moved(sender, workload: InferenceEndpoint, state: str, reason: str, at: datetime, **kwargs) -> None:
    """``workloads.events.workload_moved`` of an endpoint: failed (the cycle saw it so, an apply the cluster
    refused), its candidate ends with it as with a delete (:func:`end_with_endpoint`; a delete calls it itself:
    a user's end sends no signal)."""
    if state in InferenceEndpoint.FINAL_STATES:
        end_with_endpoint(workload, {"at": at.isoformat(), "ended": state}, at)


def _release(endpoint: InferenceEndpoint, now: datetime) -> None:
    """Give the candidate's units back (the caller holds the team's lock and has zeroed its replicas) and
    have its objects deleted after commit; its pods are billed no more. The hold keeps the ceiling its
    row has now (:meth:`InferenceEndpoint.relock`), not the one of the caller's copy."""
    if endpoint.relock():
        with contextlib.suppress(LookupError):  # the endpoint ended meanwhile: its hold went with it
            admission.resize(endpoint.team, endpoint.ref, held_units(endpoint))
        lifecycle.cap_billing(endpoint, held_units(endpoint), now)
    publish_on_commit(cleanup.delete_candidate, endpoint.pk)


def follow(endpoint: InferenceEndpoint, revision: int, rolled_out: bool, canary_ready: int | None,
           now: datetime) -> None:
    """What an observation of the endpoint means for its revisions (the reconcile cycle, after its moves):

    * its Deployment rolled out to the rolling revision → that one is ``stable``, earlier ones ``retired``;
      a promoted candidate's objects are deleted and its units released;
    * a candidate waiting for quota is asked again;
    * an admitted candidate whose Deployment the cluster does not have is applied again: a rollback's delete
      that ran after the next candidate's apply (two tasks in flight keep no order), objects deleted by hand;
    * candidate objects that no revision holds (a delete that was lost) are deleted again.
    """
    rolling = endpoint.revisions.filter(state=RevisionState.ROLLING).order_by("-number").first()
    if rolling is not None and rolled_out and revision == rolling.number:
        with transaction.atomic():
            lock_team(endpoint.team)
            if EndpointRevision.objects.filter(pk=rolling.pk, state=RevisionState.ROLLING).update(
                    state=RevisionState.STABLE, weight=100, replicas=0):
                endpoint.revisions.filter(state=RevisionState.STABLE).exclude(pk=rolling.pk).update(
                    state=RevisionState.RETIRED, weight=0, ended_at=now)
                if rolling.replicas:
                    _release(endpoint, now)
        return
    waiting = candidate(endpoint)
    if waiting is not None and not waiting.replicas:
        admit_candidate(endpoint, waiting)
        return
    if waiting is not None and canary_ready is None:
        enqueue_apply(endpoint.identity)  # idempotent: one more apply in the moment before the first lands
        return
    if canary_ready is not None and not held_replicas(endpoint):
        publish_on_commit(cleanup.delete_candidate, endpoint.pk)


#: The window of the figures each revision shows (the page, the API, the CLI).
FIGURES_SECONDS = 300


def traffic_figures(endpoint: InferenceEndpoint, now: datetime | None = None) -> dict[int, dict]:
    """Each revision's traffic over the last :data:`FIGURES_SECONDS` from the gateways' 10 s rows:
    ``{number: {"requests", "errors_5xx", "error_rate", "p95_ms"}}`` (two queries, whatever the revisions)."""
    now = now or timezone.now()
    rows = TrafficWindow.objects.filter(endpoint_id=endpoint.pk, step=10,
                                        start__gte=now - timedelta(seconds=FIGURES_SECONDS))
    out: dict[int, dict] = {}
    for row in rows.values("revision").annotate(requests=Sum("requests"), errors=Sum("status_5xx")):
        requests, errors = row["requests"] or 0, row["errors"] or 0
        out[row["revision"]] = {"requests": requests, "errors_5xx": errors,
                                "error_rate": round(errors / requests, 4) if requests else None, "p95_ms": None}
    latencies: dict[int, list] = {}
    for number, counts in rows.values_list("revision", "latency"):
        latencies.setdefault(number, []).append(counts)
    for number, histograms in latencies.items():
        p95 = histogram.quantile(histogram.merge(histograms), 0.95)
        if number in out:
            out[number]["p95_ms"] = None if p95 is None else round(p95, 1)
    return out
