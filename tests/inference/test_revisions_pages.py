"""The endpoint page's revisions (weight, state, traffic, verdict; Promote / Roll back over htmx) and the
edit form's rollout choice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from inference import histogram, services
from inference.models import EndpointRevision, TrafficWindow
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(member, team, ep_quota, published, fake_backend):
    return services.create_endpoint(member, team, endpoint_payload(max_replicas=1, env={"MODEL": "a"}))


def edit_form(endpoint, **overrides) -> dict:
    data = {"image": endpoint.image, "env": "MODEL=a", "min_replicas": "1", "max_replicas": "1",
            "metric": "gpu_utilization", "target": "70", "scale_down_delay_seconds": "300", "rollout": "replace"}
    data.update(overrides)
    return data


def test_the_edit_form_rolls_out_a_canary_and_the_page_shows_it_with_its_traffic(client, member, endpoint):
    client.force_login(member)
    form = client.get(f"/endpoints/{endpoint.pk}/edit/").content.decode()
    assert 'name="rollout"' in form and "Canary weight (%)" in form

    refused = client.post(f"/endpoints/{endpoint.pk}/edit/", edit_form(endpoint, image="serve:2", rollout="canary"))
    assert refused.status_code == 400 and "A canary needs a weight" in refused.content.decode()
    assert EndpointRevision.objects.filter(endpoint=endpoint).count() == 1

    done = client.post(f"/endpoints/{endpoint.pk}/edit/", edit_form(endpoint, image="serve:2", rollout="canary",
                                                                       weight="10"))
    assert done.status_code == 302
    rev = EndpointRevision.objects.get(endpoint=endpoint, number=2)
    assert (rev.state, rev.weight, rev.spec["image"]) == ("canary", 10, "serve:2")

    counts = histogram.empty()
    for _ in range(30):
        histogram.add(counts, 90)
    TrafficWindow.objects.create(endpoint=endpoint, team=endpoint.team, revision=2, step=10, requests=30,
                                 status_2xx=27, status_5xx=3, start=timezone.now() - timedelta(seconds=40),
                                 latency=counts)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    row = page.split('id="revision-2"')[1].split("</tr>")[0]
    assert "Canary" in row and "10%" in row and "serve:2" in row and ">30<" in row and "10%" in row
    assert "ms" in row  # its p95
    assert "Promote" in page and "Roll back" in page and 'hx-confirm="Roll back the canary' in page
    stable = page.split('id="revision-1"')[1].split("</tr>")[0]
    assert "Stable" in stable and "90%" in stable and "env MODEL" in stable


def test_the_edit_form_says_a_canary_waits_for_a_rollout_in_flight(client, member, endpoint):
    client.force_login(member)
    assert client.post(f"/endpoints/{endpoint.pk}/edit/", edit_form(endpoint, image="serve:2")).status_code == 302
    refused = client.post(f"/endpoints/{endpoint.pk}/edit/", edit_form(endpoint, image="serve:3", rollout="canary",
                                                                          weight="10"))
    assert refused.status_code == 400 and "Revision 2 is still rolling out" in refused.content.decode()
    assert EndpointRevision.objects.filter(endpoint=endpoint).count() == 2


def test_roll_back_over_htmx_answers_the_panel_and_a_second_time_409(client, member, endpoint):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 10})
    client.force_login(member)
    response = client.post(f"/endpoints/{endpoint.pk}/rollback/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    panel = response.content.decode()
    assert panel.lstrip().startswith('<section class="card" id="revisions">')
    assert "Rolled back" in panel and "by mia" in panel and "Promote" not in panel
    again = client.post(f"/endpoints/{endpoint.pk}/rollback/", HTTP_HX_REQUEST="true")
    assert again.status_code == 409 and "no canary revision" in again.content.decode()


def test_promote_without_htmx_redirects_with_a_message(client, member, endpoint):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 10})
    client.force_login(member)
    response = client.post(f"/endpoints/{endpoint.pk}/promote/", follow=True)
    assert "its canary is promoted" in response.content.decode()
    assert EndpointRevision.objects.get(endpoint=endpoint, number=2).state == "rolling"


def test_a_viewer_sees_the_revisions_without_buttons(client, viewer, member, endpoint):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 10})
    client.force_login(viewer)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert 'id="revision-2"' in page and "Roll back" not in page
    assert client.post(f"/endpoints/{endpoint.pk}/rollback/").status_code == 403
    assert EndpointRevision.objects.get(endpoint=endpoint, number=2).state == "canary"
