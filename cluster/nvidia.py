"""What NVIDIA's GPU Feature Discovery and device plugin do with shared GPUs, as pure rules.

Two facts of theirs decide whether a pod of a time-sliced or MPS flavor ever runs:

* **The node labels GPU Feature Discovery (GFD) puts on a node whose GPUs are shared**
  (k8s-device-plugin ``internal/lm/resource.go``). The keys always name the full-GPU resource
  ``nvidia.com/gpu``; when the device plugin's config replicates it (``replicas > 1``):

  - ``nvidia.com/gpu.product`` is ``<model>-SHARED``, unless the shared resource is renamed
    (``renameByDefault: true`` advertises ``nvidia.com/gpu.shared``), where it stays ``<model>``;
  - ``nvidia.com/gpu.replicas`` is the replica count, ``nvidia.com/gpu.sharing-strategy`` is
    ``time-slicing`` or ``mps`` (``none`` on unshared nodes).

  So a selector copied from a whole-GPU flavor (``nvidia.com/gpu.product: Tesla-T4``) matches no
  shared T4 at all. :func:`gfd_selector` is the one rule for what a flavor's pods select: the
  manifest builders (:func:`cluster.manifests.common.node_selector`, hence placement's
  :func:`cluster.capacity.offers`) and the flavor model's ``clean()`` both call it.

* **What the device plugin accepts in its config file** (``api/config/v1``; one config per node
  pool, in a ConfigMap, picked by the node label ``nvidia.com/device-plugin.config``).
  :func:`config_errors` checks a parsed config against the rules its parser and start-up
  enforce, plus Slipway's own (``failRequestsGreaterThanOne``, ``replicas >= 2``), so the
  ConfigMap ``manage.py device_plugin_config`` writes is refused here rather than by a plugin
  that crash-loops on a node (or, worse, silently ignores a field and shares nothing).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from cluster.specs import REPLICATED_SHARINGS, SHARING_MPS, SHARING_NONE, SHARING_TIME_SLICING

#: The extended resources of NVIDIA's device plugin (full GPUs, MIG slices, shared GPUs) all start with this: what
#: counts as a GPU in a node's allocatable, a pod's requests and an autoscaler's limits.
GPU_RESOURCE_PREFIX = "nvidia.com/"
#: The full-GPU resource: the only one time-slicing or MPS replicate here, and the prefix of GFD's label keys.
GPU_RESOURCE = "nvidia.com/gpu"
#: What the device plugin advertises shared GPUs as with ``renameByDefault: true`` (``<name>.shared``).
RENAMED_SHARED_RESOURCE = f"{GPU_RESOURCE}.shared"
PRODUCT_LABEL = f"{GPU_RESOURCE}.product"
REPLICAS_LABEL = f"{GPU_RESOURCE}.replicas"
SHARING_STRATEGY_LABEL = f"{GPU_RESOURCE}.sharing-strategy"
#: GFD's suffix to the product of a shared, not renamed, GPU.
SHARED_PRODUCT_SUFFIX = "-SHARED"
#: The node label whose value names the device plugin config a node uses (GPU Operator / Helm chart).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"

#: The config file's version, and its keys for each replicated sharing.
CONFIG_VERSION = "v1"
SHARING_CONFIG_KEYS = {SHARING_TIME_SLICING: "timeSlicing", SHARING_MPS: "mps"}
#: Top-level keys the plugin's config knows. Its parser ignores any other key silently, so a
#: typo ("timeslicing") would give a node that shares nothing: refused here instead.
CONFIG_KEYS = frozenset({"version", "flags", "resources", "sharing", "imex"})
SHARING_KEYS = frozenset(SHARING_CONFIG_KEYS.values())
REPLICATED_KEYS = frozenset({"renameByDefault", "failRequestsGreaterThanOne", "resources"})
RESOURCE_KEYS = frozenset({"name", "rename", "devices", "replicas"})
MIG_STRATEGIES = ("none", "single", "mixed")
#: A config name is a node label value (and a ConfigMap key): at most 63 characters.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?$")


def gfd_selector(gpu_model: str, resource_name: str, sharing: str, replicas: int) -> dict[str, str]:
    """The node labels GFD gives the nodes whose GPUs serve a flavor: what its pods select on.

    A whole GPU or a MIG slice: the product alone (``gpu_model``). A time-sliced or MPS unit: the
    product as GFD writes it on a shared node (``-SHARED`` unless the resource is renamed), the
    replica count and the sharing strategy, so a pod never lands on a node shared another way
    (its memory per unit and its isolation would not be what the flavor promises).
    """
    if sharing not in REPLICATED_SHARINGS:
        return {PRODUCT_LABEL: gpu_model}
    renamed = resource_name == RENAMED_SHARED_RESOURCE
    return {
        PRODUCT_LABEL: gpu_model if renamed else f"{gpu_model}{SHARED_PRODUCT_SUFFIX}",
        REPLICAS_LABEL: str(replicas),
        SHARING_STRATEGY_LABEL: sharing,
    }


def selector_conflicts(node_labels: dict[str, str], gpu_model: str, resource_name: str, sharing: str,
                       replicas: int) -> list[str]:
    """The ``key=value`` pairs of ``node_labels`` no node of this flavor carries, given what GFD labels them.

    A label GFD sets to another value (a plain product on a shared, not renamed flavor, another
    sharing strategy or replica count); on a whole-GPU or MIG flavor, also a sharing strategy
    other than ``none`` or a replica count above 1 (GFD writes those only on shared nodes).
    """
    gfd = gfd_selector(gpu_model, resource_name, sharing, replicas)
    conflicts = [f"{key}={value}" for key, value in node_labels.items() if key in gfd and str(value) != gfd[key]]
    if sharing not in REPLICATED_SHARINGS:
        strategy = node_labels.get(SHARING_STRATEGY_LABEL)
        if strategy is not None and str(strategy) != SHARING_NONE:
            conflicts.append(f"{SHARING_STRATEGY_LABEL}={strategy}")
        count = node_labels.get(REPLICAS_LABEL)
        if count is not None and not (str(count).isdigit() and int(str(count)) <= 1):
            conflicts.append(f"{REPLICAS_LABEL}={count}")
    return conflicts


def describe_selector(selector: dict[str, str]) -> str:
    """``key=value, key=value``: how errors and docs name a set of node labels."""
    return ", ".join(f"{key}={value}" for key, value in selector.items())


# -- the device plugin's config rules ----------------------------------------------------------


def valid_config_name(name: str) -> bool:
    """Whether ``name`` can name a config: a node label value and a ConfigMap key at once."""
    return bool(_LABEL_VALUE.fullmatch(name))


def config_errors(config: Any) -> list[str]:
    """What the device plugin (or Slipway) refuses in one parsed config file; ``[]`` when none.

    The plugin's rules (``api/config/v1``, ``cmd/nvidia-device-plugin/main.go``): version ``v1``;
    a replicated sharing lists resources, each named, with ``replicas > 0``; one sharing strategy
    per config (with both, the plugin runs MPS and drops the time-slicing silently); MPS only on
    full GPUs (``nvidia.com/gpu``: "sharing using MPS is not supported for MIG devices") and never
    with ``migStrategy: mixed`` (the plugin refuses to start); a per-resource ``rename`` or
    ``devices`` is ignored with a warning, so the only rename is ``renameByDefault`` to
    ``<name>.shared``. Slipway's: at least 2 replicas (1 is no sharing), and
    ``failRequestsGreaterThanOne: true`` (a pod asks for one unit; two replicas of one GPU would
    not be two GPUs). Unknown keys are refused because the plugin ignores them silently.
    """
    if not isinstance(config, dict):
        return ["a config is a mapping (version, flags, sharing)"]
    errors = [f"unknown key {key!r}: the device plugin would ignore it" for key in config if key not in CONFIG_KEYS]
    if config.get("version") != CONFIG_VERSION:
        errors.append(f"version must be {CONFIG_VERSION!r}, not {config.get('version')!r}")
    flags = config.get("flags") or {}
    if not isinstance(flags, dict):
        errors.append("flags must be a mapping")
        flags = {}
    mig_strategy = flags.get("migStrategy")
    if mig_strategy is not None and mig_strategy not in MIG_STRATEGIES:
        errors.append(f"flags.migStrategy must be one of {', '.join(MIG_STRATEGIES)}, not {mig_strategy!r}")
    sharing = config.get("sharing") or {}
    if not isinstance(sharing, dict):
        return [*errors, "sharing must be a mapping"]
    errors += [f"unknown key 'sharing.{key}': the device plugin would ignore it" for key in sharing
               if key not in SHARING_KEYS]
    strategies = [key for key in SHARING_CONFIG_KEYS.values() if sharing.get(key) is not None]
    if len(strategies) > 1:
        errors.append("one sharing strategy per config: timeSlicing and mps together leave the time-slicing unused")
    for key in strategies:
        errors += _replicated_errors(f"sharing.{key}", sharing[key], mps=key == SHARING_CONFIG_KEYS[SHARING_MPS])
    if SHARING_CONFIG_KEYS[SHARING_MPS] in strategies and mig_strategy == "mixed":
        errors.append("MPS with flags.migStrategy 'mixed' is refused by the device plugin: use 'none'")
    return errors


def _replicated_errors(where: str, replicated: Any, *, mps: bool) -> list[str]:
    if not isinstance(replicated, dict):
        return [f"{where} must be a mapping"]
    errors = [f"unknown key '{where}.{key}': the device plugin would ignore it" for key in replicated
              if key not in REPLICATED_KEYS]
    for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
        if flag in replicated and not isinstance(replicated[flag], bool):
            errors.append(f"{where}.{flag} must be true or false")
    if replicated.get("failRequestsGreaterThanOne") is not True:
        errors.append(f"{where}.failRequestsGreaterThanOne must be true: a pod asks for one shared unit, never more")
    resources = replicated.get("resources")
    if not isinstance(resources, list) or not resources:
        return [*errors, f"{where}.resources must list at least one resource"]
    for index, resource in enumerate(resources):
        errors += _resource_errors(f"{where}.resources[{index}]", resource, mps=mps)
    return errors


def _resource_errors(where: str, resource: Any, *, mps: bool) -> list[str]:
    if not isinstance(resource, dict):
        return [f"{where} must be a mapping with name and replicas"]
    errors = [f"unknown key '{where}.{key}': the device plugin would ignore it" for key in resource
              if key not in RESOURCE_KEYS]
    name = resource.get("name")
    if not name:
        errors.append(f"{where}.name is missing")
    elif mps and name != GPU_RESOURCE:
        errors.append(f"{where}: MPS shares only full GPUs ({GPU_RESOURCE}), not {name} "
                      "(the device plugin does not run MPS on MIG devices)")
    elif name != GPU_RESOURCE and not str(name).startswith("nvidia.com/mig-"):
        errors.append(f"{where}.name {name!r} is no resource the device plugin shares "
                      f"({GPU_RESOURCE} or nvidia.com/mig-<profile>)")
    replicas = resource.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas <= 0:
        errors.append(f"{where}.replicas must be a whole number above 0, not {replicas!r}")
    elif replicas < 2:
        errors.append(f"{where}.replicas must be at least 2: one replica shares nothing")
    if "rename" in resource:
        errors.append(f"{where}.rename is ignored by the device plugin: set renameByDefault to advertise "
                      f"{RENAMED_SHARED_RESOURCE}")
    if resource.get("devices", "all") != "all":
        errors.append(f"{where}.devices is ignored by the device plugin: every GPU of the node is shared")
    return errors


def configmap_errors(configmap: dict[str, Any]) -> list[str]:
    """What is wrong with a device plugin ConfigMap: its config names, and each config (:func:`config_errors`).

    Each value is a config file's text, parsed as the plugin does (YAML); one that does not parse
    is an error, not an exception.
    """
    data = configmap.get("data") or {}
    if not data:
        return ["the ConfigMap holds no config"]
    errors: list[str] = []
    for name, text in data.items():
        if not valid_config_name(name):
            errors.append(f"config name {name!r} is not a valid node label value (the node label "
                          f"{DEVICE_PLUGIN_CONFIG_LABEL} names it)")
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            errors.append(f"{name}: does not parse ({exc})")
            continue
        errors += [f"{name}: {error}" for error in config_errors(config)]
    return errors
