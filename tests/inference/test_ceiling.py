"""One ceiling: the page, the API, the ScaledObject and the "burst now" words read the same rule
(``InferenceEndpoint.ceiling``), and what the words say burst would reach is what growing grants."""

from __future__ import annotations

import re
from html import escape

import pytest
from django.utils import timezone

from cluster.status import WorkloadStatus
from inference import scaling, services
from inference.constants import EndpointState
from inference.kind import endpoint_spec
from inference.models import InferenceEndpoint

pytestmark = pytest.mark.django_db


def ready(endpoint) -> InferenceEndpoint:
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state=EndpointState.READY)
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=endpoint.pk)


def shown_ceilings(client, api, endpoint) -> dict[str, int]:
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    return {"page": int(re.search(r"wanted, ceiling (\d+) \(min", page).group(1)),
            "api": api.get(f"/api/v1/endpoints/{endpoint.pk}/").json()["replica_ceiling"],
            "scaledobject": endpoint_spec(endpoint, max_surge=0).replica_ceiling}


def test_it_shows_the_same_ceiling_everywhere_before_and_after_burst(create, client, api, member):
    endpoint = ready(create(min_replicas=2, max_replicas=4))
    client.force_login(member)
    assert shown_ceilings(client, api, endpoint) == {"page": 2, "api": 2, "scaledobject": 2}
    scaling.follow(endpoint, WorkloadStatus("ready", "", replicas=2, desired_replicas=3, scaling_limited=True),
                   timezone.now())
    endpoint = ready(endpoint)
    assert shown_ceilings(client, api, endpoint) == {"page": 3, "api": 3, "scaledobject": 3}


def test_the_burst_words_name_the_ceiling_and_growing_grants_what_they_say(create, client, member):
    endpoint = ready(create(min_replicas=1, max_replicas=6))  # the team's quota is 4 A100s
    outlook = services.burst_now(endpoint)
    assert outlook.replicas == 4
    assert outlook.words.startswith("ceiling 1 now; burst up to 4 of 6 replicas would be granted now; not more: ")
    client.force_login(member)
    assert escape(outlook.words) in client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    # The load asks for all 6: growing stops exactly where the words said.
    for _ in range(6):
        scaling.follow(endpoint, WorkloadStatus("ready", "", replicas=endpoint.ceiling,
                                                desired_replicas=6, scaling_limited=True), timezone.now())
        endpoint = ready(endpoint)
    assert endpoint.ceiling == outlook.replicas
    # At its ceiling, the words have no higher figure to name.
    assert not services.burst_now(endpoint).words.startswith("ceiling")
