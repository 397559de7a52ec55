"""Input rules the third security review (issue 21) found too loose: volume items, mount paths
and image hosts. Each table lists what was accepted before its fix."""

from __future__ import annotations

import pytest

from cluster.images import image_registry
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from workloads.image_hosts import parse_ipv4, refused_registry_reason
from workloads.validation import Collector, check_image, check_volumes

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


# -- image hosts --------------------------------------------------------------------------------

#: Each was accepted by the string compare before (issue 21), and each makes the node send a
#: request to itself, its link-local network, a metadata service or the cluster's inside.
REFUSED_IMAGES = [
    "localhost./x", "localhost:5000/x", "LOCALHOST/x", "registry.localhost/x",
    "2130706433:5000/x", "2130706433./x", "0x7f000001:5000/x", "0x7f000001./x", "0177.0.0.1/x", "127.1/x",
    "127.0.0.1:5000/x", "127.000.000.001/x", "0.0.0.0/x", "0:5000/x",
    "metadata.goog/x", "metadata.google.internal/x", "Metadata/x", "metadata:80/x", "instance-data./x",
    "instance-data:80/x", "Instance-Data/x", "169.254.169.254/x", "0xa9fea9fe./x", "2852039166:80/x",
    "100.100.100.200/x", "100.64.0.1/x", "10.0.0.1:5000/x", "172.16.3.4/x", "192.168.1.1/x", "10.1/x",
    "169.254.169.254.nip.io/x", "app.10.0.0.1.nip.io/x", "10-0-0-1.sslip.io/x", "a9fea9fe.nip.io/x",
    "0--1.sslip.io/x", "fd00--1.sslip.io/x", "127.0.0.1.example.com/x", "x.localtest.me/x",
    "kubernetes.default.svc/x", "kubernetes.default/x", "kubernetes.default.svc.cluster.local/x",
    "kubernetes:443/x", "Kubernetes/x", "registry.kube-system.svc/x", "registry.ns.svc.cluster.local:5000/x",
    "registry.internal/x", "printer.local/x", "registry:5000/x",
    "[::1]:5000/x", "[::1]/x", "[fe80::1]/x", "[fd12:3456::1]/x", "[::ffff:127.0.0.1]/x", "[::ffff:a9fe:a9fe]/x",
    "[64:ff9b::a9fe:a9fe]/x", "[::]/x",
    "a..b/x", "1.2.3.256/x", "registry.example.com:0/x", "registry.example.com:99999/x", "[zz::1]/x",
    # Docker Hub's to Docker and containerd, but a refused host to anything reading the first
    # component as one: refused unless the registry is written out (docker.io/…, allowed below).
    "instance-data/x", "metadata/x", "0x7f000001/x", "2130706433/x", "kubernetes/x", "127.1/x/y",
]
ALLOWED_IMAGES = [
    "registry.example.com/team/trainer:1.4", "registry.example.com:5000/x", "registry.example.com./x",
    "ghcr.io/org/x@sha256:" + "a" * 64, "nvcr.io/nvidia/pytorch:24.01-py3", "docker.io/library/ubuntu",
    "8.8.8.8/x", "8.8.8.8:5000/x", "[2001:4860:4860::8888]:5000/x", "ec2-54-1-2-3.compute-1.amazonaws.com/x",
    # No host: Docker Hub (the first component is a host only with '.' or ':', as 'localhost' or in
    # upper case — distribution/reference's rule, which the runtime follows).
    "pytorch/pytorch:2.4", "ubuntu", "docker.io/instance-data/x", "docker.io/metadata/x", "docker.io/0x7f000001/x",
    "docker.io/kubernetes/x", "index.docker.io/metadata/x", "8x7f000001/x", "metadatax/x",
]


def image_errors(image: str) -> list[str]:
    col = Collector({"image": image})
    check_image(col)
    return col.errors.get("image", [])


@pytest.mark.parametrize("image", REFUSED_IMAGES)
def test_images_from_local_private_metadata_or_cluster_hosts_are_refused(image):
    assert image_errors(image) != []


