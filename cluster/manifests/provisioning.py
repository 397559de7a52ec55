"""An atomic pool's provisioning objects (docs/pools.md): a ``ProvisioningRequest`` and its ``PodTemplate`` s.

On an ``atomic`` pool (:mod:`cluster.pools`) Slipway asks Cluster Autoscaler for all of a workload's nodes at
once before it creates the workload: an ``autoscaling.x-k8s.io/v1 ProvisioningRequest`` of the
``best-effort-atomic-scale-up`` class, whose pod sets refer to ``v1 PodTemplate`` objects of the pods that will
come (the autoscaler simulates scheduling them on nodes it would add, and adds all of those nodes or none). Once
the request is ``Provisioned`` the workload is applied with the consume annotations on its pods, which tie them
to the capacity the request booked (it stays booked ``ValidUntilSeconds``, then the request is
``BookingExpired``).

Three pure functions, for whichever kind's objects (they read the rendered objects, not a kind's spec):

* :func:`pod_sets`: the pod templates of a workload's GPU pods and how many pods of each;
* :func:`build_provisioning`: the PodTemplates and the request for them;
* :func:`consuming`: the workload's objects with the consume annotations on every GPU pod template.

Only pods that request a GPU extended resource count: a node of a GPU pool is what the request asks for, and
pods without a GPU do not land there.
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.manifests.common import Manifest
from cluster.nvidia import GPU_RESOURCE_PREFIX
from cluster.pools import (
    ATOMIC_CLASS,
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    PROVISIONING_REQUEST,
    VALID_UNTIL_SECONDS,
)
from cluster.training import NODE_JOB, TRAINER_CONTAINER

#: The class parameter that says how long a Provisioned request's capacity stays booked for its pods.
VALID_UNTIL_PARAMETER = "ValidUntilSeconds"
#: The CRD's bound on a request's pod sets (``spec.podSets`` ``maxItems``).
MAX_POD_SETS = 32
#: What a pod template of a ProvisioningRequest takes from a TrainJob's runtime patch: where the trainer's pods
#: may run. The rest of the patch (volumes, security) does not change which node fits them.
TRAINJOB_PLACEMENT = ("nodeSelector", "tolerations", "affinity")
#: The annotations that tie pods to a request: never part of a pod set's template (a template describes the pods
#: to come, whichever request they will consume), so :func:`pod_sets` reads the same before and after
#: :func:`consuming`.
CONSUME_ANNOTATIONS = (CONSUME_ANNOTATION, CLASS_ANNOTATION)


def _requests_gpu(pod_spec: Manifest) -> bool:
    """Whether a container (or init container) of ``pod_spec`` requests or limits a GPU extended resource."""
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        names = {*(resources.get("requests") or {}), *(resources.get("limits") or {})}
        if any(str(name).startswith(GPU_RESOURCE_PREFIX) for name in names):
            return True
    return False


def _count(value: Any) -> int:
    """A replica count as the API server defaults it: absent is 1."""
    return 1 if value is None else int(value)


def _trainjob_patches(trainjob: Manifest) -> list[Manifest]:
    """The pod templates (``metadata`` and ``spec``) the TrainJob's runtime patches give its replicated jobs."""
    templates = []
    for patch in (trainjob.get("spec") or {}).get("runtimePatches") or []:
        jobs = (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get(
            "replicatedJobs") or []
        for job in jobs:
            template = ((job.get("template") or {}).get("spec") or {}).get("template")
            if isinstance(template, dict):
                templates.append((job.get("name"), template))
    # The trainer's node job first: every runtime has it, and Slipway patches every trainer job alike.
    return [template for _name, template in sorted(templates, key=lambda pair: pair[0] != NODE_JOB)]


def _trainjob_template(trainjob: Manifest) -> Manifest:
    """The pod template of a TrainJob's trainer pods as far as placement goes: its container with the
    trainer's image and ``resourcesPerNode``, and where the runtime patch lets those pods run
    (:data:`TRAINJOB_PLACEMENT`), under the patch's metadata (the labels other pods' affinities look for)."""
    trainer = (trainjob.get("spec") or {}).get("trainer") or {}
    container: Manifest = {"name": TRAINER_CONTAINER}
    if trainer.get("image"):
        container["image"] = trainer["image"]
    container["resources"] = copy.deepcopy(trainer.get("resourcesPerNode") or {})
    patches = _trainjob_patches(trainjob)
    patch = patches[0] if patches else {}
    spec = {key: copy.deepcopy(patch["spec"][key]) for key in TRAINJOB_PLACEMENT if key in (patch.get("spec") or {})}
    spec["containers"] = [container]
    return {"metadata": copy.deepcopy(patch.get("metadata") or {}), "spec": spec}


def _templates(obj: Manifest) -> list[tuple[Manifest, int]]:
    """The pod templates of one object and how many pods of each it runs ([] for an object without pods)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Job":
        return [(spec["template"], _count(spec.get("parallelism")))]
    if kind == "Deployment":
        return [(spec["template"], _count(spec.get("replicas")))]
    if kind == "PyTorchJob":
        return [(replica["template"], _count(replica.get("replicas")))
                for replica in (spec.get("pytorchReplicaSpecs") or {}).values()]
    if kind == "TrainJob":
        return [(_trainjob_template(obj), _count((spec.get("trainer") or {}).get("numNodes")))]
    return []


def _without_consume(template: Manifest) -> Manifest:
    out = copy.deepcopy(template)
    meta = out.setdefault("metadata", {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in CONSUME_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return out


def pod_sets(objects: list[Manifest]) -> list[tuple[Manifest, int]]:
    """The GPU pods a workload's rendered ``objects`` will run: each pod template (a PodTemplateSpec:
    ``metadata`` and ``spec``) with how many pods of it, equal templates merged (a PyTorchJob's Master and
    Workers are one set), in the objects' order.

    A Job runs ``parallelism`` pods of its template, a Deployment ``replicas`` (1 when absent, as the API
    server defaults it: an autoscaled Deployment's first replica), a PyTorchJob ``replicas`` of each replica
    spec's template, a TrainJob ``trainer.numNodes`` trainer pods (:func:`_trainjob_template`). Pod templates
    without a GPU, and objects without pods, are left out; so are count-zero sets.
    """
    merged: list[list[Any]] = []
    for obj in objects:
        for template, count in _templates(obj):
            if count < 1 or not _requests_gpu(template.get("spec") or {}):
                continue
            template = _without_consume(template)
            same = next((entry for entry in merged if entry[0] == template), None)
            if same is None:
                merged.append([template, count])
            else:
                same[1] += count
    return [(template, count) for template, count in merged]


def pod_template_name(name: str, index: int) -> str:
    """The PodTemplate of a request's ``index``-th pod set (from 0): ``run-42-0``."""
    return f"{name}-{index}"


def build_provisioning(name: str, namespace: str, labels: dict[str, str], pod_sets: list[tuple[Manifest, int]], *,
                       class_name: str = ATOMIC_CLASS,
                       valid_until_seconds: int = VALID_UNTIL_SECONDS) -> list[Manifest]:
    """One ``v1 PodTemplate`` per pod set (:func:`pod_template_name`), then the ProvisioningRequest ``name``
    whose pod sets refer to them, of ``class_name`` with ``ValidUntilSeconds`` (a parameter is a string); every
    object labelled with ``labels`` (the workload's: it observes and deletes them with the rest of its objects).

    The templates come first: the request's pod sets refer to them, and Cluster Autoscaler fails a request
    whose templates it cannot find. ``ValueError`` for what the CRD would refuse: no pod set, more than
    :data:`MAX_POD_SETS`, a count below 1.
    """
    if not pod_sets:
        raise ValueError(f"ProvisioningRequest {name}: no pod requests a GPU, there is nothing to provision")
    if len(pod_sets) > MAX_POD_SETS:
        raise ValueError(f"ProvisioningRequest {name}: {len(pod_sets)} pod sets, at most {MAX_POD_SETS}")
    if any(count < 1 for _template, count in pod_sets):
        raise ValueError(f"ProvisioningRequest {name}: every pod set needs at least one pod")
    templates = [{
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": pod_template_name(name, index), "namespace": namespace, "labels": dict(labels)},
        "template": copy.deepcopy(template),
    } for index, (template, _count) in enumerate(pod_sets)]
    request = {
        "apiVersion": PROVISIONING_REQUEST.api_version,
        "kind": PROVISIONING_REQUEST.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "provisioningClassName": class_name,
            "parameters": {VALID_UNTIL_PARAMETER: str(int(valid_until_seconds))},
            "podSets": [{"podTemplateRef": {"name": pod_template_name(name, index)}, "count": int(count)}
                        for index, (_template, count) in enumerate(pod_sets)],
        },
    }
    return [*templates, request]


