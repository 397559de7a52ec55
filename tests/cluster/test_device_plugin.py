"""The device plugin's sharing ConfigMap: its golden file, its validity, and each rule of the config validator.

The golden file ``golden/device_plugin_configs.yaml`` is what ``manage.py device_plugin_config``
prints for the sample flavors; regenerate it with ``SLIPWAY_UPDATE_GOLDEN=1`` like the others.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cluster.manifests.device_plugin import build_device_plugin_configmap, render, sharing_config
from cluster.nvidia import config_errors, configmap_errors
from tests.cluster import samples
from tests.golden import K8S_VERSIONS, assert_golden

GOLDEN = Path(__file__).parent / "golden" / "device_plugin_configs.yaml"
FLAVORS = [samples.A100, samples.MIG_1G, samples.T4_TS4, samples.A10G_MPS2, samples.A10G_MPS2_RENAMED]


def configmap() -> dict[str, Any]:
    return build_device_plugin_configmap(FLAVORS)


def test_it_matches_the_golden_file() -> None:
    assert_golden(GOLDEN, render(configmap()))


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_file_is_a_valid_configmap_in_strict_mode(version: str) -> None:
    [document] = list(yaml.safe_load_all(GOLDEN.read_text()))
    assert document == configmap()  # the literal blocks read back as the same config texts
    kubernetes_validate.validate(document, version, strict=True)


def test_it_holds_one_config_per_shared_flavor_and_the_default_that_shares_nothing() -> None:
    configs = {name: yaml.safe_load(text) for name, text in configmap()["data"].items()}
    # Whole GPUs and MIG slices use the default config: no config of their own.
    assert set(configs) == {"none", "t4-ts4", "a10g-mps2", "a10g-mps2-shared"}
    assert configs["none"] == {"version": "v1"}  # no sharing, and no flags: the plugin's MIG strategy stays
    for flavor in (samples.T4_TS4, samples.A10G_MPS2, samples.A10G_MPS2_RENAMED):
        config = configs[flavor.name]
        [(key, replicated)] = config["sharing"].items()
        assert key == {"time-slicing": "timeSlicing", "mps": "mps"}[flavor.sharing]
        assert replicated["renameByDefault"] is (flavor.resource_name == "nvidia.com/gpu.shared")
        assert replicated["failRequestsGreaterThanOne"] is True
        assert replicated["resources"] == [{"name": "nvidia.com/gpu", "replicas": flavor.replicas}]
        assert config["version"] == "v1" and config["flags"] == {"migStrategy": "none"}
    assert configmap_errors(configmap()) == []


def test_it_is_the_same_whatever_the_order_of_the_flavors() -> None:
    assert build_device_plugin_configmap(reversed(FLAVORS)) == configmap()


def valid() -> dict[str, Any]:
    return sharing_config(samples.T4_TS4)


def mps() -> dict[str, Any]:
    return sharing_config(samples.A10G_MPS2)


def _set(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``config`` with the value at a dotted path (``sharing.timeSlicing.resources.0.replicas``) set, or
    removed when ``value`` is :data:`DELETE`."""
    config = copy.deepcopy(config)
    *parents, last = path.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return config


