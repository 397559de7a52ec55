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

from jobs import constants as c
from quotas.constants import Priority
from workloads.constants import MAX_GPUS_PER_NODE
from workloads.validation import (
    Collector,
    VolumeRequest,
    check_env,
    check_image,
    check_name,
    check_secret_env,
    check_volumes,
)


@dataclass(frozen=True)
class RunRequest:
    """A validated run request (the submitted fields of API.md, typed)."""

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
    cpu: float | None = None
    memory_gb: float | None = None
    shm_gb: float | None = None
    max_retries: int = 2
    max_runtime_minutes: int | None = None
    priority: str = Priority.NORMAL
    spot: bool = False
    volumes: tuple[VolumeRequest, ...] = field(default=())

    def as_fields(self) -> dict[str, Any]:
        """The model fields of a TrainingRun with these values (flavor and secret env excluded)."""
        return {
            "name": self.name, "image": self.image, "command": list(self.command), "args": list(self.args),
            "env": dict(self.env), "gpus_per_worker": self.gpus_per_worker, "workers": self.workers,
            "cpu": self.cpu, "memory_gb": self.memory_gb, "shm_gb": self.shm_gb, "max_retries": self.max_retries,
            "max_runtime_minutes": self.max_runtime_minutes, "priority": self.priority, "spot": self.spot,
            "volumes": [{"claim": v.claim, "mount_path": v.mount_path, "read_only": v.read_only} for v in self.volumes],
        }


KNOWN_FIELDS = {
    "team", "name", "image", "command", "args", "env", "secret_env", "flavor", "gpus_per_worker", "workers", "cpu",
    "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes", "priority", "spot", "volumes",
}


def parse_run_request(data: Mapping[str, Any]) -> RunRequest:
    """Validate ``data`` (API.md's POST /runs/ fields, ``team`` aside) into a RunRequest.

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
    gpus = col.integer("gpus_per_worker", 1, 1, MAX_GPUS_PER_NODE)
    workers = col.integer("workers", 1, 1, c.MAX_WORKERS)
    # Lower bounds: what the manifests can express (1 millicore, 1 MiB), not "0".
    cpu = col.number("cpu", 0.001, c.MAX_CPU)
    memory_gb = col.number("memory_gb", 0.001, c.MAX_MEMORY_GB)
    shm_gb = col.number("shm_gb", 0.001, c.MAX_SHM_GB)
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
    if col.errors:
        raise ValidationError(col.errors)
    return RunRequest(
        name=name, image=image, command=command, flavor=flavor, args=args, env=env, secret_env=secret_env,
        gpus_per_worker=gpus or 1, workers=workers or 1, cpu=cpu, memory_gb=memory_gb, shm_gb=shm_gb,
        max_retries=max_retries if max_retries is not None else 2, max_runtime_minutes=max_runtime,
        priority=str(priority), spot=spot, volumes=volumes,
    )

