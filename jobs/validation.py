"""Validation of a training-run request: the one place that checks every submitted field.

``parse_run_request(data)`` takes what a client sent (JSON from the API, or the portal
form's cleaned values, which are converted to the same shape) and returns a typed
:class:`RunRequest`, or raises ``ValidationError`` with *all* field errors at once. Checks
that need the database (flavor exists, name free in the team) live in
:func:`jobs.services.submit_run`, which calls this first.

Everything here ends up in a Kubernetes manifest, so it is strict (DESIGN.md §7): argv
lists (never a shell string), environment variable names, DNS-1123 names, an image
reference of the usual grammar (optionally from allowed registries only), bounded sizes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from jobs import constants as c
from quotas.constants import Priority

# Used with fullmatch: "$" alone would also match before a final newline ("bert\n").
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# registry[:port]/path/to/name[:tag][@sha256:hex] — lowercase path components as Docker requires.
IMAGE_REF = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
# /dev covers /dev/shm, which Slipway mounts itself.
FORBIDDEN_MOUNT_ROOTS = ("/dev", "/proc", "/sys", "/etc", "/var/run")


@dataclass(frozen=True)
class VolumeRequest:
    claim: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True)
class RunRequest:
    """A validated run request (the submitted fields of API.md, typed)."""

    name: str
    image: str
    command: tuple[str, ...]
    flavor: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
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
        """The model fields of a TrainingRun with these values (flavor excluded)."""
        return {
            "name": self.name, "image": self.image, "command": list(self.command), "args": list(self.args),
            "env": dict(self.env), "gpus_per_worker": self.gpus_per_worker, "workers": self.workers,
            "cpu": self.cpu, "memory_gb": self.memory_gb, "shm_gb": self.shm_gb, "max_retries": self.max_retries,
            "max_runtime_minutes": self.max_runtime_minutes, "priority": self.priority, "spot": self.spot,
            "volumes": [{"claim": v.claim, "mount_path": v.mount_path, "read_only": v.read_only} for v in self.volumes],
        }


def image_registry(image: str) -> str:
    """The registry host of an image reference (Docker Hub when the first part is not a host)."""
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


class _Collector:
    """Collects field errors so the client hears about every bad field in one answer."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.errors: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def present(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None and self.data[name] != ""

    def string(self, name: str, *, required: bool = True, max_length: int = 300) -> str:
        value = self.data.get(name)
        if value is None or value == "":
            if required:
                self.add(name, "This field is required.")
            return ""
        if not isinstance(value, str):
            self.add(name, "Must be a string.")
            return ""
        if len(value) > max_length:
            self.add(name, f"Must be at most {max_length} characters.")
        if "\x00" in value:
            self.add(name, "Must not contain NUL characters.")
        return value

    def integer(self, name: str, default: int | None, lo: int, hi: int) -> int | None:
        if not self.present(name):
            return default
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            self.add(name, "Must be a whole number.")
            return default
        # Plain digits only: int() would also take "1_0" (10) and "²"-like digits.
        if isinstance(value, str) and not WHOLE_NUMBER.fullmatch(value.strip()):
            self.add(name, "Must be a whole number.")
            return default
        number = int(value)
        if not lo <= number <= hi:
            self.add(name, f"Must be between {lo} and {hi}.")
        return number

    def number(self, name: str, lo: float, hi: float) -> float | None:
        if not self.present(name):
            return None
        value = self.data[name]
        if isinstance(value, bool):
            self.add(name, "Must be a number.")
            return None
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer past float's range
            self.add(name, "Must be a number.")
            return None
        if not lo <= number <= hi:  # also rejects NaN
            self.add(name, f"Must be between {lo:g} and {hi:g}.")
        return number

    def boolean(self, name: str, default: bool) -> bool:
        if name not in self.data or self.data[name] is None:
            return default
        value = self.data[name]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "on", "off", "1", "0"}:
            return value.lower() in {"true", "on", "1"}
        self.add(name, "Must be true or false.")
        return default

    def argv(self, name: str, *, required: bool) -> tuple[str, ...]:
        value = self.data.get(name)
        if value is None or value == []:
            if required:
                self.add(name, "This field is required: a list of strings, e.g. [\"python\", \"train.py\"].")
            return ()
        if isinstance(value, str):
            self.add(name, "Must be a list of strings (argv form), not a shell string.")
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.add(name, "Must be a list of strings.")
            return ()
        if len(value) > c.MAX_ARGV_ITEMS:
            self.add(name, f"At most {c.MAX_ARGV_ITEMS} items.")
        if any(len(item) > c.MAX_ARG_LENGTH or "\x00" in item for item in value):
            self.add(name, f"Each item must be at most {c.MAX_ARG_LENGTH} characters, without NUL bytes.")
        if required and value and not value[0].strip():
            self.add(name, "The program (first item) must not be blank.")
        return tuple(value)


def _check_name(col: _Collector) -> str:
    name = col.string("name", max_length=c.NAME_MAX_LENGTH)
    if name and not DNS1123_LABEL.fullmatch(name):
        col.add("name", "Use lowercase letters, digits and '-', starting and ending with a letter or digit.")
    return name


