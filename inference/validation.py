"""Validation of an inference endpoint request: the one place that checks every submitted field.

:func:`parse_endpoint_request` validates a create (docs/api.md ``POST /endpoints/``) and, with
``partial=True``, a ``PATCH`` (only the fields a PATCH may change). It returns the model
field values, or raises ``ValidationError`` with every field's errors at once. Checks that
need the database (flavor, name free in the team, quota) live in :mod:`inference.services`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

from cluster.promql import QueryRefused, scope_query
from inference import constants as c
from inference import specs
from inference.constants import Engine, Metric
from inference.specs import REQUEST_DRIVEN_METRICS
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
    check_secret_env,
)

#: How a change of the serving fields rolls out (docs/serving.md "Revisions, canary and rollback"): PATCH only.
ROLLOUT_FIELDS = ("rollout", "weight", "auto_promote_windows")
#: A candidate takes at most half of the requests; auto-promotion asks for at most this many good windows.
MAX_CANARY_WEIGHT = 50
MAX_AUTO_PROMOTE_WINDOWS = 100

HTTP_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")

CREATE_FIELDS = {
    "team", "name", "image", "command", "args", "env", "secret_env", "port", "flavor", "gpus_per_replica", "min_replicas",
    "max_replicas", "autoscale", "scale_down_delay_seconds", "readiness_path", "startup_timeout_seconds", "spot",
    "cluster_selector", "gpu_memory_gb", "for_reservation",
}
PATCH_FIELDS = {"image", "command", "args", "env", "secret_env", "min_replicas", "max_replicas", "autoscale",
                "scale_down_delay_seconds", *ROLLOUT_FIELDS}
AUTOSCALE_KEYS = {"metric", "target", "engine", "query"}


def _check_autoscale(col: Collector, namespace: str) -> dict:
    value = col.data.get("autoscale")
    if value in (None, {}):
        return {"metric": specs.DEFAULT_METRIC, "target": specs.DEFAULT_GPU_UTILIZATION_TARGET}
    if not isinstance(value, Mapping):
        col.add("autoscale", 'Must be an object: {"metric", "target", "engine", "query"}.')
        return {}
    unknown = sorted(set(value) - AUTOSCALE_KEYS)
    if unknown:
        col.add("autoscale", f"Unknown key(s): {', '.join(map(str, unknown))}.")
    metric = value.get("metric", specs.DEFAULT_METRIC)
    if metric not in Metric.values:
        col.add("autoscale", f"metric must be one of: {', '.join(Metric.values)}.")
        return {}
    inner = Collector(value)
    target = inner.number("target", 0.001, 1_000_000)
    if "target" not in value:
        target = specs.DEFAULT_GPU_UTILIZATION_TARGET if metric == Metric.GPU_UTILIZATION else None
        if target is None:
            inner.add("target", f"A target is required for {metric}.")
    if metric == Metric.GPU_UTILIZATION and target is not None and target > 100:
        inner.add("target", "GPU utilization is a percentage: at most 100.")
    spec: dict[str, Any] = {"metric": metric, "target": target}
    engine = value.get("engine")
    if metric == Metric.QUEUE_LENGTH:
        if engine not in Engine.values:
            inner.add("engine", f"queue_length needs an engine: one of {', '.join(Engine.values)}.")
        spec["engine"] = engine
    elif engine is not None:
        inner.add("engine", "Only queue_length takes an engine.")
    query = value.get("query")
    if metric == Metric.PROMETHEUS:
        # Confined to the team's namespace and bounded in cost (cluster.promql); what is stored,
        # shown and rendered is the rewritten query, with the namespace matcher on every selector.
        try:
            spec["query"] = scope_query(query, namespace)
        except QueryRefused as exc:
            for problem in exc.problems:
                inner.add("query", problem)
    elif query is not None:
        inner.add("query", "Only the prometheus metric takes a query.")
    for field_name, messages in inner.errors.items():
        for message in messages:
            col.add("autoscale", f"{field_name}: {message}")
    return spec


def parse_endpoint_request(data: Mapping[str, Any], partial: bool = False, *, namespace: str) -> dict[str, Any]:
    """Validate ``data`` into model field values (``flavor`` as its name). See the module docstring.

    ``namespace`` is the team's Kubernetes namespace: a ``prometheus`` autoscale query may read
    only that namespace's series (:func:`cluster.promql.scope_query`).
    """
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = Collector(data)
    allowed = PATCH_FIELDS if partial else CREATE_FIELDS - {"team"}
    unknown = sorted(set(data) - allowed)
    # The portal's form has metric and target side by side, the API nests them: said under the field's own
    # name (so `slipway endpoint create -f` gives its line), with the shape to write instead.
    misplaced = [name for name in unknown if name in AUTOSCALE_KEYS]
    for name in misplaced:
        col.add(name, f"Not a field of its own: it goes under autoscale, e.g. autoscale: {{metric: "
                      f"{Metric.GPU_UTILIZATION.value}, target: {specs.DEFAULT_GPU_UTILIZATION_TARGET:g}}}.")
    unknown = [name for name in unknown if name not in misplaced]
    if unknown:
        verb = "cannot be changed (create a new endpoint)" if partial else "unknown"
        col.add("non_field_errors", f"Field(s) {verb}: {', '.join(map(str, unknown))}.")
    out: dict[str, Any] = {}

    def given(name: str) -> bool:
        return not partial or name in data

    if not partial:
        out["name"] = check_name(col, DNS1035_LABEL)
    if given("image"):
        out["image"] = check_image(col)
    if partial:
        for name in ("command", "args"):
            if name in data:
                out[name] = list(col.argv(name, required=False))
        out.update(_check_rollout(col))
    if not partial:
        out["command"] = list(col.argv("command", required=False))
        out["args"] = list(col.argv("args", required=False))
        out["port"] = col.integer("port", specs.DEFAULT_PORT, 1, 65535)
        out["flavor"] = col.string("flavor", max_length=40)
        out["gpus_per_replica"] = col.integer("gpus_per_replica", 1, 1, MAX_UNITS_PER_NODE)
        path = col.string("readiness_path", required=False, max_length=200) or specs.DEFAULT_READINESS_PATH
        if not HTTP_PATH.fullmatch(path):
            col.add("readiness_path", "Must be an absolute HTTP path, e.g. /health/ready.")
        out["readiness_path"] = path
        out["startup_timeout_seconds"] = col.integer("startup_timeout_seconds", specs.DEFAULT_STARTUP_TIMEOUT_SECONDS, 10,
                                                     c.MAX_STARTUP_TIMEOUT_SECONDS)
        out["spot"] = col.boolean("spot", False)
        out["cluster_selector"] = check_cluster_selector(col)
        out["gpu_memory_gb"] = check_gpu_memory(col)
        out["for_reservation"] = check_for_reservation(col)
    if given("env"):
        out["env"] = dict(check_env(col))
    if given("secret_env"):
        # A PATCH replaces the whole set; checked here against the env of the same request, and
        # against the endpoint's current env by inference.services.update_endpoint.
        out["secret_env"] = dict(check_secret_env(col, tuple(out.get("env", {}).items())))
    if given("min_replicas"):
        out["min_replicas"] = col.integer("min_replicas", 1, 0, c.MAX_REPLICAS)
    if given("max_replicas"):
        out["max_replicas"] = col.integer("max_replicas", None, 1, c.MAX_REPLICAS)
    if given("autoscale"):
        out["autoscale"] = _check_autoscale(col, namespace)
    if given("scale_down_delay_seconds"):
        out["scale_down_delay_seconds"] = col.integer("scale_down_delay_seconds", specs.DEFAULT_SCALE_DOWN_DELAY_SECONDS,
                                                      0, c.MAX_SCALE_DOWN_DELAY_SECONDS)
    if col.errors:
        raise ValidationError(col.errors)
    if not partial and out.get("max_replicas") is None:
        out["max_replicas"] = max(1, out["min_replicas"])
    return out


def _words(names) -> str:
    """"a, b or c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _check_rollout(col: Collector) -> dict[str, Any]:
    """``rollout`` (replace, the default, or canary), a canary's ``weight`` (1–50 %) and its optional
    ``auto_promote_windows`` (0: promoted by hand only). Whether the edit changes a serving field at all
    is :func:`inference.services.update_endpoint`'s question (it needs the endpoint)."""
    data = col.data
    rollout = data.get("rollout", c.Rollout.REPLACE) or c.Rollout.REPLACE
    if rollout not in c.Rollout.values:
        col.add("rollout", f"Must be one of: {', '.join(c.Rollout.values)}.")
        return {}
    weight = col.integer("weight", None, 1, MAX_CANARY_WEIGHT)
    windows = col.integer("auto_promote_windows", 0, 0, MAX_AUTO_PROMOTE_WINDOWS)
    if rollout == c.Rollout.CANARY:
        if weight is None and "weight" not in col.errors:
            col.add("weight", f"A canary needs a weight: the percent of requests it serves, 1 to {MAX_CANARY_WEIGHT}.")
    else:
        for name in ("weight", "auto_promote_windows"):
            if col.present(name):
                col.add(name, "Only a canary rollout takes it.")
    return {"rollout": rollout, "weight": weight, "auto_promote_windows": windows}


def check_sizes(min_replicas: int, max_replicas: int, autoscale: dict, gpus_per_replica: int,
                mig: bool) -> dict[str, list[str]]:
    """Rules across fields (also for a PATCH, against the endpoint's current values)."""
    errors: dict[str, list[str]] = {}
    if max_replicas < max(1, min_replicas):
        errors["max_replicas"] = [f"Must be at least {min_replicas}, the minimum replicas." if min_replicas >= 1
                                  else "Must be at least 1."]
    if min_replicas == 0 and autoscale.get("metric") not in REQUEST_DRIVEN_METRICS:
        errors["min_replicas"] = [f"0 needs a request-driven autoscale metric ({_words(REQUEST_DRIVEN_METRICS)}): at "
                                  "zero replicas there is no GPU metric to wake on."]
    if mig and gpus_per_replica != 1:
        errors["gpus_per_replica"] = ["A MIG slice serves one replica: gpus_per_replica must be 1."]
    return errors
