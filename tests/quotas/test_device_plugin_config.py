"""``manage.py device_plugin_config``: the device plugin's sharing ConfigMap from the flavors in the database."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from fleet.models import GpuFlavor

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("device_plugin_config", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def configs(text: str) -> dict[str, dict]:
    [document] = list(yaml.safe_load_all(text))
    assert document["kind"] == "ConfigMap"
    return {name: yaml.safe_load(config) for name, config in document["data"].items()}


def test_it_prints_one_config_per_active_shared_flavor_as_the_flavors_say(flavors):
    GpuFlavor.objects.filter(name="a10g-mps2").update(resource_name="nvidia.com/gpu.shared")
    printed = configs(run()[0])
    shared = GpuFlavor.objects.filter(sharing__in=("time-slicing", "mps"), active=True)
    assert set(printed) == {"none", *shared.values_list("name", flat=True)} == {"none", "t4-ts4", "a10g-mps2"}
    for flavor in shared:
        [(key, replicated)] = printed[flavor.name]["sharing"].items()
        assert key == {"time-slicing": "timeSlicing", "mps": "mps"}[flavor.sharing]
        assert replicated == {"renameByDefault": flavor.resource_name == "nvidia.com/gpu.shared",
                              "failRequestsGreaterThanOne": True,
                              "resources": [{"name": "nvidia.com/gpu", "replicas": flavor.replicas}]}
    assert printed["a10g-mps2"]["sharing"]["mps"]["renameByDefault"] is True
    assert "sharing" not in printed["none"]


def test_it_follows_the_flavors_and_leaves_out_retired_ones(flavors):
    t4 = flavors["t4-ts4"]
    t4.replicas = 8
    t4.save()
    GpuFlavor.objects.filter(name="a10g-mps2").update(active=False)
    printed = configs(run()[0])
    assert set(printed) == {"none", "t4-ts4"}
    assert printed["t4-ts4"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]


def test_it_writes_the_same_yaml_to_a_file(flavors, tmp_path):
    target = tmp_path / "configs.yaml"
    printed, _ = run()
    _, said = run("--output", str(target), "--namespace", "nvidia-device-plugin")
    assert f"Wrote 3 configs to {target}" in said
    assert target.read_text() == printed.replace("namespace: gpu-operator", "namespace: nvidia-device-plugin")


def test_it_refuses_a_directory_that_does_not_exist(flavors, tmp_path):
    with pytest.raises(CommandError, match="is no directory"):
        run("--output", str(tmp_path / "missing" / "configs.yaml"))


def test_it_refuses_to_print_a_config_the_device_plugin_would_refuse(flavors):
    # Written around clean() (which refuses it): one replica shares nothing.
    GpuFlavor.objects.filter(name="t4-ts4").update(replicas=1)
    with pytest.raises(CommandError, match=r"t4-ts4: sharing\.timeSlicing\.resources\[0\]\.replicas must be at least 2"):
        run()


def test_it_prints_the_default_config_alone_without_shared_flavors(flavors):
    GpuFlavor.objects.filter(sharing__in=("time-slicing", "mps")).update(active=False)
    printed, said = run()
    assert configs(printed) == {"none": {"version": "v1"}}
    assert "only the default config 'none'" in said
