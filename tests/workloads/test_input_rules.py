"""Input rules the third security review (issue 21) found too loose: volume items, mount paths
and image hosts. Each table lists what was accepted before its fix."""

from __future__ import annotations

import pytest

from jobs.models import TrainingRun
from tests.jobs.conftest import run_payload
from workloads.validation import Collector, check_volumes

pytestmark = pytest.mark.django_db


def volume_errors(path: str) -> list[str]:
    col = Collector({"volumes": [{"claim": "data", "mount_path": path}]})
    check_volumes(col)
    return col.errors.get("volumes", [])


# -- volumes[] items ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [{"hostPath": "/"}, {"subPath": "x"}, {"hostPath": "/", "subPath": "x"},
                                   {"readOnly": True}])
def test_unknown_keys_in_a_volume_are_a_400_not_dropped(api, quota, extra):
    volume = {"claim": "data", "mount_path": "/data", **extra}
    response = api.post("/api/v1/runs/", run_payload(volumes=[volume]), format="json")
    assert response.status_code == 400
    [message] = response.json()["errors"]["volumes"]
    assert all(key in message for key in extra)
    assert not TrainingRun.objects.exists()


def test_a_volume_with_only_known_keys_is_accepted(api, quota):
    volume = {"claim": "data", "mount_path": "/data", "read_only": True}
    response = api.post("/api/v1/runs/", run_payload(volumes=[volume]), format="json")
    assert response.status_code == 201
    assert response.json()["volumes"] == [volume]


# -- mount paths --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    # symbolic links into refused roots
    "/var/lock", "/var/lock/x", "/var/run", "/var/run/secrets/kubernetes.io/serviceaccount", "/var//lock/",
    # where the NVIDIA runtime puts the driver, inside it, above it, and through /lib-style links
    "/usr/local/nvidia", "/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/x",
    "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/bin", "/bin",
    "/usr/lib/firmware/nvidia", "/lib/firmware/nvidia", "/usr/share/nvidia", "/usr/share/vulkan/icd.d",
    "/usr/share/glvnd", "/tmp/nvidia-mps", "/usr", "/usr/lib", "/lib", "/usr/local", "/usr/share",
    # the roots refused before
    "/etc", "/run/containerd", "/dev/shm", "/proc/1", "/sys",
])
def test_mount_paths_that_reach_runtime_or_driver_files_are_refused(path):
    [message] = volume_errors(path)
    assert "reserved path" in message


@pytest.mark.parametrize("path", ["/data", "/scratch", "/tmp", "/tmp/cache", "/usr/local/data", "/usr/local/cuda-data",
                                  "/var/lib/data", "/var/locks", "/home/user", "/libs", "/workspace/usr/lib64"])
def test_ordinary_mount_paths_stay_allowed(path):
    assert volume_errors(path) == []


def test_a_refused_link_says_where_it_points():
    [message] = volume_errors("/var/lock/x")
    assert "/run/lock/x" in message


def test_the_portal_form_refuses_them_too(client, member, quota):
    client.force_login(member)
    form = {"name": "x", "image": "registry.example.com/ml/t:1", "command": "python t.py", "flavor": "a100-80gb",
            "gpus_per_worker": "1", "workers": "1", "max_retries": "0", "priority": "normal",
            "volumes": "data:/usr/local/nvidia"}
    page = client.post("/runs/new/", form).content.decode()
    assert "GPU driver" in page
    assert not TrainingRun.objects.exists()
