"""What a new user tripped over on the endpoint pages (issue 20): the list, the form, the page, the delete page."""

from __future__ import annotations

import re

import pytest

from inference import services
from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload
from tests.inference.test_views import FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(member, team, ep_quota, published):
    return services.create_endpoint(member, team, endpoint_payload())


def cells(html: str, tag: str) -> list[list[str]]:
    """Per table row, the ``tag`` cells' opening tags (the table of class ``endpoints``)."""
    table = html[html.index('<table class="endpoints">'):html.index("</table>")]
    return [re.findall(rf"<{tag}\b[^>]*>", row) for row in re.findall(r"<tr\b.*?</tr>", table, re.S)]


def test_the_lists_header_cells_are_separate_and_match_the_rows(client, member, endpoint):
    client.force_login(member)
    page = client.get("/endpoints/").content.decode()
    heads = next(h for h in cells(page, "th") if h)
    assert len(heads) == 6 and not any("colspan" in h for h in heads)
    body = [r for r in cells(page, "td") if r]
    assert body and all(len(r) == 6 and not any("colspan" in c for c in r) for r in body)
    for title in ("Name", "Flavor", "State", "Replicas", "Cost per hour", "Cost to date"):
        assert f">{title}" in page, title
    # The polled row comes back whole, one cell per column.
    row = client.get(f"/endpoints/{endpoint.pk}/state/").content.decode()
    assert row.lstrip().startswith(f'<tr id="endpoint-{endpoint.pk}-live"') and row.count("<td") == 6


def test_the_list_hides_deleted_endpoints_unless_asked_and_filters_by_state(client, member, team, ep_quota,
                                                                           published):
    gone = services.create_endpoint(member, team, endpoint_payload(name="old-chat"))
    services.delete_endpoint(member, gone)
    InferenceEndpoint.objects.filter(pk=gone.pk).update(state="deleted")
    live = services.create_endpoint(member, team, endpoint_payload(name="new-chat", flavor="a100-1g.10gb"))
    client.force_login(member)
    default = client.get("/endpoints/").content.decode()
    assert "new-chat" in default and "old-chat" not in default
    assert 'href="/endpoints/?state=all">show them too' in default
    assert "old-chat" in client.get("/endpoints/?state=all").content.decode()
    assert "old-chat" in client.get("/endpoints/?state=deleted").content.decode()
    deploying = client.get("/endpoints/?state=deploying", HTTP_HX_REQUEST="true").content.decode()
    assert "new-chat" in deploying and "old-chat" not in deploying and "<html" not in deploying
    assert "No endpoints match" in client.get("/endpoints/?state=ready").content.decode()
    assert live.name in client.get("/endpoints/?state=bogus").content.decode()  # unknown: the default
    InferenceEndpoint.objects.filter(pk=gone.pk).update(state="deleting")  # unfinished, no longer active
    active = client.get("/endpoints/?state=active").content.decode()  # queued or holding quota (docs/glossary.md)
    assert "new-chat" in active and "old-chat" not in active


def test_a_deleting_endpoint_offers_no_edit_or_delete(client, member, endpoint):
    client.force_login(member)
    assert f'href="/endpoints/{endpoint.pk}/edit/"' in client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    services.delete_endpoint(member, endpoint)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert "/edit/" not in page and f"/endpoints/{endpoint.pk}/delete/" not in page
    response = client.get(f"/endpoints/{endpoint.pk}/edit/")
    assert response.status_code == 302 and response["Location"] == f"/endpoints/{endpoint.pk}/"


@pytest.mark.parametrize(("ready", "ceiling", "gpus", "words"), [
    (0, 1, 1, "No replica serves now. Its Deployment, Service and ScaledObject are removed, and the 1 a100-80gb unit "
              "it holds goes back"),
    (1, 1, 1, "Its replica stops serving. Its Deployment, Service and ScaledObject are removed, and the 1 a100-80gb "
              "unit it holds goes back"),
    (3, 3, 2, "Its 3 replicas stop serving. Its Deployment, Service and ScaledObject are removed, and the 6 a100-80gb "
              "units it holds go back"),
])
def test_the_delete_page_says_what_stops_in_proper_words(client, member, endpoint, ready, ceiling, gpus, words):
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(replicas=ready, replica_ceiling=ceiling,
                                                            gpus_per_replica=gpus)
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/delete/").content.decode()
    text = " ".join(re.sub(r"<[^>]+>", " ", page[page.index('id="delete-consequences"'):]).split())
    assert words in text
    assert "replica'" not in page


