"""Input and access hardening found by probing the API (issue #14, item 5): each case answered 500,
was stored, or reached a manifest before its fix."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from jobs.models import TrainingRun
from jobs.validation import parse_run_request
from teams.models import Membership, Role
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def post_raw(api, body: str):
    return api.post("/api/v1/runs/", body, content_type="application/json")


@pytest.mark.parametrize("field", ["gpus_per_worker", "workers", "max_retries", "max_runtime_minutes"])
def test_integers_of_thousands_of_digits_are_a_400(api, quota, field):
    response = api.post("/api/v1/runs/", run_payload(**{field: "9" * 5000}), format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not TrainingRun.objects.exists()


def test_the_portal_form_refuses_them_too(client, member, quota):
    client.force_login(member)
    form = {"name": "x", "image": "registry.example.com/ml/t:1", "command": "python t.py", "flavor": "a100-80gb",
            "gpus_per_worker": "9" * 5000, "workers": "1", "max_retries": "2", "priority": "normal"}
    response = client.post("/runs/new/", form)
    assert response.status_code in (200, 400)
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("where", [
    '"env": {"A": "\\ud800"}', '"command": ["python", "\\udc00"]', '"args": ["\\ud83d"]',
    '"volumes": [{"claim": "data", "mount_path": "/data\\ud800"}]', '"flavor": "a100\\udfff"', '"\\ud800": 1',
])
def test_lone_surrogates_are_refused_at_the_door(api, quota, where):
    body = json.dumps({k: v for k, v in run_payload().items() if k not in ("env", "command", "args", "flavor")})
    body = body[:-1] + ', "command": ["python"], "flavor": "a100-80gb", ' + where + "}"
    response = post_raw(api, body)
    assert response.status_code == 400, response.content
    assert "surrogate" in response.json()["errors"]["non_field_errors"][0]
    assert not TrainingRun.objects.exists()


def test_a_team_with_a_lone_surrogate_is_a_400(api, quota):
    body = json.dumps(run_payload())[:-1] + ', "team": "ml-\\ud800"}'
    assert post_raw(api, body).status_code == 400


def test_an_api_500_answers_the_error_shape_with_debug_off(api, quota, settings, monkeypatch):
    settings.DEBUG = False
    monkeypatch.setattr("jobs.api.RunViewSet.list", lambda *a, **k: 1 / 0)
    api.raise_request_exception = False
    response = api.get("/api/v1/runs/")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"errors": {"non_field_errors": ["Internal error: the failure was logged."]}}


def test_a_portal_500_stays_an_html_page(member, settings, monkeypatch):
    settings.DEBUG = False
    monkeypatch.setattr("jobs.views.TrainingRun.objects", None)
    client = Client(raise_request_exception=False)
    client.force_login(member)
    response = client.get("/runs/")
    assert response.status_code == 500 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_CONFIG_DEVICES",
                                  "nvidia_visible_devices"])
def test_env_names_that_steer_the_gpu_runtime_are_refused(name):
    with pytest.raises(Exception) as caught:
        parse_run_request({**run_payload(), "env": {name: "all"}})
    assert "GPU runtime" in str(caught.value)


@pytest.mark.parametrize("field", ["env", "secret_env"])
@pytest.mark.parametrize("name", ["CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "cuda_mps_log_directory"])
def test_env_names_that_steer_mps_are_refused_as_nvidia_ones_are(name, field):
    """Security review 5 #9b: on an MPS flavor these would pick another daemon, or lift the share
    (threads, pinned memory) the flavor sets."""
    with pytest.raises(Exception) as caught:
        parse_run_request({**run_payload(), field: {name: "100"}})
    assert "GPU runtime" in str(caught.value) and name in str(caught.value) and "100" not in str(caught.value)


def test_cuda_visible_devices_only_narrows_and_is_allowed():
    assert parse_run_request({**run_payload(), "env": {"CUDA_VISIBLE_DEVICES": "0"}}).env == (
        ("CUDA_VISIBLE_DEVICES", "0"),)


@pytest.mark.parametrize("path", ["//etc", "/./etc", "/etc/../etc", "/var//run/docker.sock", "/run/containerd",
                                  "/run/containerd/containerd.sock", "/data:rw", "/da\tta", "/da\nta", "///"])
def test_mount_paths_are_normalised_before_they_are_checked(path):
    with pytest.raises(Exception) as caught:
        parse_run_request({**run_payload(), "volumes": [{"claim": "data", "mount_path": path}]})
    assert "volumes" in str(caught.value)


def test_a_harmless_mount_path_is_kept_normalised():
    request = parse_run_request({**run_payload(), "volumes": [{"claim": "data", "mount_path": "/data/./set//a/"}]})
    assert request.volumes[0].mount_path == "/data/set/a"


@pytest.mark.parametrize("image", [
    "127.0.0.1:5000/ml/t:1", "localhost:5000/ml/t:1", "localhost/ml/t", "[::1]:5000/ml/t", "169.254.169.254/ml/t",
    "metadata.google.internal/ml/t", "0.0.0.0/ml/t", "registry.localhost/ml/t",
])
def test_images_from_loopback_link_local_or_metadata_hosts_are_refused(image):
    with pytest.raises(Exception) as caught:
        parse_run_request({**run_payload(), "image": image})
    assert "image" in str(caught.value)


def test_an_allow_list_may_name_a_local_registry(settings):
    settings.SLIPWAY_ALLOWED_REGISTRIES = ["localhost:5000"]
    assert parse_run_request({**run_payload(), "image": "localhost:5000/ml/t:1"}).image == "localhost:5000/ml/t:1"


@pytest.mark.parametrize(("change", "status"), [("removed", 404), ("viewer", 403)])
def test_an_idempotent_replay_checks_access_again(api, member, team, quota, change, status):
    headers = {"HTTP_IDEMPOTENCY_KEY": "submit-1"}
    assert api.post("/api/v1/runs/", run_payload(), format="json", **headers).status_code == 201
    membership = Membership.objects.get(user=member, team=team)
    if change == "removed":
        membership.delete()
    else:
        membership.role = Role.VIEWER
        membership.save()
    replay = api.post("/api/v1/runs/", run_payload(), format="json", **headers)
    assert replay.status_code == status
    assert "Idempotent-Replayed" not in replay
