"""Secret env of runs: stored apart, put in a Kubernetes Secret, referenced from the pods, shown masked.

The value must be absent from every page, API response and manifest; the Secret is created by
the apply task before the pods and deleted with the run's objects.
"""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import QuotaHold
from jobs.constants import RunState
from jobs.models import TrainingRun
from sandbox.backend import SandboxBackend
from sandbox.models import SimObject
from teams.models import AuditEvent, IdempotencyRecord
from tests.backends import use_backend
from tests.factories import secret_values
from tests.jobs.conftest import run_payload
from tests.jobs.test_reconcile import iso
from tests.jobs.test_views import form_data
from workloads import lifecycle
from workloads.constants import SECRET_MASK
from workloads.cycle import reconcile as rec
from workloads.models import SecretEnv
from workloads.registry import resource_kinds
from workloads.tasks import apply_workload, delete_workload

pytestmark = pytest.mark.django_db

#: Distinctive enough that finding it anywhere is a leak, not a coincidence.
VALUE = "hf_s3cr3t-V4LUE-9f8e7d"
MASKED = f"HF_TOKEN={SECRET_MASK}"


def post_run(api, **overrides):
    return api.post("/api/v1/runs/", run_payload(**{"secret_env": {"HF_TOKEN": VALUE}, **overrides}), format="json")


def assert_nowhere(*texts: str) -> None:
    for text in texts:
        assert VALUE not in text
        assert base64.b64encode(VALUE.encode()).decode() not in text


# -- the API ---------------------------------------------------------------------------------------


def test_it_shows_secret_env_masked_in_every_api_response(api, quota, published):
    response = post_run(api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["secret_env"] == {"HF_TOKEN": SECRET_MASK} and body["env"] == {"WANDB_MODE": "offline"}
    run_id = body["id"]
    detail = api.get(f"/api/v1/runs/{run_id}/")
    listing = api.get("/api/v1/runs/")
    manifest = api.get(f"/api/v1/runs/{run_id}/manifest/")
    manifest_yaml = api.get(f"/api/v1/runs/{run_id}/manifest/?format=yaml")
    assert detail.json()["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    assert listing.json()["results"][0]["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    assert_nowhere(response.content.decode(), detail.content.decode(), listing.content.decode(),
                   manifest.content.decode(), manifest_yaml.content.decode())
    [job] = manifest.json()
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"run-{run_id}-env", "key": "HF_TOKEN"}}} in env