@pytest.mark.parametrize("port", ["²", "9" * 5000, "0", "65536", "00443x"],
                         ids=["superscript", "5000-digits", "zero", "too-high", "not-digits"])
def test_a_registrys_port_that_is_no_port_is_refused_in_words(port):
    """int() raised on "²" (isdigit() takes it) and on 5,000 digits instead of answering. Neither reaches it through
    the API today (the image reference's pattern takes ASCII digits, 300 characters at most): the rule holds alone."""
    assert refused_registry_reason(f"registry.example.com:{port}").endswith("the port must be a number from 1 to 65535.")
    assert refused_registry_reason("registry.example.com:0443") is None


@pytest.mark.parametrize("image", ALLOWED_IMAGES)
def test_images_from_public_registries_and_docker_hub_are_accepted(image):
    assert image_errors(image) == []


@pytest.mark.parametrize(("image", "registry"), [
    ("instance-data/x", "docker.io"), ("0x7f000001/x", "docker.io"), ("Instance-Data/x", "Instance-Data"),
    ("localhost/x", "localhost"), ("127.1/x", "127.1"), ("[::1]:5000/x", "[::1]:5000"), ("ubuntu", "docker.io"),
])
def test_the_registry_is_read_as_the_runtime_reads_it(image, registry):
    assert image_registry(image) == registry


@pytest.mark.parametrize(("host", "address"), [
    ("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"),
    ("10.1", "10.0.0.1"), ("169.254.43518", "169.254.169.254"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("8.8.8.8", "8.8.8.8"), ("1.2.3.256", None), ("08.0.0.1", None), ("4294967296", None), ("1.2.3.4.5", None),
])
def test_numeric_hosts_are_read_as_inet_aton_reads_them(host, address):
    parsed = parse_ipv4(host)
    assert (str(parsed) if parsed else None) == address


@pytest.mark.parametrize("image", ["localhost./x", "2130706433:5000/x", "169.254.169.254.nip.io/x",
                                   "kubernetes.default.svc/x", "10.0.0.1:5000/x", "[::1]:5000/x"])
def test_the_api_refuses_them_for_runs_and_endpoints(api, quota, ep_quota, image):
    run = api.post("/api/v1/runs/", run_payload(image=image), format="json")
    endpoint = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(image=image)}, format="json")
    for response in (run, endpoint):
        assert response.status_code == 400
        assert "SLIPWAY_ALLOWED_REGISTRIES" in response.json()["errors"]["image"][0]
    assert not TrainingRun.objects.exists() and not InferenceEndpoint.objects.exists()


def test_an_endpoints_image_cannot_be_patched_to_one(api, ep_quota):
    created = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload()}, format="json")
    assert created.status_code == 201
    response = api.patch(f"/api/v1/endpoints/{created.json()['id']}/", {"image": "0177.0.0.1/x"}, format="json")
    assert response.status_code == 400 and "image" in response.json()["errors"]
    assert InferenceEndpoint.objects.get().image == endpoint_payload()["image"]


def test_the_allow_list_when_set_is_the_only_rule(api, quota, settings):
    settings.SLIPWAY_ALLOWED_REGISTRIES = ["10.0.0.1:5000", "Registry.Example.com.", "docker.io"]
    # Named, so allowed, however private; compared as the resolver sees names.
    assert image_errors("10.0.0.1:5000/x") == []
    assert image_errors("registry.example.com/x") == []
    assert image_errors("ubuntu") == [] and image_errors("index.docker.io/library/ubuntu") == []
    # Not named: refused, public or not (another port is another registry).
    for image in ("ghcr.io/x", "10.0.0.1/x", "10.0.0.1:5001/x", "registry.example.com:443/x", "127.1/x"):
        assert "allowed registry" in image_errors(image)[0]
    response = api.post("/api/v1/runs/", run_payload(image="10.0.0.1:5000/ml/t:1"), format="json")
    assert response.status_code == 201
