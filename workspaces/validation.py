"""Validation of a workspace request: the one place that checks every submitted field.

:func:`parse_workspace_request` validates a create (``POST /api/v1/workspaces/``, the New workspace
form) and returns the model field values, or raises ``ValidationError`` with every field's errors
at once. Checks that need the database (the flavor, the name free in the team, the team's idle
maximum, quota) live in :mod:`workspaces.services`. The shared field rules are
:mod:`workloads.validation`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from core.priority import Priority
from workloads.constants import MAX_UNITS_PER_NODE
from workloads.validation import (
    DNS1035_LABEL,
    Collector,
    check_cluster_selector,
    check_env,
    check_for_reservation,
    check_gpu_memory,
    check_image,
    check_name,
    check_volumes,
)
from workspaces import constants as c

CREATE_FIELDS = {
    "team", "name", "flavor", "gpus", "image", "cpu", "memory_gb", "home_gb", "idle_minutes", "env", "volumes",
    "priority", "spot", "shared_with_admins", "cluster_selector", "gpu_memory_gb",
    "for_reservation",
}
#: Env names the workspace's pod gets from Slipway (its token, its home): set by no one else.
RESERVED_ENV = ("JUPYTER_TOKEN", "JUPYTER_BASE_URL", "HOME")


def parse_workspace_request(data: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``data`` into model field values (``flavor`` as its name; ``idle_minutes`` and
    ``priority`` None when not given: the team's policy fills them in)."""
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = Collector(data)
    unknown = sorted(set(data) - (CREATE_FIELDS - {"team"}))
    if unknown:
        col.add("non_field_errors", f"Field(s) unknown: {', '.join(map(str, unknown))}.")
    out: dict[str, Any] = {"name": check_name(col, DNS1035_LABEL), "flavor": col.string("flavor", max_length=40)}
    if col.present("image"):
        out["image"] = check_image(col)
    else:
        out["image"] = settings.SLIPWAY_WORKSPACE_IMAGE
    out["gpus"] = col.integer("gpus", 1, 1, MAX_UNITS_PER_NODE)
    out["cpu"] = col.number("cpu", 0.1, c.MAX_CPU)
    out["memory_gb"] = col.number("memory_gb", 0.25, c.MAX_MEMORY_GB)
    out["home_gb"] = col.integer("home_gb", c.DEFAULT_HOME_GB, c.MIN_HOME_GB, c.MAX_HOME_GB)
    out["idle_minutes"] = col.integer("idle_minutes", None, c.MIN_IDLE_MINUTES, c.MAX_IDLE_MINUTES)
    env = check_env(col)
    for name, _value in env:
        if name in RESERVED_ENV:
            col.add("env", f"{name} is set by Slipway for every workspace; it cannot be set.")
    out["env"] = dict(env)
    volumes = check_volumes(col)
    for volume in volumes:
        if volume.mount_path == c.HOME_PATH or volume.mount_path.startswith(c.HOME_PATH + "/") \
                or c.HOME_PATH.startswith(volume.mount_path + "/"):
            col.add("volumes", f"{volume.mount_path}: the home volume is mounted at {c.HOME_PATH}; choose another path.")
    out["volumes"] = [{"claim": v.claim, "mount_path": v.mount_path, "read_only": v.read_only} for v in volumes]
    priority = data.get("priority")
    if priority in (None, ""):
        out["priority"] = None
    elif not isinstance(priority, str) or priority not in Priority.values:
        col.add("priority", f"Must be one of: {', '.join(Priority.values)}.")
    else:
        out["priority"] = priority
    out["spot"] = col.boolean("spot", False)
    out["shared_with_admins"] = col.boolean("shared_with_admins", False)
    out["cluster_selector"] = check_cluster_selector(col)
    out["gpu_memory_gb"] = check_gpu_memory(col)
    out["for_reservation"] = check_for_reservation(col)
    if col.errors:
        raise ValidationError(col.errors)
    return out
