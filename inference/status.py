"""An endpoint's state from its observation: its stable Deployment's (:func:`cluster.deployments.deployment_status`),
with what the candidate revision beside it adds (pure, Django-free, like the mapping it wraps).

A canary (docs/serving.md "Revisions, canary and rollback") runs as a second Deployment,
``<object name>-canary``, whose pods carry the track label ``canary``. The endpoint's state and words
are the stable Deployment's alone; both Deployments' running pods hold GPUs, so both are billed; the
status also says which revision the stable Deployment serves and how many of the candidate's
replicas are ready.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from cluster.backends.base import ObservedWorkload
from cluster.deployments import deployment_status
from cluster.status import Manifest, WorkloadStatus, as_int, running_units
from inference.manifests import CANARY_SUFFIX, REVISION_ANNOTATION, TRACK_CANARY, TRACK_LABEL


def _tracks(obs: ObservedWorkload) -> tuple[ObservedWorkload, Manifest | None]:
    """The stable part of an endpoint's observation (its own Deployment, Service, ScaledObject, HPA and
    stable pods) and the candidate's Deployment, if any (``<name>-canary``, pods labelled ``canary``)."""
    canary_name = obs.object_name + CANARY_SUFFIX
    canary = None
    objects = []
    for obj in obs.objects:
        if (obj.get("metadata") or {}).get("name") == canary_name:
            if obj.get("kind") == "Deployment":
                canary = obj
            continue
        objects.append(obj)
    pods = [p for p in obs.pods if ((p.get("metadata") or {}).get("labels") or {}).get(TRACK_LABEL) != TRACK_CANARY]
    if canary is None and len(objects) == len(obs.objects) and len(pods) == len(obs.pods):
        return obs, None
    return dataclasses.replace(obs, objects=objects, pods=pods), canary


def _revision(deployment: Manifest) -> int:
    """The revision the Deployment's template serves (its annotation; 0: not told)."""
    try:
        return int(((deployment.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) or 0)
    except ValueError:
        return 0


def endpoint_status(obs: ObservedWorkload, now: datetime | None = None,
                    image_pull_limit: float | None = None) -> WorkloadStatus | None:
    """The state of an inference endpoint, or None when its Deployment does not exist.

    Its stable Deployment's status (:func:`cluster.deployments.deployment_status`: scaled to zero,
    ready, degraded, deploying, failed, with the pull limit's verdict), billed for the running pods of
    both Deployments, with the revision the stable one serves and the candidate's ready replicas
    (None when there is no candidate).
    """
    stable_obs, canary = _tracks(obs)
    status = deployment_status(stable_obs, now, image_pull_limit)
    if status is None:
        return None
    canary_ready = as_int((canary.get("status") or {}).get("readyReplicas")) if canary is not None else None
    # Both Deployments' running pods hold GPUs: both are billed. Everything else is the stable one's.
    return dataclasses.replace(status, running_units=running_units(obs.pods),
                               revision=_revision(stable_obs.first("Deployment")), canary_ready=canary_ready)
