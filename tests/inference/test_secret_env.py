"""Secret env of endpoints: set at creation, put in the endpoint's Secret, shown masked, never changed by a PATCH."""

from __future__ import annotations

import base64

import pytest

from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload
from tests.inference.test_views import FORM
from workloads.constants import SECRET_MASK
from workloads.models import SecretEnv
from workloads.tasks import apply_workload, delete_workload

pytestmark = pytest.mark.django_db

VALUE = "hf_ep-S3CRET-value-4242"


def assert_nowhere(*texts: str) -> None:
    for text in texts:
        assert VALUE not in text and base64.b64encode(VALUE.encode()).decode() not in text


def create(api, **overrides):
    payload = {**endpoint_payload(team="ml-research", env={"LOG_LEVEL": "info"}, secret_env={"HF_TOKEN": VALUE}),
               **overrides}
    return api.post("/api/v1/endpoints/", payload, format="json")


def test_it_shows_secret_env_masked_in_every_api_response_and_only_references_it(api, ep_quota, published):
    response = create(api)
    assert response.status_code == 201, response.json()
    endpoint_id = response.json()["id"]
    assert response.json()["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    detail = api.get(f"/api/v1/endpoints/{endpoint_id}/")
    listing = api.get("/api/v1/endpoints/")
    manifest = api.get(f"/api/v1/endpoints/{endpoint_id}/manifest/")
    manifest_yaml = api.get(f"/api/v1/endpoints/{endpoint_id}/manifest/?format=yaml")
    assert listing.json()["results"][0]["secret_env"] == {"HF_TOKEN": SECRET_MASK}
    assert_nowhere(response.content.decode(), detail.content.decode(), listing.content.decode(),
                   manifest.content.decode(), manifest_yaml.content.decode())
    deployment = next(o for o in manifest.json() if o["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "LOG_LEVEL", "value": "info"},
                   {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"ep-{endpoint_id}-env", "key": "HF_TOKEN"}}}]


def test_a_patch_cannot_change_secret_env_nor_shadow_it_with_env(api, ep_quota, published):
    endpoint_id = create(api).json()["id"]
    path = f"/api/v1/endpoints/{endpoint_id}/"
    changed = api.patch(path, {"secret_env": {"HF_TOKEN": "other"}}, format="json")
    assert changed.status_code == 400 and "cannot be changed" in changed.json()["errors"]["non_field_errors"][0]
    shadowed = api.patch(path, {"env": {"HF_TOKEN": "plain"}}, format="json")
    assert shadowed.status_code == 400
    assert shadowed.json()["errors"]["env"] == ["HF_TOKEN is a secret env variable of this endpoint: set it in one "
                                                "of them."]
    assert InferenceEndpoint.objects.get().env == {"LOG_LEVEL": "info"}
    assert SecretEnv.objects.get().values == {"HF_TOKEN": VALUE}


def test_a_refused_endpoint_leaves_no_secret_behind(api, ep_quota, published):
    response = create(api, secret_env={"HF_TOKEN": VALUE, "LOG_LEVEL": "x"})  # in env too
    assert response.status_code == 400 and "LOG_LEVEL is set in env too" in response.json()["errors"]["secret_env"][0]
    assert not InferenceEndpoint.objects.exists() and not SecretEnv.objects.exists()


def test_the_create_form_stores_secret_env_and_no_page_shows_it(client, member, ep_quota, published, fake_backend):
    client.force_login(member)
    bad = client.post("/endpoints/new/", {**FORM, "secret_env": f"HF_TOKEN={VALUE}", "image": "Bad Image"})
    assert bad.status_code == 400 and "HF_TOKEN=</textarea>" in bad.content.decode()
    response = client.post("/endpoints/new/", {**FORM, "secret_env": f"HF_TOKEN={VALUE}"})
    endpoint = InferenceEndpoint.objects.get()
    assert response.status_code == 302 and SecretEnv.objects.get(ref=endpoint.ref).values == {"HF_TOKEN": VALUE}
    detail = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert f"name: ep-{endpoint.pk}-env" in detail
    assert_nowhere(bad.content.decode(), detail, client.get("/endpoints/").content.decode(),
                   client.get(f"/endpoints/{endpoint.pk}/edit/").content.decode())


def test_the_apply_task_creates_the_endpoints_secret_and_deleting_removes_it(api, ep_quota, published, fake_backend):
    endpoint_id = create(api).json()["id"]
    assert apply_workload("ep", endpoint_id) == "applied"
    assert fake_backend.calls == ["apply", "apply_secret", "apply"]
    assert fake_backend.secrets == {("team-ml-research", f"ep-{endpoint_id}-env"): ["HF_TOKEN"]}
    delete_workload("ep", endpoint_id)
    assert fake_backend.secrets == {}