def test_a_maximum_below_the_minimum_is_refused_in_words_with_the_number(client, member, ep_quota, api, endpoint):
    message = "Must be at least 3, the minimum replicas."
    response = api.post("/api/v1/endpoints/", {"team": "ml-research", **endpoint_payload(
        name="other", min_replicas=3, max_replicas=2)}, format="json")
    assert response.status_code == 400 and response.json()["errors"]["max_replicas"] == [message]
    patch = api.patch(f"/api/v1/endpoints/{endpoint.pk}/", {"min_replicas": 3, "max_replicas": 1}, format="json")
    assert patch.status_code == 400 and patch.json()["errors"]["max_replicas"] == [message]
    client.force_login(member)
    form = client.post("/endpoints/new/", {**FORM, "min_replicas": "3", "max_replicas": "2"}).content.decode()
    assert message in form and "max(1" not in form


def test_the_form_labels_and_explains_cold_start(client, member, ep_quota):
    client.force_login(member)
    page = client.get("/endpoints/new/").content.decode()
    assert ">GPUs per replica <span" in page and "Gpus per" not in page
    assert "a cold start" in page and "load its model" in page
    assert 'type="number"' in page and 'name="max_replicas"' in page


def test_the_preview_prices_the_maximum_and_says_whether_burst_is_possible_now(client, member, team, ep_quota,
                                                                                 published, api):
    client.force_login(member)
    form = {**FORM, "flavor": "a100-80gb", "min_replicas": "1", "max_replicas": "3"}
    preview = client.post("/endpoints/preview/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "4.10 USD</strong> per hour at the minimum" in preview
    assert '<strong id="preview-cost-max">12.30 USD</strong> at the maximum (3 replicas)' in preview
    assert "burst to all 3 replicas would be granted now" in preview
    assert "each new replica serves once its model is loaded" in preview and "600 s" in preview
    # The team holds 3 of its 4 A100s: this endpoint's minimum fits, no burst above it does.
    services.create_endpoint(member, team, endpoint_payload(name="busy", min_replicas=3, max_replicas=3))
    preview = client.post("/endpoints/preview/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "Starts now" in preview
    assert "no burst now: the team quota (a100-80gb 3 of 4 in use without this endpoint)" in preview
    # At zero replicas the first request waits for the cold start.
    zero = {**form, "min_replicas": "0", "metric": "requests_per_second", "target": "5",
            "startup_timeout_seconds": "900"}
    preview = client.post("/endpoints/preview/", zero, HTTP_HX_REQUEST="true").content.decode()
    assert "at zero replicas the first request waits for a replica to be scheduled and load its model" in preview
    assert "900 s" in preview
    # The API's dry run says the same.
    body = api.post("/api/v1/endpoints/?dry_run=1", {"team": "ml-research", **endpoint_payload(
        name="x", max_replicas=3)}, format="json").json()
    assert (body["cost_per_hour_at_max"], body["burst_replicas_now"]) == ("12.3000", 1)
    assert body["burst"].startswith("no burst now: the team quota")


def test_the_page_explains_cold_start_and_burst_now(client, member, endpoint):
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert 'id="cold-start"' in page and "up to 600 s" in page
    assert "burst to all 4 replicas would be granted now" in page


def test_counts_of_one_are_said_in_the_singular(client, member, team, ep_quota, published):
    client.force_login(member)
    form = {**FORM, "flavor": "a100-80gb", "min_replicas": "0", "max_replicas": "1", "metric": "requests_per_second",
            "target": "5"}
    preview = client.post("/endpoints/preview/", form, HTTP_HX_REQUEST="true").content.decode()
    assert "at the maximum (1 replica)" in preview and "1 replicas" not in preview
    services.create_endpoint(member, team, endpoint_payload(name="solo", min_replicas=1, max_replicas=1))
    listed = client.get("/endpoints/").content.decode()
    assert "1–1 replica<" in listed and "1 replicas" not in listed
    assert "run holding quota · " not in client.get("/").content.decode()  # none: "0 runs holding quota"
    dashboard = client.get("/").content.decode()
    assert re.search(r'id="endpoints-stat"><span class="stat-value">1</span><span class="stat-label">endpoint holding quota · ',
                     dashboard)
