"""What the sandbox's "API server" accepts: structural validation and the compiled plan.

:func:`admit` checks one manifest the way the API server (and the CRDs' webhooks) would and
raises :class:`cluster.errors.Invalid` with an API-server-shaped message
(``Job.batch "run-1" is invalid: spec.template.spec.containers: Required value``). It then
compiles the manifest into a small *plan*: the handful of facts every tick needs
(pod requests, placement rules, simulated duration/outcome, backoff limit …). The tick reads
only plans, never whole manifests, which keeps a tick over 10,000 workloads cheap.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cluster.backends.base import ResourceKind, resource_kind
from cluster.errors import Invalid
from cluster.manifests.common import DISPLAY_NAME_ANNOTATION
from cluster.pools import CONSUME_ANNOTATION, VALID_UNTIL_SECONDS
from sandbox import engines, trainer
from sandbox.inventory import inventory
from sandbox.quantity import parse_quantity, to_units
from sandbox.registry import pull_error
from sandbox.simulation import sim_settings, start_delays
from sandbox.training_metrics import log_every

Manifest = dict[str, Any]

#: What this API server serves whatever kinds of workload exist: a team's namespace objects
#: (with KEDA's TriggerAuthentication of its Prometheus tenant), what pods refer to, and a gang
#: scheduler's PodGroups. The workload kinds' objects are served as their registrations declare
#: them (the ``resources`` apply is given); the sandbox's controllers simulate Jobs, PyTorchJobs,
#: TrainJobs, Deployments and ScaledObjects, and store any other declared kind as applied.
SERVED: tuple[ResourceKind, ...] = (
    ResourceKind("", "v1", "Namespace", "namespaces", namespaced=False),
    ResourceKind("", "v1", "ResourceQuota", "resourcequotas"),
    ResourceKind("", "v1", "LimitRange", "limitranges"),
    ResourceKind("", "v1", "ConfigMap", "configmaps"),
    ResourceKind("", "v1", "Secret", "secrets"),
    ResourceKind("", "v1", "ServiceAccount", "serviceaccounts"),
    ResourceKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ResourceKind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies"),
    ResourceKind("keda.sh", "v1alpha1", "TriggerAuthentication", "triggerauthentications"),
    ResourceKind("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
    ResourceKind("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
#: Names that must be DNS-1123 labels (≤63) rather than subdomains.
_LABEL_NAMED = ("Namespace", "Service")


def served(api_version: str, kind: str, resources: Sequence[ResourceKind] = ()) -> ResourceKind | None:
    """The kind ``apiVersion``/``kind`` names, when this server serves it or ``resources`` declares it."""
    return resource_kind(SERVED, api_version, kind) or resource_kind(resources, api_version, kind)


def kind_label(resource: ResourceKind) -> str:
    """``Job.batch``, ``Deployment.apps``, ``Service`` — how the API server names a kind."""
    return f"{resource.kind}.{resource.group}" if resource.group else resource.kind


class _Errors:
    """Collects field errors, then raises them as one Invalid like the API server does."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def required(self, path: str) -> None:
        self.items.append(f"{path}: Required value")

    def invalid(self, path: str, value: object, detail: str) -> None:
        shown = value if isinstance(value, int | float) and not isinstance(value, bool) else json.dumps(value, default=str)
        self.items.append(f"{path}: Invalid value: {shown}: {detail}")

    def unsupported(self, path: str, value: object, allowed: tuple[str, ...]) -> None:
        options = ", ".join(f'"{a}"' for a in allowed)
        self.items.append(f'{path}: Unsupported value: "{value}": supported values: {options}')

    def forbidden(self, path: str, detail: str) -> None:
        self.items.append(f"{path}: Forbidden: {detail}")

    def raise_for(self, resource: ResourceKind, name: str) -> None:
        if not self.items:
            return
        detail = self.items[0] if len(self.items) == 1 else "[" + ", ".join(self.items) + "]"
        raise Invalid(f'{kind_label(resource)} "{name}" is invalid: {detail}', status=422)


