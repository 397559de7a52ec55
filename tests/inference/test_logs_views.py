"""An endpoint's logs and events: the same panels as a run's (templates/workloads/), with a
replica picker, the full-log download and events that refresh until the endpoint is final."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.backends.base import ClusterEvent
from inference import services
from inference.models import InferenceEndpoint
from tests.cluster.samples import pod
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def endpoint(member, team, ep_quota, published, fake_backend):
    created = services.create_endpoint(member, team, endpoint_payload())
    InferenceEndpoint.objects.filter(pk=created.pk).update(state="ready", applied_at=timezone.now())
    created.refresh_from_db()
    replicas = [pod(f"{created.object_name}-7d9f-{suffix}", created.object_name, namespace=created.namespace)
                for suffix in ("bcdfg", "hjklm")]
    replicas[1]["metadata"]["creationTimestamp"] = "2026-01-01T10:05:00Z"
    fake_backend.pod_lists[(created.namespace, created.object_name)] = replicas
    fake_backend.log_lines[f"{created.object_name}-7d9f-hjklm"] = [f"POST /v1/completions {i}" for i in range(300)]
    return created


def test_it_offers_every_replica_and_shows_the_oldest_first(client, member, endpoint):
    client.force_login(member)
    html = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    name = endpoint.object_name
    assert f'<option value="{name}-7d9f-bcdfg" selected>{name}-7d9f-bcdfg</option>' in html
    assert f'<option value="{name}-7d9f-hjklm">{name}-7d9f-hjklm</option>' in html
    assert f'hx-get="/endpoints/{endpoint.pk}/logs/"' in html and f'hx-get="/endpoints/{endpoint.pk}/events/"' in html
    assert 'src="/static/js/logs.js"' in html and "data-log-follow" in html


def test_it_shows_a_picked_replica_and_refreshes_the_picker_out_of_band(client, member, endpoint):
    client.force_login(member)
    name = f"{endpoint.object_name}-7d9f-hjklm"
    response = client.get(f"/endpoints/{endpoint.pk}/logs/", {"pod": name}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert "POST /v1/completions 299" in html and "POST /v1/completions 99\n" not in html  # the 200-line tail
    assert 'id="log-picker" data-log-picker hx-swap-oob="true"' in html
    assert f'<option value="{name}" selected>' in html


def test_it_answers_404_for_a_pod_that_is_not_the_endpoints(client, member, endpoint):
    client.force_login(member)
    for path in ("/", "/logs/", "/logs/download/"):
        assert client.get(f"/endpoints/{endpoint.pk}{path}", {"pod": "kube-proxy-x"}).status_code == 404, path


def test_it_downloads_a_replicas_whole_log(client, member, endpoint):
    client.force_login(member)
    name = f"{endpoint.object_name}-7d9f-hjklm"
    response = client.get(f"/endpoints/{endpoint.pk}/logs/download/", {"pod": name})
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{name}.log"'
    assert len(response.content.decode().splitlines()) == 300


def test_the_api_downloads_a_replicas_whole_log(api, api_client_for, outsider, endpoint):
    name = f"{endpoint.object_name}-7d9f-hjklm"
    response = api.get(f"/api/v1/endpoints/{endpoint.pk}/logs/download/", {"pod": name})
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{name}.log"'
    assert response.content.decode().splitlines() == [f"POST /v1/completions {i}" for i in range(300)]
    assert api.get(f"/api/v1/endpoints/{endpoint.pk}/logs/download/", {"pod": "kube-proxy-x"}).status_code == 404
    assert api_client_for(outsider).get(f"/api/v1/endpoints/{endpoint.pk}/logs/download/").status_code == 404


def test_it_refreshes_events_until_the_endpoint_is_final(client, member, endpoint, fake_backend):
    fake_backend.warnings[(endpoint.namespace, endpoint.object_name)].append(
        ClusterEvent("Warning", "Unhealthy", "Readiness probe failed", "Pod/x", "2026-11-22T10:01:00Z"))
    client.force_login(member)
    response = client.get(f"/endpoints/{endpoint.pk}/events/", **HTMX)
    assert response.status_code == 200 and b"Readiness probe failed" in response.content
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state="deleted")
    response = client.get(f"/endpoints/{endpoint.pk}/events/", **HTMX)
    assert response.status_code == 286 and b"hx-trigger" not in response.content


@pytest.mark.parametrize("path", ["/logs/", "/logs/download/", "/events/"])
def test_viewers_read_outsiders_get_404_and_nobody_posts(client, viewer, outsider, endpoint, path):
    client.force_login(viewer)
    assert client.get(f"/endpoints/{endpoint.pk}{path}").status_code == 200
    assert client.post(f"/endpoints/{endpoint.pk}{path}").status_code == 405
    client.force_login(outsider)
    assert client.get(f"/endpoints/{endpoint.pk}{path}").status_code == 404
