"""Portal pages of endpoints: happy paths, wrong methods, outsiders, viewers, htmx partials, query counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from billing.models import QuotaHold
from inference import services
from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db

FORM = {"name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-1g.10gb",
        "gpus_per_replica": "1", "min_replicas": "1", "max_replicas": "3", "metric": "gpu_utilization",
        "target": "70", "scale_down_delay_seconds": "300", "port": "8080", "readiness_path": "/health/ready",
        "startup_timeout_seconds": "600"}


@pytest.fixture
def endpoint(member, team, ep_quota, published):
    return services.create_endpoint(member, team, endpoint_payload())


def test_it_lists_the_teams_endpoints_with_live_cells(client, member, endpoint):
    client.force_login(member)
    page = client.get("/endpoints/").content.decode()
    assert "llama-chat" in page and f'hx-get="/endpoints/{endpoint.pk}/state/"' in page
    assert "New endpoint" in page


def test_the_list_partial_and_the_state_cell(client, member, endpoint):
    client.force_login(member)
    partial = client.get("/endpoints/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and "llama-chat" in partial
    cell = client.get(f"/endpoints/{endpoint.pk}/state/")
    assert cell.status_code == 200 and b"Deploying" in cell.content
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state="deleted")
    assert client.get(f"/endpoints/{endpoint.pk}/state/").status_code == 286  # final: polling stops


@pytest.mark.parametrize("count", [3, 12])
def test_the_list_renders_in_a_constant_number_of_queries(client, member, team, ep_quota, published, count,
                                                          django_assert_num_queries):
    for i in range(count):
        services.create_endpoint(member, team, endpoint_payload(name=f"ep{i}", flavor="a100-1g.10gb",
                                                                max_replicas=1, min_replicas=1)
                                 if i < 7 else endpoint_payload(name=f"ep{i}", flavor="a100-1g.10gb"))
    client.force_login(member)
    # session, user, membership, access check, count, page (team, flavor, creator joined), the
    # page's quota holds (their money: Workload.segment), queue positions (queued ones on the page),
    # switcher, the rows' one price book (2: clusters, cluster prices; billing.pricing)
    with django_assert_num_queries(10 if count <= 7 else 11):
        assert client.get("/endpoints/").status_code == 200


def test_it_shows_the_detail_with_chart_scaling_log_and_manifest(client, member, endpoint):
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    for part in ('id="replicas-chart"', "<svg", "polyline", "Scaling log", "Admitted at its minimum", "kind: ScaledObject",
                 "ceiling (granted)", "min / max"):
        assert part in page, part
    partial = client.get(f"/endpoints/{endpoint.pk}/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and b"<html" not in partial.content and b"endpoint-status" in partial.content


def test_the_create_form_explains_mig_and_creates(client, member, ep_quota, published):
    client.force_login(member)
    page = client.get("/endpoints/new/").content.decode()
    assert "1g.10gb — 1/7 of an A100 80GB, 10 GB memory" in page
    assert "burst" in page
    response = client.post("/endpoints/new/", FORM)
    created = InferenceEndpoint.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/endpoints/{created.pk}/"
    assert QuotaHold.objects.held().get(ref=created.ref).units == 1


def test_the_preview_writes_nothing(client, member, ep_quota):
    client.force_login(member)
    page = client.post("/endpoints/preview/", FORM, HTTP_HX_REQUEST="true").content.decode()
    assert "Starts now" in page and "per hour at the minimum" in page
    assert not InferenceEndpoint.objects.exists()


def test_service_errors_come_back_on_the_form(client, member, ep_quota):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "min_replicas": "0"})  # gpu metric cannot wake from zero
    assert response.status_code == 400
    assert "request-driven" in response.content.decode()
    assert not InferenceEndpoint.objects.exists()


def test_edit_and_delete_with_confirmation(client, member, endpoint, published):
    client.force_login(member)
    assert client.get(f"/endpoints/{endpoint.pk}/edit/").status_code == 200
    edit = client.post(f"/endpoints/{endpoint.pk}/edit/", {
        "image": "registry.example.com/serving/vllm:0.7", "min_replicas": "1", "max_replicas": "2",
        "metric": "gpu_utilization", "target": "60", "scale_down_delay_seconds": "120", "env": ""})
    assert edit.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.image, endpoint.max_replicas, endpoint.autoscale["target"]) == (
        "registry.example.com/serving/vllm:0.7", 2, 60)
    confirm = client.get(f"/endpoints/{endpoint.pk}/delete/").content.decode()
    assert "Delete llama-chat?" in confirm
    assert client.post(f"/endpoints/{endpoint.pk}/delete/").status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.state == "deleting"


def test_viewers_see_no_controls_and_are_refused(client, viewer, endpoint):
    client.force_login(viewer)
    listing = client.get("/endpoints/").content.decode()
    assert 'href="/endpoints/new/"' not in listing
    assert ">New endpoint</button>" in listing and "Viewers can&#x27;t submit — ask a team admin." in listing
    detail = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert "/delete/" not in detail and "/edit/" not in detail
    assert "Viewers can&#x27;t cancel or delete the team&#x27;s work — ask a team admin." in detail
    form = client.get("/endpoints/new/")
    assert form.status_code == 403 and '<fieldset class="plain" disabled>' in form.content.decode()
    assert client.post("/endpoints/new/", FORM).status_code == 403
    assert client.post(f"/endpoints/{endpoint.pk}/edit/", {"image": "x"}).status_code == 403
    assert client.post(f"/endpoints/{endpoint.pk}/delete/").status_code == 403
    assert InferenceEndpoint.objects.get().state == "deploying"


def test_outsiders_get_404(client, outsider, endpoint):
    client.force_login(outsider)
    for path in (f"/endpoints/{endpoint.pk}/", f"/endpoints/{endpoint.pk}/state/", f"/endpoints/{endpoint.pk}/edit/",
                 f"/endpoints/{endpoint.pk}/delete/"):
        assert client.get(path).status_code == 404, path
    assert client.post(f"/endpoints/{endpoint.pk}/delete/").status_code == 404
    assert InferenceEndpoint.objects.get().state == "deploying"


def test_wrong_methods_and_anonymous(client, member, endpoint):
    assert client.get("/endpoints/").status_code == 302  # to the login page
    client.force_login(member)
    assert client.post("/endpoints/").status_code == 405
    assert client.get("/endpoints/preview/").status_code == 405
    assert client.post(f"/endpoints/{endpoint.pk}/state/").status_code == 405


def test_the_preview_needs_only_the_resources(client, member, ep_quota):
    client.force_login(member)
    page = client.post("/endpoints/preview/", {"flavor": "a100-80gb", "min_replicas": "1", "max_replicas": "2",
                                               "metric": "gpu_utilization"}, HTTP_HX_REQUEST="true")
    assert "Starts now" in page.content.decode()


def test_the_create_form_splits_command_lines_as_words_and_echoes_them(client, member, ep_quota, published):
    client.force_login(member)
    typed = {"command": "vllm serve '/models/my model'", "args": "--max-model-len 8192"}
    page = client.post("/endpoints/preview/", {**FORM, **typed}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="argv-echo"' in page and 'hx-swap-oob="true"' in page
    assert '<span class="token">&quot;/models/my model&quot;</span>' in page
    assert client.post("/endpoints/new/", {**FORM, **typed}).status_code == 302
    created = InferenceEndpoint.objects.get()
    assert created.command == ["vllm", "serve", "/models/my model"] and created.args == ["--max-model-len", "8192"]


def test_the_create_form_refuses_an_unclosed_quote_next_to_the_field(client, member, ep_quota, published):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "command": "vllm serve 'oops"})
    assert response.status_code == 400
    assert "A quote is not closed" in response.content.decode().split('id="id_command_errors"', 1)[1]
    assert not InferenceEndpoint.objects.exists()
    empty = client.get("/endpoints/new/").content.decode()
    assert "No command: the image's entrypoint runs." in empty


def test_the_preview_asks_for_a_flavor_instead_of_saying_it_is_required(client, member, ep_quota):
    client.force_login(member)
    page = client.post("/endpoints/preview/", {**FORM, "flavor": "", "name": ""}, HTTP_HX_REQUEST="true")
    html = page.content.decode()
    assert "Pick a flavor to see the price" in html and "required" not in html


def test_a_form_sent_back_with_errors_keeps_its_preview(client, member, ep_quota):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "name": "Not A Name"})
    html = response.content.decode()
    assert response.status_code == 400 and "Pick a flavor" not in html
    assert "per hour at the minimum" in html and "Starts now" in html  # the flavor is set: its price shows


def test_the_forms_label_their_fields_for_people(client, member, endpoint):
    client.force_login(member)
    for path in ("/endpoints/new/", f"/endpoints/{endpoint.pk}/edit/"):
        html = client.get(path).content.decode()
        assert '<label for="id_env">Environment variables</label>' in html, path
        assert ">Env<" not in html and "Gpus" not in html, path


def test_the_new_endpoint_form_starts_with_a_servable_image_for_the_tour_to_keep(client, member, ep_quota, settings):
    """README's tour step 4 keeps the image the form starts with: one the sandbox's registry holds (it pulls)."""
    from sandbox.inventory import inventory
    from sandbox.registry import pull_error

    client.force_login(member)

    def image_input() -> str:
        return re.search(r'<input[^>]*name="image"[^>]*>', client.get("/endpoints/new/").content.decode()).group(0)

    assert f'value="{settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE}"' in image_input()
    assert settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE == "registry.example.com/serving/vllm:0.7"
    assert pull_error(settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE, inventory().registry) == ""
    assert "`registry.example.com/serving/vllm:0.7`" in (Path(settings.BASE_DIR) / "README.md").read_text()
    settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE = "ghcr.io/acme/serve:3"
    assert 'value="ghcr.io/acme/serve:3"' in image_input()
    settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE = ""
    assert "value=" not in image_input()