def _check_name(errors: _Errors, kind: str, name: str) -> None:
    if kind in _LABEL_NAMED:
        pattern, limit = (_DNS_1035 if kind == "Service" else _DNS_LABEL), 63
        what = "a DNS-1035 label" if kind == "Service" else "a lowercase RFC 1123 label"
    else:
        pattern, limit, what = _DNS_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"
    if len(name) > limit:
        errors.invalid("metadata.name", name, f"must be no more than {limit} characters")
    elif not pattern.fullmatch(name):
        errors.invalid(
            "metadata.name", name,
            f"{what} must consist of lower case alphanumeric characters or '-', and must start and end "
            "with an alphanumeric character",
        )


def _check_labels(errors: _Errors, path: str, labels: object) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict):
        errors.invalid(path, labels, "must be a map of strings")
        return
    for key, value in labels.items():
        name = str(key).rsplit("/", 1)[-1]
        if not _LABEL_NAME.fullmatch(name) or len(name) > 63:
            errors.invalid(f"{path}", key, "name part must consist of alphanumeric characters, '-', '_' or '.'")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            errors.invalid(f"{path}", value, "a valid label must be an empty string or consist of alphanumeric "
                           "characters, '-', '_' or '.', and must start and end with an alphanumeric character")


def _extended(resource: str) -> bool:
    """Extended resources (GPUs, MIG slices): integer-only, never overcommitted."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests."))


def _check_resources(errors: _Errors, path: str, resources: object) -> dict[str, int]:
    """Validate a container's resources; returns its effective requests in units."""
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        errors.invalid(path, resources, "must be an object")
        return {}
    parsed: dict[str, dict[str, int]] = {"limits": {}, "requests": {}}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, dict):
            errors.invalid(f"{path}.{section}", values, "must be a map of quantities")
            continue
        for resource, raw in values.items():
            field = f"{path}.{section}[{resource}]"
            try:
                units = to_units(resource, raw)
            except ValueError as exc:
                errors.invalid(field, raw, str(exc))
                continue
            if units < 0:
                errors.invalid(field, raw, "must be greater than or equal to 0")
            if _extended(resource):
                number = parse_quantity(raw)
                if number != number.to_integral_value():
                    errors.invalid(field, raw, "must be an integer")
                    continue
            parsed[section][resource] = units
    limits, requests = parsed["limits"], parsed["requests"]
    for resource in set(limits) | set(requests):
        if _extended(resource):
            if resource not in limits:
                errors.forbidden(f"{path}.limits", "Limit must be set for non overcommitable resources")
            elif resource in requests and requests[resource] != limits[resource]:
                errors.invalid(f"{path}.requests", str(requests[resource]),
                               f"must be equal to {resource} limit of {limits[resource]}")
        elif resource in limits and resource in requests and requests[resource] > limits[resource]:
            errors.invalid(f"{path}.requests", str(requests[resource]), f"must be less than or equal to {resource} limit")
    # Like the API server's defaulting: a missing request defaults to the limit.
    return {**limits, **requests}


#: Label selector operators (pod and namespace selectors of an affinity term).
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _check_selector(errors: _Errors, path: str, selector: object) -> None:
    """A label selector (``matchLabels``, ``matchExpressions``) as the API server checks it."""
    if selector is None:
        return
    if not isinstance(selector, dict):
        errors.invalid(path, selector, "must be an object")
        return
    _check_labels(errors, f"{path}.matchLabels", selector.get("matchLabels"))
    for index, expr in enumerate(selector.get("matchExpressions") or []):
        epath = f"{path}.matchExpressions[{index}]"
        if not isinstance(expr, dict):
            errors.invalid(epath, expr, "must be an object")
            continue
        operator, values = expr.get("operator"), expr.get("values") or []
        if not expr.get("key"):
            errors.required(f"{epath}.key")
        if operator not in SELECTOR_OPERATORS:
            errors.invalid(f"{epath}.operator", operator, "not a valid selector operator")
        elif operator in ("In", "NotIn") and not values:
            errors.items.append(f"{epath}.values: Required value: must be specified when `operator` is 'In' or "
                                "'NotIn'")
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.forbidden(f"{epath}.values", "may not be specified when `operator` is 'Exists' or "
                             "'DoesNotExist'")