DELETE = object()
TS = "sharing.timeSlicing"
RULES = [
    # (what, config, a fragment of the one error expected)
    ("version other than v1", lambda: _set(valid(), "version", "v2"), "version must be 'v1'"),
    ("no version", lambda: _set(valid(), "version", DELETE), "version must be 'v1'"),
    ("replicas 0", lambda: _set(valid(), f"{TS}.resources.0.replicas", 0), "whole number above 0"),
    ("replicas negative", lambda: _set(valid(), f"{TS}.resources.0.replicas", -2), "whole number above 0"),
    ("replicas as text", lambda: _set(valid(), f"{TS}.resources.0.replicas", "4"), "whole number above 0"),
    ("replicas missing", lambda: _set(valid(), f"{TS}.resources.0.replicas", DELETE), "whole number above 0"),
    ("one replica (Slipway)", lambda: _set(valid(), f"{TS}.resources.0.replicas", 1), "at least 2"),
    ("no resources", lambda: _set(valid(), f"{TS}.resources", []), "at least one resource"),
    ("resources missing", lambda: _set(valid(), f"{TS}.resources", DELETE), "at least one resource"),
    ("resource without a name", lambda: _set(valid(), f"{TS}.resources.0.name", DELETE), "name is missing"),
    ("MPS on a MIG device", lambda: _set(mps(), "sharing.mps.resources.0.name", "nvidia.com/mig-1g.10gb"),
     "MPS shares only full GPUs"),
    ("MPS with migStrategy mixed", lambda: _set(mps(), "flags.migStrategy", "mixed"), "migStrategy 'mixed'"),
    ("an unknown MIG strategy", lambda: _set(valid(), "flags.migStrategy", "all"), "flags.migStrategy must be one of"),
    ("rename to another name", lambda: _set(valid(), f"{TS}.resources.0.rename", "nvidia.com/t4"),
     "rename is ignored"),
    ("a devices subset", lambda: _set(valid(), f"{TS}.resources.0.devices", [0]), "devices is ignored"),
    ("two sharing strategies", lambda: _set(valid(), "sharing.mps", mps()["sharing"]["mps"]),
     "one sharing strategy per config"),
    ("failRequestsGreaterThanOne false", lambda: _set(valid(), f"{TS}.failRequestsGreaterThanOne", False),
     "failRequestsGreaterThanOne must be true"),
    ("failRequestsGreaterThanOne missing", lambda: _set(valid(), f"{TS}.failRequestsGreaterThanOne", DELETE),
     "failRequestsGreaterThanOne must be true"),
    ("renameByDefault as text", lambda: _set(valid(), f"{TS}.renameByDefault", "yes"),
     "renameByDefault must be true or false"),
    ("a typo the plugin would ignore", lambda: _set(_set(valid(), "sharing.timeslicing", valid()["sharing"]["timeSlicing"]),
                                                    TS, DELETE), "unknown key 'sharing.timeslicing'"),
    ("an unknown top-level key", lambda: _set(valid(), "sharin", {}), "unknown key 'sharin'"),
    ("a resource that is no GPU", lambda: _set(valid(), f"{TS}.resources.0.name", "nvidia.com/gpu.shared"),
     "is no resource the device plugin shares"),
    ("a config that is no mapping", lambda: ["version: v1"], "a config is a mapping"),
]


def test_the_generated_configs_break_no_rule() -> None:
    assert config_errors(valid()) == [] and config_errors(mps()) == []
    assert config_errors(sharing_config(samples.A10G_MPS2_RENAMED)) == []


@pytest.mark.parametrize(("config", "expected"), [(build, fragment) for _, build, fragment in RULES],
                         ids=[what for what, _, _ in RULES])
def test_the_validator_refuses_what_the_plugin_refuses(config, expected: str) -> None:
    errors = config_errors(config())
    assert len(errors) == 1 and expected in errors[0], errors


def test_the_plugin_accepts_time_slicing_of_mig_slices_but_not_mps_of_them() -> None:
    mig = _set(valid(), f"{TS}.resources.0.name", "nvidia.com/mig-1g.10gb")
    assert config_errors(mig) == []
    assert config_errors(_set(mps(), "sharing.mps.resources.0.name", "nvidia.com/mig-1g.10gb")) != []


@pytest.mark.parametrize(("data", "expected"), [
    ({}, "holds no config"),
    ({"T4 pool": "version: v1\n"}, "not a valid node label value"),
    ({"-t4": "version: v1\n"}, "not a valid node label value"),
    ({"t" * 64: "version: v1\n"}, "not a valid node label value"),
    ({"t4": "version: [v1\n"}, "t4: does not parse"),
    ({"t4": "version: v2\n"}, "t4: version must be 'v1'"),
])
def test_it_checks_every_config_of_a_configmap_and_its_name(data: dict[str, str], expected: str) -> None:
    cm = {**configmap(), "data": data}
    errors = configmap_errors(cm)
    assert len(errors) == 1 and expected in errors[0], errors
