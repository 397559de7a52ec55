"""Secret env of endpoints: set at creation, replaced by a PATCH (a rolling update), put in the endpoint's Secret,
shown masked, never read back."""

from __future__ import annotations

import base64

import pytest

from inference.manifests import SECRET_ENV_DIGEST_ANNOTATION
from inference.models import InferenceEndpoint
from teams.models import AuditEvent
from tests.factories import secret_values
from tests.inference.conftest import endpoint_payload
from tests.inference.test_views import FORM
from workloads.constants import SECRET_MASK
from workloads.models import SecretEnv
from workloads.tasks import apply_workload, delete_workload

pytestmark = pytest.mark.django_db

VALUE = "hf_ep-S3CRET-value-4242"
NEW_VALUE = "wandb-R0TATED-value-9191"


def assert_nowhere(*texts: str, value: str = VALUE) -> None:
    for text in texts:
        assert value not in text and base64.b64encode(value.encode()).decode() not in text


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


def deployment_of(fake_backend, endpoint_id: int) -> dict:
    return fake_backend.objects[("team-ml-research", "Deployment", f"ep-{endpoint_id}")]


def test_a_patch_replaces_the_whole_secret_env_and_rolls_the_deployment(api, ep_quota, published, fake_backend,
                                                                        django_capture_on_commit_callbacks):
    endpoint_id = create(api).json()["id"]
    assert apply_workload("ep", endpoint_id) == "applied"
    before = deployment_of(fake_backend, endpoint_id)["spec"]["template"]
    assert base64.b64encode(VALUE.encode()).decode() in fake_backend.secret_values_seen
    published.clear()

    with django_capture_on_commit_callbacks(execute=True):
        response = api.patch(f"/api/v1/endpoints/{endpoint_id}/", {"secret_env": {"WANDB_API_KEY": NEW_VALUE}},
                             format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["secret_env"] == {"WANDB_API_KEY": SECRET_MASK}  # HF_TOKEN is gone: the set is replaced
    assert secret_values(InferenceEndpoint.objects.get().ref) == {"WANDB_API_KEY": NEW_VALUE}
    assert published == [("workloads.tasks.apply_workload", ("ep", endpoint_id))]
    assert apply_workload("ep", endpoint_id) == "applied"
    after = deployment_of(fake_backend, endpoint_id)["spec"]["template"]
    # The pod template changed (new env references and a new digest): the Deployment rolls.
    digest = after["metadata"]["annotations"][SECRET_ENV_DIGEST_ANNOTATION]
    assert digest != before["metadata"]["annotations"][SECRET_ENV_DIGEST_ANNOTATION]
    assert [e["name"] for e in after["spec"]["containers"][0]["env"]] == ["LOG_LEVEL", "WANDB_API_KEY"]
    # The Secret got the new value unchanged, and only the new key.
    assert fake_backend.secrets == {("team-ml-research", f"ep-{endpoint_id}-env"): ["WANDB_API_KEY"]}
    assert base64.b64encode(NEW_VALUE.encode()).decode() in fake_backend.secret_values_seen
    event = AuditEvent.objects.filter(action="endpoint_changed").get()
    assert event.details == {"fields": ["secret_env"], "secret_env": ["WANDB_API_KEY"]}
    manifest = api.get(f"/api/v1/endpoints/{endpoint_id}/manifest/?format=yaml").content.decode()
    assert digest in manifest
    assert_nowhere(response.content.decode(), manifest, str(list(AuditEvent.objects.values())),
                   api.get(f"/api/v1/endpoints/{endpoint_id}/").content.decode(), value=NEW_VALUE)


def test_the_same_secret_env_again_does_not_roll_and_none_empties_the_secret(api, ep_quota, published, fake_backend):
    endpoint_id = create(api).json()["id"]
    path = f"/api/v1/endpoints/{endpoint_id}/"
    assert api.patch(path, {"secret_env": {"HF_TOKEN": NEW_VALUE}}, format="json").status_code == 200
    assert apply_workload("ep", endpoint_id) == "applied"
    template = deployment_of(fake_backend, endpoint_id)["spec"]["template"]
    assert api.patch(path, {"secret_env": {"HF_TOKEN": NEW_VALUE}}, format="json").status_code == 200
    assert apply_workload("ep", endpoint_id) == "applied"
    assert deployment_of(fake_backend, endpoint_id)["spec"]["template"] == template

    emptied = api.patch(path, {"secret_env": {}}, format="json")
    assert emptied.status_code == 200 and emptied.json()["secret_env"] == {}
    assert apply_workload("ep", endpoint_id) == "applied"
    # The Secret is overwritten with no keys (not left holding the old values) and no pod refers to it.
    assert fake_backend.secrets == {("team-ml-research", f"ep-{endpoint_id}-env"): []}
    container = deployment_of(fake_backend, endpoint_id)["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "LOG_LEVEL", "value": "info"}]


@pytest.mark.parametrize(("payload", "field", "message"), [
    ({"env": {"HF_TOKEN": "plain"}}, "env", "HF_TOKEN is a secret env variable of this endpoint: set it in one of them."),
    ({"secret_env": {"LOG_LEVEL": NEW_VALUE}}, "secret_env", "LOG_LEVEL is set in env too: set it in one of them."),
    ({"secret_env": {"HF_TOKEN": ""}}, "secret_env", "The value of HF_TOKEN is empty: type the secret's value."),
    ({"secret_env": {"HF_TOKEN": SECRET_MASK}}, "secret_env",
     "The value of HF_TOKEN is the mask pages show for a secret, not its value."),
    ({"secret_env": {"1BAD": NEW_VALUE}}, "secret_env",
     "Invalid variable name '1BAD': use letters, digits and '_', not starting with a digit."),
])
def test_a_refused_secret_env_patch_changes_nothing(api, ep_quota, published, payload, field, message,
                                                    django_capture_on_commit_callbacks):
    endpoint_id = create(api).json()["id"]
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = api.patch(f"/api/v1/endpoints/{endpoint_id}/", payload, format="json")
    assert response.status_code == 400 and response.json()["errors"][field] == [message]
    assert_nowhere(response.content.decode(), value=NEW_VALUE)
    endpoint = InferenceEndpoint.objects.get()
    assert endpoint.env == {"LOG_LEVEL": "info"} and secret_values(endpoint.ref) == {"HF_TOKEN": VALUE}
    assert published == [] and not AuditEvent.objects.filter(action="endpoint_changed").exists()


def test_one_patch_may_move_a_variable_from_secret_env_to_env(api, ep_quota, published):
    endpoint_id = create(api).json()["id"]
    response = api.patch(f"/api/v1/endpoints/{endpoint_id}/",
                         {"env": {"HF_TOKEN": "public-model"}, "secret_env": {"WANDB_API_KEY": NEW_VALUE}},
                         format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["env"] == {"HF_TOKEN": "public-model"}
    assert response.json()["secret_env"] == {"WANDB_API_KEY": SECRET_MASK}


def test_the_edit_form_keeps_secret_env_when_blank_and_replaces_it_when_typed(client, member, ep_quota, published,
                                                                             fake_backend):
    client.force_login(member)
    client.post("/endpoints/new/", {**FORM, "secret_env": f"HF_TOKEN={VALUE}"})
    endpoint = InferenceEndpoint.objects.get()
    edit = f"/endpoints/{endpoint.pk}/edit/"
    page = client.get(edit).content.decode()
    assert "Now: HF_TOKEN. Leave blank to keep them." in page
    assert_nowhere(page)
    fields = {**FORM, "image": "registry.example.com/serving/vllm:0.7"}
    del fields["name"], fields["flavor"], fields["gpus_per_replica"]

    kept = client.post(edit, {**fields, "secret_env": ""})
    assert kept.status_code == 302 and secret_values(endpoint.ref) == {"HF_TOKEN": VALUE}

    bad = client.post(edit, {**fields, "secret_env": f"HF_TOKEN={NEW_VALUE}\nnot a line"})
    assert bad.status_code == 400 and "HF_TOKEN=</textarea>" in bad.content.decode()
    assert_nowhere(bad.content.decode(), value=NEW_VALUE)
    assert secret_values(endpoint.ref) == {"HF_TOKEN": VALUE}

    replaced = client.post(edit, {**fields, "secret_env": f"WANDB_API_KEY={NEW_VALUE}"})
    assert replaced.status_code == 302 and secret_values(endpoint.ref) == {"WANDB_API_KEY": NEW_VALUE}
    events = AuditEvent.objects.filter(action="endpoint_changed").order_by("pk")
    # The form sends every field; only the second save names (never shows) secret env.
    assert ["secret_env" in e.details["fields"] for e in events] == [False, True]
    assert [e.details.get("secret_env") for e in events] == [None, ["WANDB_API_KEY"]]
    assert_nowhere(client.get(f"/endpoints/{endpoint.pk}/").content.decode(), client.get(edit).content.decode(),
                   value=NEW_VALUE)


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
    assert response.status_code == 302 and secret_values(endpoint.ref) == {"HF_TOKEN": VALUE}
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
