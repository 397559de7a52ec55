"""The candidate's delete: a task of its own module, which :mod:`inference.revisions` publishes (the beat's
tasks in :mod:`inference.tasks` import the rule, which imports the revisions: no cycle)."""

from __future__ import annotations

from celery import shared_task

import fleet.services as fleet
from cluster.errors import Transient
from inference.manifests import canary_name
from inference.models import EndpointRevision, InferenceEndpoint
from workloads.registry import kind_of

RETRY = {"autoretry_for": (Transient,), "retry_backoff": 2, "retry_backoff_max": 30, "retry_jitter": True,
         "max_retries": 5}


@shared_task(ignore_result=True, **RETRY)
def delete_candidate(pk: int) -> int:
    """Delete the endpoint's candidate objects (``<object_name>-canary``: Deployment and Service) on its cluster.

    Safe to run twice (what is gone is no error); a lost run is made up by the reconcile cycle, which asks
    again while it sees candidate objects no revision holds (inference.revisions.follow).

    Not while a revision holds them: the objects' names are the endpoint's, not the revision's, so a rollback
    followed at once by the next canary publishes this delete and that one's apply, and the two keep no
    order — run second, this delete took the new candidate's objects, which held its units and served nothing. What
    slips past this check (the apply landing between it and the delete) the reconcile cycle applies again."""
    endpoint = InferenceEndpoint.objects.select_related("team").filter(pk=pk).first()
    if endpoint is None or endpoint.cluster_id is None:
        return 0
    if EndpointRevision.objects.filter(endpoint_id=pk).holding().exists():
        return 0
    name = canary_name(endpoint.object_name)
    kinds = [r for r in kind_of(endpoint).resources if r.kind in ("Deployment", "Service")]
    return fleet.backend_at(endpoint.cluster_id).delete_objects(endpoint.namespace, [(k, name) for k in kinds])
