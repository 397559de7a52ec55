"""Leftover cleanup of a cluster's reconcile cycle (its step 5, :mod:`workloads.cycle.reconcile`):
delete what the cluster still holds of work that no longer needs it.

- objects of workloads that were ended, deleted, no longer exist, or now live on another
  cluster (:func:`delete_leftovers`), and what is left of ended work being removed
  (:func:`finish_removal`);
- objects of work failed because it could never run, whose pods still hold GPUs
  (:func:`delete_abandoned`);
- what outlives attempts (a run's checkpoint claim): set apart from the observation the cycle
  follows (:func:`set_apart_kept`), deleted once its workload has ended for good
  (:func:`delete_kept`).

Leftovers and kept objects are chosen by one query a moment before their delete, so each such
delete holds its workload's row and undoes no placement made meanwhile (:func:`_delete_unless`).
A delete that fails is logged, and the cycle goes on.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from cluster.backends.base import ClusterAddress, ObservedWorkload
from cluster.errors import ClusterError
from workloads.cycle import Home, Plan, ReconcileReport, unplaced_q
from workloads.identity import WorkloadId
from workloads.registry import WorkloadKind, kind_for, resource_kinds

logger = logging.getLogger(__name__)


def finish_removal(kind: WorkloadKind, backend, workload, obs: ObservedWorkload | None,
                    report: ReconcileReport) -> None:
    """An ended workload whose objects are being deleted: delete what is left, or call it gone."""
    if obs is not None:
        try:
            backend.delete(obs.address, kind.resources)
            report.orphans_deleted.append(obs.object_name)
        except ClusterError as exc:
            logger.warning("could not delete %s: %s", workload.ref, exc)
        return
    if kind.model.objects.filter(pk=workload.pk, state=kind.lifecycle.ended).update(state=kind.lifecycle.gone):
        report.transitions.append((workload.ref, str(workload.state), str(kind.lifecycle.gone)))


def delete_abandoned(backend, plan: Plan, report: ReconcileReport) -> None:
    """Delete the objects of work failed because it could never run (its image cannot be pulled).

    Unlike work that ended on its own, its pods are alive: scheduled, holding their nodes' GPUs
    and the team namespace's quota, retrying the pull forever. Nothing is lost: they never ran.
    """
    w = plan.workload
    try:
        backend.delete(w.address, plan.kind.resources)
        report.orphans_deleted.append(w.object_name)
    except ClusterError as exc:
        logger.warning("could not delete the abandoned %s: %s", w.ref, exc)


def set_apart_kept(observed: dict[tuple[str, str], ObservedWorkload]) -> dict[tuple[str, str], ClusterAddress]:
    """Take the objects that outlive attempts (a run's checkpoint claim) out of the observation.

    What the cycle follows is the attempt: a run between attempts has only its claim left, and
    is "not on the cluster" all the same (a preempted run is queued again once its Job is gone).
    Returns the addresses of the workloads that have such objects, for :func:`delete_kept`.
    """
    kept_kinds = {(r.api_version, r.kind) for r in resource_kinds() if r.kept_across_attempts}
    found: dict[tuple[str, str], ClusterAddress] = {}
    for key, obs in list(observed.items()):
        attempt = [o for o in obs.objects if (o.get("apiVersion"), o.get("kind")) not in kept_kinds]
        if len(attempt) == len(obs.objects):
            continue
        found[key] = obs.address
        obs.objects[:] = attempt
        if not attempt and not obs.pods:
            del observed[key]
    return found


def delete_kept(backend, home: Home, kept: dict[tuple[str, str], ClusterAddress], report: ReconcileReport) -> None:
    """Delete what outlived the attempts of workloads that have ended for good (final, ended by a
    user, or gone from the database), however they ended: on their own, failed at an apply, cancelled
    while queued between attempts, with a delete that was lost — or that now live on another cluster
    (resumed there after this one was lost: a claim is one cluster's). Never between attempts: a
    workload queued again is not ended. One query per kind that has such objects.

    Their other objects are not touched (a failed run's Job stays for its logs; its env Secret goes
    with any delete, and ended work reads no secret). A failed delete is tried again next cycle.
    """
    candidates: dict[WorkloadKind, dict[int, ClusterAddress]] = {}
    for address in kept.values():
        identity = WorkloadId.from_object_name(address.object_name)
        kind = kind_for(identity.prefix) if identity else None
        if kind is not None and address.object_name not in report.orphans_deleted:  # deleted whole just now
            candidates.setdefault(kind, {})[identity.pk] = address
    for kind, addresses in candidates.items():
        ended = (*kind.model.FINAL_STATES, *kind.lifecycle.removed)
        here = Q(cluster__isnull=True) | Q(cluster_id=home.cluster_id)  # not placed elsewhere since
        keep = ~Q(state__in=ended)
        if kind.lifecycle.pruned:
            # A pruned trial's checkpoint is kept a while (docs/sweeps.md "Pruning"): "continue trial" resumes from it.
            kept_since = timezone.now() - timedelta(days=settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS)
            keep |= Q(state=kind.lifecycle.pruned, finished_at__gte=kept_since)
        if kind.lifecycle.resumes:
            # Kept while work that resumes from them lives (a continued trial waiting for its first apply, which
            # relabels the claim as its own): from then on they follow that work's end, as its own would.
            resuming = kind.model.objects.exclude(state__in=ended).filter(**{f"{kind.lifecycle.resumes}__isnull": False})
            keep |= Q(pk__in=resuming.values(kind.lifecycle.resumes))
        live = kind.model.objects.filter(here).filter(keep)
        live_now = set(live.filter(pk__in=addresses).values_list("pk", flat=True))
        resources = tuple(replace(r, deleted=r.kept_across_attempts) for r in kind.resources)
        for pk, address in addresses.items():
            if pk in live_now:
                continue
            try:
                if _delete_unless(live, pk, backend, address, resources):
                    report.kept_deleted.append(address.object_name)
            except ClusterError as exc:
                logger.warning("could not delete what %s/%s kept across attempts: %s", address.namespace,
                               address.object_name, exc)


def delete_leftovers(backend, home: Home, leftovers: dict[tuple[str, str], ObservedWorkload],
                      report: ReconcileReport) -> None:
    """Delete cluster objects of workloads that were ended, deleted, no longer exist, or now live on
    another cluster (withdrawn before they started, or resumed elsewhere after this one was lost).

    Objects of workloads that finished on their own are kept (their logs and events stay
    readable); an end whose delete task was lost is finished here. A pruned one did not finish on its
    own: its stop deletes its attempt's objects, and what is still here (it was pruned while this cluster
    was lost: :func:`workloads.cycle.reconcile.observe_failed`) goes too — but not what outlives its
    attempts (its checkpoint claim, kept for "continue": :func:`delete_kept`'s rule).
    """
    candidates: dict[WorkloadKind, dict[int, ClusterAddress]] = {}
    for (namespace, name), _obs in leftovers.items():
        identity = WorkloadId.from_object_name(name)
        kind = kind_for(identity.prefix) if identity else None
        if kind is not None:
            candidates.setdefault(kind, {})[identity.pk] = ClusterAddress(namespace, name)
    for kind, addresses in candidates.items():
        # Work placed nowhere has no attempt on any cluster: waiting for its first apply, or queued
        # (again: off a lost cluster, or back from an apply no cluster could take) — objects of its
        # name are an earlier attempt's, and would clash with its next apply.
        pruned = (kind.lifecycle.pruned,) if kind.lifecycle.pruned else ()
        followed = kind.model.objects.filter(home.q()).exclude(state__in=(*kind.lifecycle.removed, *pruned)).exclude(
            unplaced_q(kind)).exclude(cluster__isnull=True, state=kind.lifecycle.queued)
        keep = set(followed.filter(pk__in=addresses).values_list("pk", flat=True))
        stopped_early = set(kind.model.objects.filter(pk__in=set(addresses) - keep, state__in=pruned)
                            .values_list("pk", flat=True)) if pruned else set()
        for pk, address in addresses.items():
            if pk in keep:
                continue
            resources = kind.attempt_resources if pk in stopped_early else kind.resources
            try:
                if _delete_unless(followed, pk, backend, address, resources):
                    report.orphans_deleted.append(address.object_name)
            except ClusterError as exc:
                logger.warning("could not delete leftover %s/%s: %s", address.namespace, address.object_name, exc)


def _delete_unless(keeps, pk: int, backend, address: ClusterAddress, resources) -> bool:
    """Delete workload ``pk``'s objects of ``resources`` at ``address`` unless ``pk`` is now among
    ``keeps``, holding the workload's row meanwhile; whether it deleted.

    The callers chose ``pk`` by one query a moment before, and a worker may since have placed the
    workload on this very cluster and applied its next attempt, whose objects have the old ones'
    names. Placement writes the row (a conditional update) before it applies, so with the row held
    a placement made since is seen here and its objects kept, and one made later waits for the
    delete to end before it applies. Taken only for what is deleted (rare), never for the cycle's rows.
    """
    with transaction.atomic():
        list(keeps.model.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True))
        if keeps.filter(pk=pk).exists():
            return False
        backend.delete(address, resources)
        return True
