"""The flavor policy and its advice on every surface that submits or previews work (issue 37 items 3 and 5).

One rule (:mod:`quotas.policy`), asked by each kind's service on submission and in its preview: the API
answers 400 with field errors, the form puts the error next to the field, the dry run refuses as
submitting does, the form's preview panel says why — and nothing is written. Advice the choice
contradicts (``gpu_memory_gb`` over a unit's memory, training on a time-sliced GPU) comes back as
``warnings`` in the dry run and in the form's preview; the sandbox gets the memory as
``SLIPWAY_SIM_GPU_MEMORY_GB``.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import QuotaHold
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from tests.shared_flavors import make_shared_flavors
from workloads import services as workloads

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}

RUN_FORM = {"name": "tiny", "image": "registry.example.com/ml/trainer:1.4", "command": "python train.py",
            "flavor": "a10g-mps2", "gpus_per_worker": "1", "workers": "2", "priority": "normal", "max_retries": "2"}
ENDPOINT_FORM = {"name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "t4-ts4",
                 "gpus_per_replica": "2", "min_replicas": "1", "max_replicas": "1", "metric": "gpu_utilization",
                 "target": "70", "scale_down_delay_seconds": "300", "port": "8080", "readiness_path": "/health/ready",
                 "startup_timeout_seconds": "600"}


@pytest.fixture
def shared(team, flavors):
    made = make_shared_flavors()
    seed_team_quotas(team, {"t4-ts4": 4, "a10g-mps2": 2, "l4": 2}, Decimal("100000"))
    return made


def nothing_written() -> bool:
    return not (TrainingRun.objects.exists() or InferenceEndpoint.objects.exists() or QuotaHold.objects.exists()
                or QueuedRequest.objects.exists())


# -- runs: API, dry run, form, preview --------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"flavor": "a10g-mps2", "workers": 2, "gpus_per_worker": 1}, "workers", "a distributed run (workers > 1)"),
    ({"flavor": "a10g-mps2", "workers": 1, "gpus_per_worker": 2}, "gpus_per_worker", "cannot add up units"),
    ({"flavor": "t4-ts4", "workers": 1, "gpus_per_worker": 1}, "flavor", "does not take training runs"),
])
def test_the_runs_api_and_its_dry_run_refuse_with_the_field_and_a_flavor_to_use(api, shared, published, overrides,
                                                                              field, words):
    for url in ("/api/v1/runs/", "/api/v1/runs/?dry_run=1"):
        response = api.post(url, run_payload(**overrides), format="json")
        assert response.status_code == 400, (url, response.json())
        [message] = response.json()["errors"][field]
        assert words in message and "l4" in message, message  # the whole GPU to use instead
    assert nothing_written() and published == []


def test_a_run_the_shared_flavor_takes_is_admitted_with_a_unit_and_no_warning(api, shared, published):
    body = api.post("/api/v1/runs/?dry_run=1", run_payload(flavor="a10g-mps2", gpus_per_worker=1), format="json").json()
    assert (body["outcome"], body["warnings"]) == ("admit", [])
    response = api.post("/api/v1/runs/", run_payload(flavor="a10g-mps2", gpus_per_worker=1), format="json")
    assert response.status_code == 201, response.json()
    assert QuotaHold.objects.held().get(ref=f"run:{response.json()['id']}").units == 1


def test_the_run_form_puts_the_refusal_next_to_the_field_and_writes_nothing(client, member, shared, published):
    client.force_login(member)
    response = client.post("/runs/new/", RUN_FORM)
    assert response.status_code == 400
    [error] = response.context["form"].errors["workers"]
    assert "a distributed run (workers > 1) needs whole GPUs" in error and "Use l4" in error
    assert 'id="id_workers_errors"' in response.content.decode()
    assert nothing_written()


def test_the_run_forms_preview_says_why_it_is_refused(client, member, shared):
    client.force_login(member)
    html = client.post("/runs/preview/", RUN_FORM, **HTMX).content.decode()
    assert "workers: a10g-mps2 is an MPS share of one GPU (1/2 of a NVIDIA-A10G)" in html
    assert "Starts now" not in html and nothing_written()


def test_the_run_dry_run_and_preview_warn_of_memory_and_training_against_the_advice(api, client, member, shared):
    make_shared_flavors(**{"t4-ts4": {"training": True}})  # allowed to train, still time-sliced
    body = api.post("/api/v1/runs/?dry_run=1", run_payload(flavor="t4-ts4", gpus_per_worker=1, gpu_memory_gb=70),
                    format="json").json()
    assert body["outcome"] == "admit"
    memory, training = body["warnings"]
    assert memory.startswith("A pod that needs 70 GB of GPU memory on t4-ts4 (a time-sliced 16 GB Tesla-T4")
    assert "t4-ts4 is time-sliced: a training run takes turns on the GPU" in training
    client.force_login(member)
    html = client.post("/runs/preview/", {**RUN_FORM, "flavor": "t4-ts4", "workers": "1", "gpu_memory_gb": "70"},
                       **HTMX).content.decode()
    assert 'id="preview-warnings"' in html and "A pod that needs 70 GB of GPU memory on t4-ts4" in html
    assert nothing_written()


def test_the_run_records_gpu_memory_and_its_pods_get_it_for_the_sandbox(api, shared, published):
    body = api.post("/api/v1/runs/", run_payload(flavor="a10g-mps2", gpus_per_worker=1, gpu_memory_gb=10.5),
                    format="json").json()
    assert body["gpu_memory_gb"] == 10.5
    run = TrainingRun.objects.get(pk=body["id"])
    [job] = [o for o in workloads.manifests(run) if o["kind"] == "Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLIPWAY_SIM_GPU_MEMORY_GB"] == "10.5"
    # The user's own value of the knob wins (the sandbox docs' way to script a failure).
    run.env = {"SLIPWAY_SIM_GPU_MEMORY_GB": "30"}
    assert run.pod_env()["SLIPWAY_SIM_GPU_MEMORY_GB"] == "30"
    run.gpu_memory_gb = None
    run.env = {}
    assert "SLIPWAY_SIM_GPU_MEMORY_GB" not in run.pod_env()


def test_gpu_memory_is_checked_as_a_number(api, shared):
    for bad in ("lots", 0, 5000, True):
        response = api.post("/api/v1/runs/", run_payload(flavor="a10g-mps2", gpus_per_worker=1, gpu_memory_gb=bad),
                            format="json")
        assert response.status_code == 400 and "gpu_memory_gb" in response.json()["errors"], bad


# -- endpoints: API, dry run, form, preview ---------------------------------------------------------


def test_the_endpoints_api_and_its_dry_run_refuse_more_than_one_unit_per_replica(api, shared, published):
    for url in ("/api/v1/endpoints/", "/api/v1/endpoints/?dry_run=1"):
        response = api.post(url, {**endpoint_payload(flavor="t4-ts4", gpus_per_replica=2), "team": "ml-research"},
                            format="json")
        assert response.status_code == 400, (url, response.json())
        [message] = response.json()["errors"]["gpus_per_replica"]
        assert "t4-ts4 gives each pod one unit (1/4 of a Tesla-T4)" in message and "use l4" in message
    assert nothing_written() and published == []


def test_an_endpoint_on_a_time_sliced_flavor_takes_a_unit_a_replica(api, shared, published):
    payload = {**endpoint_payload(flavor="t4-ts4", min_replicas=2, max_replicas=4), "team": "ml-research"}
    response = api.post("/api/v1/endpoints/", payload, format="json")
    assert response.status_code == 201, response.json()
    assert QuotaHold.objects.held().get(ref=f"ep:{response.json()['id']}").units == 2


def test_the_endpoint_form_and_preview_refuse_and_warn(client, member, shared, published):
    client.force_login(member)
    response = client.post("/endpoints/new/", ENDPOINT_FORM)
    assert response.status_code == 400
    assert "gives each pod one unit" in response.context["form"].errors["gpus_per_replica"][0]
    html = client.post("/endpoints/preview/", ENDPOINT_FORM, **HTMX).content.decode()
    assert "gpus_per_replica: t4-ts4 gives each pod one unit" in html
    html = client.post("/endpoints/preview/", {**ENDPOINT_FORM, "gpus_per_replica": "1", "gpu_memory_gb": "70"},
                       **HTMX).content.decode()
    assert 'id="preview-warnings"' in html and "A pod that needs 70 GB of GPU memory on t4-ts4" in html
    assert nothing_written()


def test_the_endpoint_dry_run_warns_when_time_sliced_replicas_outgrow_their_gpu(api, shared):
    payload = {**endpoint_payload(flavor="t4-ts4", gpu_memory_gb=6), "team": "ml-research"}
    body = api.post("/api/v1/endpoints/?dry_run=1", payload, format="json").json()
    [warning] = body["warnings"]
    assert "at 6 GB each, more than 2 on one GPU run out of memory" in warning
    assert nothing_written()


def test_the_forms_link_the_which_flavor_page_and_the_picker_says_how_a_unit_shares(client, member, shared):
    client.force_login(member)
    for url in ("/runs/new/", "/endpoints/new/"):
        html = client.get(url).content.decode()
        assert 'href="/help/flavors/"' in html, url
        assert "t4-ts4 — 0.10 USD/h" in html and "Time-sliced \u00d74 \u00b7 no isolation \u00b7 16 GB shared" in html
        assert "MPS \u00d72 \u00b7 partial isolation \u00b7 12 GB own" in html