def _annotate(template: Manifest, annotations: dict[str, str]) -> None:
    meta = template.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}


def consuming(objects: list[Manifest], request_name: str, class_name: str = ATOMIC_CLASS) -> list[Manifest]:
    """Copies of ``objects`` whose GPU pods consume the ProvisioningRequest ``request_name`` of ``class_name``:
    :data:`cluster.pools.CONSUME_ANNOTATION` and :data:`cluster.pools.CLASS_ANNOTATION` on the metadata of every
    pod template that requests a GPU — a Job's, a Deployment's, each PyTorchJob replica spec's.

    A TrainJob's pods are its runtime's (a JobSet the runtime's template makes): the only pod metadata a TrainJob
    may set is that of its ``runtimePatches``' pod template overrides (the v1alpha1 CRD allows ``annotations``
    and ``labels`` there). So the annotations go on every replicated job's pod template in its runtime patches —
    the trainer jobs, whose pods get the trainer's ``resourcesPerNode`` — when the trainer requests a GPU.
    Other objects (a Service, a claim) come back unchanged; ``objects`` themselves are not modified.
    """
    annotations = {CONSUME_ANNOTATION: request_name, CLASS_ANNOTATION: class_name}
    out = copy.deepcopy(objects)
    for obj in out:
        spec = obj.get("spec") or {}
        if obj.get("kind") == "TrainJob":
            trainer_gpu = _requests_gpu({"containers": [{"resources": (spec.get("trainer") or {}).get(
                "resourcesPerNode") or {}}]})
            for template in _trainjob_patches(obj) if trainer_gpu else []:
                _annotate(template, annotations)
            continue
        for template, _count in _templates(obj):
            if _requests_gpu(template.get("spec") or {}):
                _annotate(template, annotations)
    return out