def _check_pod_anti_affinity(errors: _Errors, path: str, spec: dict) -> None:
    """The required podAntiAffinity terms the scheduler honours: a topology key and valid selectors."""
    affinity = spec.get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, dict) else None
    if terms is None:
        return
    tpath = f"{path}.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(terms, list):
        errors.invalid(tpath, terms, "must be a list of pod affinity terms")
        return
    for index, term in enumerate(terms):
        if not isinstance(term, dict):
            errors.invalid(f"{tpath}[{index}]", term, "must be an object")
            continue
        if not term.get("topologyKey"):
            errors.items.append(f"{tpath}[{index}].topologyKey: Required value: can not be empty")
        _check_selector(errors, f"{tpath}[{index}].labelSelector", term.get("labelSelector"))
        _check_selector(errors, f"{tpath}[{index}].namespaceSelector", term.get("namespaceSelector"))
        namespaces = term.get("namespaces")
        if namespaces is not None and (not isinstance(namespaces, list)
                                       or not all(isinstance(n, str) for n in namespaces)):
            errors.invalid(f"{tpath}[{index}].namespaces", namespaces, "must be a list of namespace names")


def _check_pod_template(errors: _Errors, path: str, template: object, *, restart: tuple[str, ...]) -> None:
    if not isinstance(template, dict):
        errors.required(path)
        return
    _check_labels(errors, f"{path}.metadata.labels", (template.get("metadata") or {}).get("labels"))
    spec = template.get("spec")
    if not isinstance(spec, dict):
        errors.required(f"{path}.spec")
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.required(f"{path}.spec.containers")
        return
    seen: set[str] = set()
    for index, container in enumerate(containers):
        cpath = f"{path}.spec.containers[{index}]"
        if not isinstance(container, dict):
            errors.invalid(cpath, container, "must be an object")
            continue
        name = container.get("name")
        if not name:
            errors.required(f"{cpath}.name")
        elif not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            errors.invalid(f"{cpath}.name", name, "a lowercase RFC 1123 label must consist of lower case "
                           "alphanumeric characters or '-'")
        elif name in seen:
            errors.items.append(f'{cpath}.name: Duplicate value: "{name}"')
        else:
            seen.add(name)
        image = container.get("image")
        if not image or not isinstance(image, str) or not image.strip():
            errors.required(f"{cpath}.image")
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                errors.invalid(f"{cpath}.{key}", value, "must be a list of strings")
        for env_index, env in enumerate(container.get("env") or []):
            env_name = env.get("name") if isinstance(env, dict) else None
            if not env_name:
                errors.required(f"{cpath}.env[{env_index}].name")
            elif not _ENV_NAME.fullmatch(str(env_name)):
                errors.invalid(f"{cpath}.env[{env_index}].name", env_name, "a valid environment variable name must "
                               "consist of alphabetic characters, digits, '_', '-', or '.'")
        _check_resources(errors, f"{cpath}.resources", container.get("resources"))
        security = container.get("securityContext") or {}
        if security.get("privileged"):
            errors.forbidden(f"{cpath}.securityContext.privileged", "disallowed by cluster policy")
    _check_pod_anti_affinity(errors, f"{path}.spec", spec)
    for index, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, dict) and "hostPath" in volume:
            errors.forbidden(f"{path}.spec.volumes[{index}].hostPath", "disallowed by cluster policy")
    policy = spec.get("restartPolicy", restart[0])
    if policy not in restart:
        errors.unsupported(f"{path}.spec.restartPolicy", policy, restart)


