"""deploy/device-plugin/: the demo flavors' device plugin sharing configs, never drifting from the flavors.

The file is what ``manage.py device_plugin_config`` writes for the demo flavors (quotas/demo.py);
after changing them, regenerate it with
``.venv/bin/python manage.py device_plugin_config -o deploy/device-plugin/sharing-configs.yaml``
on a database seeded with the demo (or from :func:`demo_configmap`, as this test does).
Every object under deploy/ is validated by tests/deploy/test_manifests.py as well.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cluster.manifests.device_plugin import build_device_plugin_configmap, render
from cluster.nvidia import configmap_errors
from fleet.models import GpuFlavor
from quotas.demo import flavor_definitions

FILE = Path(__file__).resolve().parents[2] / "deploy" / "device-plugin" / "sharing-configs.yaml"


def demo_configmap() -> dict:
    """The ConfigMap of the demo flavors, from their definitions (unsaved flavors: no database needed)."""
    return build_device_plugin_configmap(GpuFlavor(**definition).to_spec() for definition in flavor_definitions())


def test_the_deployed_file_is_what_the_demo_flavors_generate() -> None:
    assert FILE.read_text() == render(demo_configmap()), (
        f"{FILE.name} drifted from quotas/demo.py: regenerate it (see this module's docstring)")


def test_it_shares_the_demo_gpus_as_their_flavors_say() -> None:
    [document] = list(yaml.safe_load_all(FILE.read_text()))
    assert configmap_errors(document) == []
    configs = {name: yaml.safe_load(text) for name, text in document["data"].items()}
    shared = [GpuFlavor(**d) for d in flavor_definitions() if d.get("sharing") in ("time-slicing", "mps")]
    assert {f.name for f in shared} == {"t4-ts4", "a10g-mps2"}
    assert set(configs) == {"none"} | {f.name for f in shared}
    for flavor in shared:
        [(key, replicated)] = configs[flavor.name]["sharing"].items()
        assert key == ("timeSlicing" if flavor.sharing == "time-slicing" else "mps")
        assert replicated["resources"] == [{"name": flavor.resource_name, "replicas": flavor.replicas}]
        assert replicated["renameByDefault"] is False and replicated["failRequestsGreaterThanOne"] is True