def test_the_create_response_shows_the_names_it_stored_without_reading_them_back(api, quota, published):
    with CaptureQueriesContext(connection) as created:
        body = post_run(api).json()
    assert body["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    reads = [q["sql"] for q in created.captured_queries if q["sql"].startswith("SELECT") and "secretenv" in q["sql"]]
    assert reads == []
    # A later read of the same run reads the names from the table.
    with CaptureQueriesContext(connection) as shown:
        assert api.get(f"/api/v1/runs/{body['id']}/").json()["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    assert any("secretenv" in q["sql"] for q in shown.captured_queries)


def test_it_keeps_the_value_out_of_the_spec_the_audit_log_and_the_idempotency_record(api, quota, published):
    response = api.post("/api/v1/runs/", run_payload(secret_env={"HF_TOKEN": VALUE}), format="json",
                        HTTP_IDEMPOTENCY_KEY="secret-1")
    replay = api.post("/api/v1/runs/", run_payload(secret_env={"HF_TOKEN": VALUE}), format="json",
                      HTTP_IDEMPOTENCY_KEY="secret-1")
    run = TrainingRun.objects.get()
    assert replay.json()["id"] == run.pk and replay.json()["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    assert_nowhere(str(run.env), str(list(AuditEvent.objects.values())), str(list(IdempotencyRecord.objects.values())),
                   response.content.decode())
    stored = SecretEnv.objects.get(ref=run.ref)
    assert secret_values(run.ref) == {"HF_TOKEN": VALUE} and stored.names == ["HF_TOKEN"] and VALUE not in str(stored)


@pytest.mark.parametrize(("secret_env", "env", "message"), [
    ({"WANDB_MODE": "x"}, {"WANDB_MODE": "offline"}, "WANDB_MODE is set in env too"),
    ({"HF_TOKEN": ""}, None, "The value of HF_TOKEN is empty"),
    ({"HF_TOKEN": SECRET_MASK}, None, "the mask pages show for a secret"),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, None, "steers the GPU runtime"),
    ({"1BAD": "x"}, None, "Invalid variable name"),
    ({"HF_TOKEN": 5}, None, "must be a string"),
    ("HF_TOKEN=x", None, "Must be an object"),
])
def test_it_refuses_bad_secret_env_with_a_field_error_and_writes_nothing(api, quota, published, secret_env, env,
                                                                         message):
    payload = run_payload(secret_env=secret_env, **({"env": env} if env else {}))
    response = api.post("/api/v1/runs/", payload, format="json")
    assert response.status_code == 400
    assert any(message in m for m in response.json()["errors"]["secret_env"]), response.json()
    assert not TrainingRun.objects.exists() and not SecretEnv.objects.exists() and published == []


def test_it_never_repeats_a_value_in_an_error(api, quota, published):
    response = post_run(api, secret_env={"HF_TOKEN": VALUE + "\x00"})
    assert response.status_code == 400
    assert_nowhere(response.content.decode())


def test_a_rejected_submission_leaves_no_secret_behind(api, quota, published):
    response = post_run(api, gpus_per_worker=64)  # more than the team's quota, ever
    assert response.status_code == 400
    assert not TrainingRun.objects.exists() and not SecretEnv.objects.exists() and not QuotaHold.objects.exists()


# -- the portal ------------------------------------------------------------------------------------


def test_it_keeps_the_value_out_of_every_page(client, member, team, quota, published, fake_backend):
    client.force_login(member)
    response = client.post("/runs/new/", form_data(secret_env=f"HF_TOKEN={VALUE}"))
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and secret_values(run.ref) == {"HF_TOKEN": VALUE}
    detail = client.get(f"/runs/{run.pk}/").content.decode()
    listing = client.get("/runs/").content.decode()
    again = client.get(f"/runs/new/?from={run.pk}").content.decode()
    dashboard = client.get("/").content.decode()
    assert_nowhere(detail, listing, again, dashboard)
    assert MASKED in detail  # the spec shows the name, masked
    assert f"name: run-{run.pk}-env" in detail and "secretKeyRef" in detail  # the manifest references it
    # "Run again" offers the name, its value to type again.
    assert ">HF_TOKEN=\n</textarea>" in again or ">\nHF_TOKEN=</textarea>" in again


def test_it_asks_for_secret_values_again_when_the_form_has_errors(client, member, team, quota, published):
    client.force_login(member)
    response = client.post("/runs/new/", form_data(secret_env=f"HF_TOKEN={VALUE}", image="Bad Image"))
    html = response.content.decode()
    assert response.status_code == 400
    assert_nowhere(html)
    assert "HF_TOKEN=</textarea>" in html  # the name stays, the value is typed again
    assert not SecretEnv.objects.exists()


def test_it_names_a_bad_secret_line_by_number_only(client, member, team, quota, published):
    client.force_login(member)
    html = client.post("/runs/new/", form_data(secret_env=f"HF_TOKEN={VALUE}\n{VALUE}")).content.decode()
    assert "Line 2: expected KEY=VALUE." in html.split('id="id_secret_env_errors"', 1)[1]
    assert_nowhere(html)


def test_it_submits_the_run_again_form_once_the_secret_is_typed_again(client, member, team, quota, published):
    client.force_login(member)
    client.post("/runs/new/", form_data(secret_env=f"HF_TOKEN={VALUE}"))
    old = TrainingRun.objects.get()
    TrainingRun.objects.filter(pk=old.pk).update(state=RunState.SUCCEEDED)
    data = {k: v for k, v in client.get(f"/runs/new/?from={old.pk}").context["form"].initial.items() if v}
    refused = client.post("/runs/new/", data)
    assert refused.status_code == 400 and "The value of HF_TOKEN is empty" in refused.content.decode()
    data["secret_env"] = "HF_TOKEN=rotated"
    assert client.post("/runs/new/", data).status_code == 302
    new = TrainingRun.objects.exclude(pk=old.pk).get()
    assert secret_values(new.ref) == {"HF_TOKEN": "rotated"}


# -- the cluster: the Secret before the pods, deleted with them -------------------------------------


def test_the_apply_task_creates_the_secret_before_the_runs_objects(api, quota, published, fake_backend):
    run_id = post_run(api).json()["id"]
    assert apply_workload("run", run_id) == "applied"
    assert fake_backend.calls == ["apply", "apply_secret", "apply"]  # namespace, Secret, then the Job
    namespace = "team-ml-research"
    assert fake_backend.secrets == {(namespace, f"run-{run_id}-env"): ["HF_TOKEN"]}
    assert fake_backend.secret_values_seen == {base64.b64encode(VALUE.encode()).decode()}
    job = fake_backend.objects[(namespace, "Job", f"run-{run_id}")]
    assert_nowhere(yaml.safe_dump(job))
    delete_workload("run", run_id)
    assert fake_backend.secrets == {}


def test_a_run_without_secret_env_applies_in_one_batch_and_creates_no_secret(api, quota, published, fake_backend):
    run_id = api.post("/api/v1/runs/", run_payload(), format="json").json()["id"]
    assert apply_workload("run", run_id) == "applied"
    assert fake_backend.calls == ["apply"] and fake_backend.secrets == {}


def test_the_sandbox_records_the_secrets_keys_but_not_its_values(api, quota, published, settings):
    sandbox = SandboxBackend()
    use_backend(settings, sandbox)
    run_id = post_run(api).json()["id"]
    assert apply_workload("run", run_id) == "applied"
    secret = SimObject.objects.get(resource_kind="Secret")
    assert secret.name == f"run-{run_id}-env" and secret.namespace == "team-ml-research"
    assert secret.manifest["data"] == {"HF_TOKEN": ""}
    assert_nowhere(str(list(SimObject.objects.values())))
    # Not observed (a real cluster's Slipway may not list Secrets), and deleted with the run.
    [observed] = [o for o in sandbox.observe(resource_kinds()) if o.object_name == f"run-{run_id}"]
    assert {o["kind"] for o in observed.objects} == {"Job"}
    delete_workload("run", run_id)
    assert not SimObject.objects.filter(resource_kind="Secret").exists()


# -- once the run has ended --------------------------------------------------------------------------


def values_of(run_id: int) -> dict:
    return secret_values(f"run:{run_id}")


def test_a_run_that_finishes_leaves_its_secret_names_but_not_their_values(api, quota, published, fake_backend):
    run_id = post_run(api).json()["id"]
    assert apply_workload("run", run_id) == "applied"
    assert values_of(run_id) == {"HF_TOKEN": VALUE}  # kept while it may be applied again
    run = TrainingRun.objects.get(pk=run_id)
    now = timezone.now().replace(microsecond=0)
    fake_backend.set_finished(run.namespace, run.object_name, ok=True, started=iso(now - timedelta(minutes=5)),
                              finished=iso(now))
    rec.reconcile(fake_backend, now=now + timedelta(seconds=5))
    assert TrainingRun.objects.get(pk=run_id).state == RunState.SUCCEEDED
    assert values_of(run_id) == {}
    assert api.get(f"/api/v1/runs/{run_id}/").json()["secret_env"] == {"HF_TOKEN": SECRET_MASK}


@pytest.mark.parametrize("how", ["cancel", "fail"])
def test_a_cancelled_or_failed_run_forgets_its_secret_values(api, quota, published, how):
    run_id = post_run(api).json()["id"]
    if how == "cancel":
        assert api.post(f"/api/v1/runs/{run_id}/cancel/").status_code == 202
    else:
        assert lifecycle.fail(TrainingRun.objects.get(pk=run_id), "the image could not be pulled", "cluster")
    assert values_of(run_id) == {}
    assert SecretEnv.objects.get(ref=f"run:{run_id}").names == ["HF_TOKEN"]