def _selector_matches(selector: object, labels: dict) -> bool:
    match = (selector or {}).get("matchLabels") or {} if isinstance(selector, dict) else {}
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def _check_provisioning_request(errors: _Errors, spec: dict) -> None:
    """What the ProvisioningRequest CRD's schema requires: a class, 1 to 32 pod sets each naming its PodTemplate
    with a count of at least 1, and string parameters."""
    if not spec.get("provisioningClassName"):
        errors.required("spec.provisioningClassName")
    podsets = spec.get("podSets")
    if not isinstance(podsets, list) or not 1 <= len(podsets) <= 32:
        errors.invalid("spec.podSets", podsets, "must have between 1 and 32 items")
        return
    for i, podset in enumerate(podsets):
        ref = podset.get("podTemplateRef") if isinstance(podset, dict) else None
        if not isinstance(ref, dict) or not ref.get("name"):
            errors.required(f"spec.podSets[{i}].podTemplateRef.name")
        count = podset.get("count") if isinstance(podset, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            errors.invalid(f"spec.podSets[{i}].count", count, "should be greater than or equal to 1")
    for key, value in (spec.get("parameters") or {}).items():
        if not isinstance(value, str) or len(value) > 255:
            errors.invalid(f"spec.parameters.{key}", value, "must be a string of at most 255 characters")


def _check_spec(errors: _Errors, obj: Manifest) -> None:
    kind = obj["kind"]
    spec = obj.get("spec")
    if kind in ("Namespace", "ConfigMap", "Secret", "ServiceAccount"):
        return
    if kind == "PodTemplate":  # a ProvisioningRequest's pod set: its body is the pod template, it has no spec
        _check_pod_template(errors, "template", obj.get("template"), restart=("Always", "OnFailure", "Never"))
        return
    if not isinstance(spec, dict):
        errors.required("spec")
        return
    if kind == "Job":
        _check_pod_template(errors, "spec.template", spec.get("template"), restart=("Never", "OnFailure"))
        for key in ("backoffLimit", "activeDeadlineSeconds", "completions", "parallelism"):
            value = spec.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                errors.invalid(f"spec.{key}", value, "must be greater than or equal to 0")
    elif kind == "Deployment":
        template = spec.get("template")
        _check_pod_template(errors, "spec.template", template, restart=("Always",))
        if not spec.get("selector"):
            errors.required("spec.selector")
        elif isinstance(template, dict) and not _selector_matches(
            spec["selector"], (template.get("metadata") or {}).get("labels") or {}
        ):
            errors.invalid("spec.template.metadata.labels", (template.get("metadata") or {}).get("labels"),
                           "`selector` does not match template `labels`")
        replicas = spec.get("replicas")
        if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
            errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")
    elif kind == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs")
        if not isinstance(replicas, dict) or not replicas:
            errors.required("spec.pytorchReplicaSpecs")
            return
        for role, rspec in replicas.items():
            rpath = f"spec.pytorchReplicaSpecs[{role}]"
            if role not in ("Master", "Worker"):
                errors.unsupported(rpath, role, ("Master", "Worker"))
                continue
            count = (rspec or {}).get("replicas", 1)
            if not isinstance(count, int) or count < 0 or (role == "Master" and count > 1):
                errors.invalid(f"{rpath}.replicas", count, "Master must have 1 replica, Worker 0 or more")
            _check_pod_template(errors, f"{rpath}.template", (rspec or {}).get("template"),
                                restart=("OnFailure", "Never", "Always", "ExitCode"))
            containers = (((rspec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            if containers and not any(isinstance(c, dict) and c.get("name") == "pytorch" for c in containers):
                errors.items.append(f"{rpath}.template.spec.containers: Required value: There is no container named "
                                    "pytorch")
    elif kind == "TrainJob":
        if not ((spec.get("runtimeRef") or {}).get("name")):
            errors.required("spec.runtimeRef.name")
        nodes = (spec.get("trainer") or {}).get("numNodes", 1)
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            errors.invalid("spec.trainer.numNodes", nodes, "should be greater than or equal to 1")
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 1):
            errors.invalid("spec.activeDeadlineSeconds", deadline, "should be greater than or equal to 1")
    elif kind == "ScaledObject":
        target = spec.get("scaleTargetRef") or {}
        if not target.get("name"):
            errors.required("spec.scaleTargetRef.name")
        low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not isinstance(low, int) or not isinstance(high, int) or low < 0 or high < low:
            errors.invalid("spec.minReplicaCount", low, "MinReplicaCount must be less than or equal to MaxReplicaCount")
        triggers = spec.get("triggers")
        if not isinstance(triggers, list) or not triggers:
            errors.required("spec.triggers")
        else:
            for index, trigger in enumerate(triggers):
                threshold = ((trigger or {}).get("metadata") or {}).get("threshold")
                try:
                    float(threshold)
                except (TypeError, ValueError):
                    errors.invalid(f"spec.triggers[{index}].metadata.threshold", threshold, "must be a number")
    elif kind == "ResourceQuota":
        for key, raw in (spec.get("hard") or {}).items():
            resource = key.removeprefix("requests.").removeprefix("limits.")
            try:
                to_units(resource, raw)
            except ValueError as exc:
                errors.invalid(f"spec.hard[{key}]", raw, str(exc))
            if _extended(resource) and not key.startswith("requests.") and "/" in key:
                errors.invalid(f"spec.hard[{key}]", key, "must be a standard resource for quota or prefixed "
                               "with requests.")
    elif kind == "ProvisioningRequest":
        _check_provisioning_request(errors, spec)
    elif kind == "Service":
        ports = spec.get("ports")
        if not isinstance(ports, list) or not ports:
            errors.required("spec.ports")
        else:
            for index, port in enumerate(ports):
                value = (port or {}).get("port")
                if not isinstance(value, int) or not 0 < value < 65536:
                    errors.invalid(f"spec.ports[{index}].port", value, "must be between 1 and 65535, inclusive")


def admit(obj: object, resources: Sequence[ResourceKind] = ()) -> Manifest:
    """Validate one manifest of a kind served here or declared in ``resources``; returns it
    normalised (namespace defaulted). Raises Invalid."""
    if not isinstance(obj, dict):
        raise Invalid("Object 'Kind' is missing in object: not a mapping", status=400)
    if not obj.get("kind") or not isinstance(obj.get("kind"), str):
        raise Invalid(f"Object 'Kind' is missing in '{json.dumps(obj, default=str)[:200]}'", status=400)
    kind = obj["kind"]
    if not obj.get("apiVersion"):
        raise Invalid(f"Object 'apiVersion' is missing in object of kind {kind!r}", status=400)
    resource = served(obj["apiVersion"], kind, resources)
    if resource is None:
        raise Invalid(f'no matches for kind "{kind}" in version "{obj["apiVersion"]}"', status=400)
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    errors = _Errors()
    if not name or not isinstance(name, str):
        raise Invalid(f'{kind_label(resource)} "" is invalid: metadata.name: Required value: name or generateName is '
                      "required", status=422)
    _check_name(errors, kind, name)
    namespaced = resource.namespaced
    namespace = meta.get("namespace")
    if namespaced:
        namespace = namespace or "default"
        if not _DNS_LABEL.fullmatch(str(namespace)) or len(str(namespace)) > 63:
            errors.invalid("metadata.namespace", namespace, "a lowercase RFC 1123 label must consist of lower case "
                           "alphanumeric characters or '-'")
    elif namespace:
        errors.forbidden("metadata.namespace", "not allowed on this type")
    _check_labels(errors, "metadata.labels", meta.get("labels"))
    _check_spec(errors, obj)
    errors.raise_for(resource, name)
    clean = {"apiVersion": obj["apiVersion"], "kind": kind, "metadata": dict(meta)}
    if namespaced:
        clean["metadata"]["namespace"] = namespace
    for key, value in obj.items():
        if key not in ("apiVersion", "kind", "metadata", "status"):
            clean[key] = value
    return clean


# -- compiling the plan the tick reads --------------------------------------------------------


def template_hash(template: Manifest) -> str:
    """A stable digest of a pod template (the Deployment's pod-template-hash)."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _selector_plan(selector: object) -> list[list] | None:
    """A label selector as ``[key, operator, values]`` expressions (matchLabels become ``In``); None
    for a null selector, which selects nothing ({} selects everything)."""
    if not isinstance(selector, dict):
        return None
    exprs = [[str(k), "In", [str(v)]] for k, v in sorted((selector.get("matchLabels") or {}).items())]
    exprs += [[e.get("key"), e.get("operator"), [str(v) for v in e.get("values") or []]]
              for e in selector.get("matchExpressions") or []]
    return exprs


def anti_affinity_plan(spec: Manifest) -> list[dict]:
    """The pod's required anti-affinity terms as the scheduler reads them.

    ``sel``: the pods it keeps away from (None: none); ``ns``/``nss``: the namespaces it looks in
    (the listed ones, and those ``nss`` selects; neither: the pod's own namespace, as Kubernetes
    defaults); ``topo``: the topology key.
    """
    terms = (((spec.get("affinity") or {}).get("podAntiAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    return [{"sel": _selector_plan(term.get("labelSelector")), "ns": sorted(term.get("namespaces") or []),
             "nss": _selector_plan(term.get("namespaceSelector")), "topo": term["topologyKey"]}
            for term in terms]


def pod_plan(template: Manifest, *, workload: str, role: str = "", count: int = 1, kind: str = "Job",
             display_name: str = "") -> dict:
    """What the scheduler and the controllers need of one pod template (``display_name``: its workload's name
    for people, the model name a Deployment's engine serves when its env and arguments name none)."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    requests: dict[str, int] = {}
    for container in containers:
        for resource, units in _check_resources(_Errors(), "", container.get("resources")).items():
            requests[resource] = requests.get(resource, 0) + units
    first = containers[0] if containers else {}
    env = {e.get("name"): str(e.get("value", "")) for e in first.get("env") or [] if isinstance(e, dict)}
    affinity = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    terms = [
        [[e.get("key"), e.get("operator"), list(e.get("values") or [])] for e in term.get("matchExpressions") or []]
        for term in affinity or []
    ]
    sim = sim_settings(env, workload=workload, kind=kind)
    schedule_s, pull_s, start_s = start_delays(env)
    plan = {
        "role": role,
        "count": count,
        "req": requests,
        "sel": dict(spec.get("nodeSelector") or {}),
        "tol": [[t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", "")]
                for t in spec.get("tolerations") or []],
        "aff": terms,
        "dur": sim.duration,
        "out": sim.outcome,
        "fails": sim.failed_attempts,
        "util": sim.utilization,
        # Simulated checkpoints (SLIPWAY_SIM_CHECKPOINT_EVERY, sandbox.checkpoints) and whether the
        # pod checkpoints and exits at a preemption notice (SLIPWAY_SIM_HONOUR_NOTICE).
        "ckpt": sim.checkpoint,
        "honour": sim.honour_notice,
        # Seconds between its training (metric) lines, SLIPWAY_SIM_LOG_EVERY (None: the default).
        "log": log_every(env),
        # A server answers its readiness probe once its model is loaded (SLIPWAY_SIM_LOAD_SECONDS).
        "ready": sim.load_seconds if first.get("readinessProbe") else 0,
        # Its start, stage by stage (sandbox.simulation.start_delays): bound this long after its creation,
        # its image pulled this long after, its container running this long after the pull.
        "sched_s": schedule_s, "pull_s": pull_s, "start_s": start_s,
        "hash": template_hash(template),
        "ctr": first.get("name", "main"),
        "img": first.get("image", ""),
        # What pulling the image ends with, the registry's verdict (sandbox.registry): "" pulls.
        "pull": pull_error(str(first.get("image", "")), inventory().registry),
        # The container's arguments, which the simulated logs echo (a training script's --lr …).
        "args": [str(a) for a in first.get("args") or []],
        # The port a server's log says it listens on: its first declared container port.
        "port": next((p.get("containerPort") for p in first.get("ports") or [] if p.get("containerPort")), None),
        # GPU memory it allocates (SLIPWAY_SIM_GPU_MEMORY_GB): what it takes of a shared GPU's.
        "mem": sim.gpu_memory_gb,
        # Its GPU telemetry's story (sandbox.simulation.phase): idle from SLIPWAY_SIM_IDLE_AFTER seconds
        # on (None: never), GPU memory leaking SLIPWAY_SIM_GPU_MEMORY_LEAK GiB a minute (None: none).
        "idle": sim.idle_after,
        "leak": sim.memory_leak_gb,
        # Its labels, which other pods' anti-affinity selects.
        "lbl": dict((template.get("metadata") or {}).get("labels") or {}),
    }
    if sim.curve:
        # A sweep trial's learning curve: the env entries it reads (SLIPWAY_SIM_OPTIMUM, sandbox.curves).
        plan["curve"] = sim.curve
    if kind == "Deployment":
        serving = engines.plan(first, env, display_name or workload)
        if serving is not None:  # its container is a real engine on this machine (sandbox.engines)
            plan["engine"] = serving
    consume = ((template.get("metadata") or {}).get("annotations") or {}).get(CONSUME_ANNOTATION)
    if consume:  # it binds on the nodes its ProvisioningRequest booked (sandbox.controllers.provisioning)
        plan["consume"] = str(consume)
    anti = anti_affinity_plan(spec)
    if anti:  # only then: the scheduler's inter-pod check costs nothing for pods without
        plan["anti"] = anti
    return plan


def ignores_disruption(policy: object) -> bool:
    """A Job's ``podFailurePolicy`` has a rule ``Ignore`` on the pod condition ``DisruptionTarget``:
    a pod its node took down (or a preemption) then spends no retry."""
    rules = policy.get("rules") if isinstance(policy, dict) else None
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict) or rule.get("action") != "Ignore":
            continue
        for pattern in rule.get("onPodConditions") or []:
            if isinstance(pattern, dict) and pattern.get("type") == "DisruptionTarget" \
                    and str(pattern.get("status", "True")) == "True":
                return True
    return False


#: The trigger KEDA wakes an endpoint from zero with: the requests its gateway holds (the endpoint's ScaledObject).
WAKE_TRIGGER = "gateway-requests-held"


def _wake(triggers: list) -> dict:
    """``{"wake": activationThreshold}`` when the ScaledObject has the gateway's wake-up trigger (held requests
    above it wake the endpoint), else nothing."""
    for trigger in triggers[1:]:
        if isinstance(trigger, dict) and trigger.get("name") == WAKE_TRIGGER:
            try:
                return {"wake": float((trigger.get("metadata") or {}).get("activationThreshold", 0))}
            except (TypeError, ValueError):
                return {"wake": 0.0}
    return {}


def _trainjob_plan(obj: Manifest, runtime: Manifest) -> dict:
    """A TrainJob's plan: the JobSet the Trainer builds on its runtime (:mod:`sandbox.trainer`), one pod
    plan per replicated job (the first one's pod 0 is rank 0), and the runtime's gang, restarts and success."""
    spec, workload = obj.get("spec") or {}, obj["metadata"]["name"]
    jobs = trainer.replicated_jobs(obj, runtime)
    pods = [pod_plan(template, workload=workload, role=name, count=count, kind="TrainJob")
            for name, count, template in jobs]
    if pods:
        pods[0]["rank0"] = True
    return {"pods": pods, "templates": {name: template for name, _, template in jobs},
            "gang": trainer.gang(runtime), "restarts": trainer.max_restarts(runtime),
            "fail_on_disruption": trainer.fails_on_disruption(runtime),
            "success": trainer.success_jobs(runtime), "suspend": bool(spec.get("suspend")),
            "deadline": spec.get("activeDeadlineSeconds")}


def compile_plan(obj: Manifest, runtimes: Mapping[str, Manifest] | None = None) -> dict:
    """The compact plan of an admitted object (empty for kinds no controller acts on). ``runtimes``: the
    cluster's ClusterTrainingRuntimes by name, which a TrainJob's plan is built on (admission made sure its is there)."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind == "TrainJob":
        return _trainjob_plan(obj, (runtimes or {})[spec["runtimeRef"]["name"]])
    workload = obj["metadata"]["name"]
    if kind == "Job":
        return {
            "pods": [pod_plan(spec["template"], workload=workload, kind=kind)],
            "backoff": spec.get("backoffLimit", 6),
            "deadline": spec.get("activeDeadlineSeconds"),
            "ignore_disruption": ignores_disruption(spec.get("podFailurePolicy")),
        }
    if kind == "PyTorchJob":
        run_policy = spec.get("runPolicy") or {}
        pods = [
            pod_plan(rspec["template"], workload=workload, role=role, count=int(rspec.get("replicas", 1)), kind=kind)
            for role, rspec in sorted(spec["pytorchReplicaSpecs"].items())  # Master before Worker
            if int(rspec.get("replicas", 1)) > 0
        ]
        return {"pods": pods, "backoff": run_policy.get("backoffLimit", 6),
                "deadline": run_policy.get("activeDeadlineSeconds")}
    if kind == "Deployment":
        display = (obj["metadata"].get("annotations") or {}).get(DISPLAY_NAME_ANNOTATION, "")
        return {"pods": [pod_plan(spec["template"], workload=workload, kind=kind, display_name=str(display))],
                "replicas": spec.get("replicas")}
    if kind == "ScaledObject":
        trigger = spec["triggers"][0]
        behavior = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior") or {}
        high = spec.get("maxReplicaCount", 100)
        annotations = obj["metadata"].get("annotations") or {}
        requested = annotations.get("slipway.dev/max-replicas", "")
        return {
            "target": spec["scaleTargetRef"]["name"],
            "min": spec.get("minReplicaCount", 0),
            "max": high,
            # How far the endpoint may grow beyond its granted ceiling: the demo load's scale.
            "user_max": int(requested) if requested.isascii() and requested.isdigit() else high,
            "threshold": float(trigger["metadata"]["threshold"]),
            "metric": trigger.get("name") or trigger.get("type", ""),
            "down_delay": int((behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds", 0) or 0),
            **_wake(spec["triggers"]),
        }
    if kind == "ProvisioningRequest":
        return provisioning_plan(spec)
    if kind == "PodTemplate":
        return {"pod": pod_plan(obj.get("template") or {}, workload=workload)}
    if kind == "ResourceQuota":
        hard = {}
        for key, raw in (spec.get("hard") or {}).items():
            resource = key.removeprefix("requests.").removeprefix("limits.")
            hard[key] = to_units(resource, raw)
        return {"hard": hard}
    return {}


def provisioning_plan(spec: Manifest) -> dict:
    """A ProvisioningRequest's plan: its class, its pod sets (``[template name, count]``) and how long its
    capacity is booked once provisioned (its ``ValidUntilSeconds`` parameter; Cluster Autoscaler's default
    when absent or not a whole number of seconds)."""
    raw = str((spec.get("parameters") or {}).get("ValidUntilSeconds", "")).strip()
    return {"class": str(spec.get("provisioningClassName") or ""),
            "sets": [[str((podset.get("podTemplateRef") or {}).get("name", "")), int(podset.get("count", 1))]
                     for podset in spec.get("podSets") or [] if isinstance(podset, dict)],
            "valid": int(raw) if raw.isascii() and raw.isdigit() else VALID_UNTIL_SECONDS}
