"""Validation of a training-run request: the one place that checks every submitted field.

``parse_run_request(data)`` takes what a client sent (JSON from the API, or the portal
form's cleaned values, which are converted to the same shape) and returns a typed
:class:`RunRequest`, or raises ``ValidationError`` with *all* field errors at once. Checks
that need the database (flavor exists, name free in the team) live in
:func:`jobs.services.submit_run`, which calls this first.

The checks every workload kind shares (image, argv, env, names, volumes) are in
:mod:`workloads.validation`; this module adds what is about training runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from cluster.training import DEFAULT_FRAMEWORK, FRAMEWORKS
from core.priority import Priority
from jobs import constants as c
from jobs.checkpoint_contract import CHECKPOINT_DIR, CONTRACT_ENV
from workloads.constants import MAX_UNITS_PER_NODE
from workloads.validation import (
    DNS1123_SUBDOMAIN,
    Collector,
    VolumeRequest,
    check_cluster_selector,
    check_env,
    check_for_reservation,
    check_gpu_memory,
    check_image,
    check_name,
    check_secret_env,
    check_volumes,
)


@dataclass(frozen=True)
class CheckpointRequest:
    """The checkpoint contract a run opts into (docs/api.md "The checkpoint contract (runs)")."""

    grace_seconds: int = c.DEFAULT_CHECKPOINT_GRACE_SECONDS
    volume: str = ""  #: the team's claim; "" = Slipway provides one per run

    def as_field(self) -> dict[str, Any]:
        return {"grace_seconds": self.grace_seconds, "volume": self.volume or None}


@dataclass(frozen=True)
class RunRequest:
    """A validated run request (the submitted fields of docs/api.md, typed)."""

    name: str
    image: str
    command: tuple[str, ...]
    flavor: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: (name, value) pairs stored apart (:class:`workloads.models.SecretEnv`), never a model field.
    secret_env: tuple[tuple[str, str], ...] = ()
    gpus_per_worker: int = 1
    workers: int = 1
    framework: str = DEFAULT_FRAMEWORK
    cpu: float | None = None
    memory_gb: float | None = None
    shm_gb: float | None = None
    max_retries: int = 2
    max_runtime_minutes: int | None = None
    priority: str = Priority.NORMAL
    spot: bool = False
    volumes: tuple[VolumeRequest, ...] = field(default=())
    checkpoint: CheckpointRequest | None = None
    cluster_selector: tuple[tuple[str, str], ...] = ()
    #: The GPU memory each pod needs (GB), when said: for advice and the sandbox's simulation.
    gpu_memory_gb: float | None = None
    #: The id of the team's reservation it is for (docs/reservations.md "Open or targeted"); None: none.
    for_reservation: int | None = None

    def as_fields(self) -> dict[str, Any]:
        """The model fields of a TrainingRun with these values (flavor and secret env excluded)."""
        return {
            "name": self.name, "image": self.image, "command": list(self.command), "args": list(self.args),
            "env": dict(self.env), "gpus_per_worker": self.gpus_per_worker, "workers": self.workers,
            "framework": self.framework,
            "cpu": self.cpu, "memory_gb": self.memory_gb, "shm_gb": self.shm_gb, "max_retries": self.max_retries,
            "max_runtime_minutes": self.max_runtime_minutes, "priority": self.priority, "spot": self.spot,
            "volumes": [{"claim": v.claim, "mount_path": v.mount_path, "read_only": v.read_only} for v in self.volumes],
            "checkpoint": self.checkpoint.as_field() if self.checkpoint is not None else None,
            "cluster_selector": dict(self.cluster_selector), "gpu_memory_gb": self.gpu_memory_gb,
            "for_reservation": self.for_reservation,
        }


KNOWN_FIELDS = {
    "team", "name", "image", "command", "args", "env", "secret_env", "flavor", "gpus_per_worker", "workers", "cpu",
    "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes", "priority", "spot", "volumes", "checkpoint",
    "cluster_selector", "gpu_memory_gb", "framework", "for_reservation",
}


def check_checkpoint(col: Collector, env: tuple[tuple[str, str], ...],
                     secret_env: tuple[tuple[str, str], ...]) -> CheckpointRequest | None:
    """``checkpoint``: null or absent = no contract; an object opts in (``{}`` takes the defaults).

    With the contract, the variables it sets are Slipway's: a run may not set them itself.
    """
    data = col.data.get("checkpoint")
    if data is None:
        return None
    if not isinstance(data, Mapping):
        col.add("checkpoint", 'Must be an object such as {"grace_seconds": 60} (or null for no contract).')
        return None
    unknown = sorted(str(key) for key in data if key not in c.CHECKPOINT_KEYS)
    if unknown:
        col.add("checkpoint", f"Unknown field(s) {', '.join(unknown)[:200]}; the contract has only "
                              f"{', '.join(c.CHECKPOINT_KEYS)}.")
        return None
    inner = Collector(data)
    grace = inner.integer("grace_seconds", c.DEFAULT_CHECKPOINT_GRACE_SECONDS, 1, c.MAX_CHECKPOINT_GRACE_SECONDS)
    volume = data.get("volume")
    if volume in (None, ""):
        volume = ""
    elif not isinstance(volume, str) or len(volume) > 253 or not DNS1123_SUBDOMAIN.fullmatch(volume):
        inner.add("volume", "Must be the name of a PersistentVolumeClaim of the team (DNS-1123), or null.")
        volume = ""
    for key, messages in inner.errors.items():
        for message in messages:
            col.add("checkpoint", f"{key}: {message}")
    for name, pairs in (("env", env), ("secret_env", secret_env)):
        taken = sorted({key for key, _value in pairs} & set(CONTRACT_ENV))
        if taken:
            col.add(name, f"{', '.join(taken)} is set by the checkpoint contract; it cannot be set here.")
    if inner.errors:
        return None
    return CheckpointRequest(grace_seconds=grace if grace is not None else c.DEFAULT_CHECKPOINT_GRACE_SECONDS,
                             volume=volume)


def parse_run_request(data: Mapping[str, Any]) -> RunRequest:
    """Validate ``data`` (docs/api.md's POST /runs/ fields, ``team`` aside) into a RunRequest.

    Raises ``ValidationError`` whose ``message_dict`` holds every field's errors.
    """
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = Collector(data)
    unknown = sorted(set(data) - KNOWN_FIELDS)
    if unknown:
        col.add("non_field_errors", f"Unknown field(s): {', '.join(unknown)}.")
    name = check_name(col)
    image = check_image(col)
    command = col.argv("command", required=True)
    args = col.argv("args", required=False)
    env = check_env(col)
    secret_env = check_secret_env(col, env)
    flavor = col.string("flavor", max_length=40)
    gpus = col.integer("gpus_per_worker", 1, 1, MAX_UNITS_PER_NODE)
    workers = col.integer("workers", 1, 1, c.MAX_WORKERS)
    framework = data.get("framework")
    if framework is None or framework == "":
        framework = DEFAULT_FRAMEWORK
    elif not isinstance(framework, str) or framework not in FRAMEWORKS:
        col.add("framework", f"Must be one of: {', '.join(FRAMEWORKS)}.")
    # Lower bounds: what the manifests can express (1 millicore, 1 MiB), not "0".
    cpu = col.number("cpu", 0.001, c.MAX_CPU)
    memory_gb = col.number("memory_gb", 0.001, c.MAX_MEMORY_GB)
    shm_gb = col.number("shm_gb", 0.001, c.MAX_SHM_GB)
    gpu_memory_gb = check_gpu_memory(col)
    if shm_gb is not None and memory_gb is not None and shm_gb > memory_gb:
        col.add("shm_gb", "Shared memory counts against the container's memory: it must not exceed memory_gb.")
    max_retries = col.integer("max_retries", 2, 0, c.MAX_RETRIES)
    max_runtime = col.integer("max_runtime_minutes", None, 1, c.MAX_RUNTIME_MINUTES)
    priority = data.get("priority")
    if priority is None or priority == "":
        priority = Priority.NORMAL
    elif not isinstance(priority, str) or priority not in Priority.values:
        col.add("priority", f"Must be one of: {', '.join(Priority.values)}.")
    spot = col.boolean("spot", False)
    volumes = check_volumes(col)
    selector = check_cluster_selector(col)
    for_reservation = check_for_reservation(col)
    checkpoint = check_checkpoint(col, env, secret_env)
    if checkpoint is not None and any(v.mount_path == CHECKPOINT_DIR or v.mount_path.startswith(CHECKPOINT_DIR + "/")
                                      for v in volumes):
        col.add("volumes", f"{CHECKPOINT_DIR} is where the checkpoint contract mounts its volume.")
    if col.errors:
        raise ValidationError(col.errors)
    return RunRequest(
        name=name, image=image, command=command, flavor=flavor, args=args, env=env, secret_env=secret_env,
        gpus_per_worker=gpus or 1, workers=workers or 1, framework=str(framework), cpu=cpu, memory_gb=memory_gb, shm_gb=shm_gb,
        max_retries=max_retries if max_retries is not None else 2, max_runtime_minutes=max_runtime,
        priority=str(priority), spot=spot, volumes=volumes, checkpoint=checkpoint,
        cluster_selector=tuple(sorted(selector.items())), gpu_memory_gb=gpu_memory_gb, for_reservation=for_reservation,
    )