def _check_image(col: _Collector) -> str:
    image = col.string("image", max_length=300)
    if not image:
        return image
    if not IMAGE_REF.fullmatch(image):
        col.add("image", "Not a valid image reference (e.g. registry.example.com/team/trainer:1.4).")
        return image
    allowed = settings.SLIPWAY_IMAGE_REGISTRIES
    if allowed and image_registry(image) not in allowed:
        col.add("image", f"Images must come from an allowed registry: {', '.join(allowed)}.")
    return image


def _check_env(col: _Collector) -> tuple[tuple[str, str], ...]:
    env = col.data.get("env")
    if env in (None, {}, ""):
        return ()
    if not isinstance(env, Mapping):
        col.add("env", "Must be an object mapping names to string values.")
        return ()
    if len(env) > c.MAX_ENV_VARS:
        col.add("env", f"At most {c.MAX_ENV_VARS} variables.")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            col.add("env", f"Invalid variable name {key!r}: use letters, digits and '_', not starting with a digit.")
        elif not isinstance(value, str):
            col.add("env", f"The value of {key} must be a string.")
        elif len(value) > c.MAX_ENV_VALUE_LENGTH:
            col.add("env", f"The value of {key} is longer than {c.MAX_ENV_VALUE_LENGTH} characters.")
        elif "\x00" in value:
            col.add("env", f"The value of {key} must not contain NUL characters.")
    return tuple(sorted((str(k), str(v)) for k, v in env.items()))


def _check_volumes(col: _Collector) -> tuple[VolumeRequest, ...]:
    volumes = col.data.get("volumes")
    if volumes in (None, []):
        return ()
    if not isinstance(volumes, list):
        col.add("volumes", "Must be a list of {claim, mount_path, read_only} objects.")
        return ()
    if len(volumes) > c.MAX_VOLUMES:
        col.add("volumes", f"At most {c.MAX_VOLUMES} volumes.")
    out: list[VolumeRequest] = []
    seen_paths: set[str] = set()
    for index, item in enumerate(volumes):
        where = f"Volume {index + 1}"
        if not isinstance(item, Mapping):
            col.add("volumes", f"{where}: must be an object with claim and mount_path.")
            continue
        claim, path, read_only = item.get("claim"), item.get("mount_path"), item.get("read_only", False)
        if not isinstance(claim, str) or len(claim) > 253 or not DNS1123_SUBDOMAIN.fullmatch(claim):
            col.add("volumes", f"{where}: claim must be the name of a PersistentVolumeClaim (DNS-1123).")
            continue
        if (not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") == "" or len(path) > 200
                or "\x00" in path):
            col.add("volumes", f"{where}: mount_path must be an absolute path other than '/'.")
            continue
        normalised = path.rstrip("/")
        if ".." in normalised.split("/") or any(
            normalised == root or normalised.startswith(root + "/") for root in FORBIDDEN_MOUNT_ROOTS
        ):
            col.add("volumes", f"{where}: {path} is a reserved path.")
            continue
        if normalised in seen_paths:
            col.add("volumes", f"{where}: {path} is mounted twice.")
            continue
        if not isinstance(read_only, bool):
            col.add("volumes", f"{where}: read_only must be true or false.")
            continue
        seen_paths.add(normalised)
        out.append(VolumeRequest(claim, normalised, read_only))
    return tuple(out)


KNOWN_FIELDS = {
    "team", "name", "image", "command", "args", "env", "flavor", "gpus_per_worker", "workers", "cpu",
    "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes", "priority", "spot", "volumes",
}


def parse_run_request(data: Mapping[str, Any]) -> RunRequest:
    """Validate ``data`` (API.md's POST /runs/ fields, ``team`` aside) into a RunRequest.

    Raises ``ValidationError`` whose ``message_dict`` holds every field's errors.
    """
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = _Collector(data)
    unknown = sorted(set(data) - KNOWN_FIELDS)
    if unknown:
        col.add("non_field_errors", f"Unknown field(s): {', '.join(unknown)}.")
    name = _check_name(col)
    image = _check_image(col)
    command = col.argv("command", required=True)
    args = col.argv("args", required=False)
    env = _check_env(col)
    flavor = col.string("flavor", max_length=40)
    gpus = col.integer("gpus_per_worker", 1, 1, 64)
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
    volumes = _check_volumes(col)
    if col.errors:
        raise ValidationError(col.errors)
    return RunRequest(
        name=name, image=image, command=command, flavor=flavor, args=args, env=env,
        gpus_per_worker=gpus or 1, workers=workers or 1, cpu=cpu, memory_gb=memory_gb, shm_gb=shm_gb,
        max_retries=max_retries if max_retries is not None else 2, max_runtime_minutes=max_runtime,
        priority=str(priority), spot=spot, volumes=volumes,
    )


def request_from_run(run) -> RunRequest:
    """The request that would submit ``run`` again ("run again")."""
    return parse_run_request({**run_fields(run), "flavor": run.flavor.name})


def run_fields(run) -> dict[str, Any]:
    return {
        "name": run.name, "image": run.image, "command": list(run.command), "args": list(run.args),
        "env": dict(run.env), "gpus_per_worker": run.gpus_per_worker, "workers": run.workers, "cpu": run.cpu,
        "memory_gb": run.memory_gb, "shm_gb": run.shm_gb, "max_retries": run.max_retries,
        "max_runtime_minutes": run.max_runtime_minutes, "priority": run.priority, "spot": run.spot,
        "volumes": list(run.volumes),
    }
