"""The gateway's pure parts and its tables, without processes: the weighted split (a property), the upstream
choice, the path split, the stream's token count, the key check, the route table from the sandbox's rows and the
additive writes of two recorders."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.backends.base import ServiceRef
from cluster.backends.kubernetes import KubernetesBackend
from gateway.keys import KeyCache
from gateway.recorder import STEP, Outcome, Recorder
from gateway.server import StreamTokens, split_path
from inference import histogram
from inference.constants import RevisionState
from inference.models import EndpointRevision, GatewayLoad, KeyUsage, TrafficWindow
from inference.routing import Picker, Target, choose_target, routes
from sandbox.models import SimPod
from tests.factories import make_team
from tests.gateway.support import change_key, make_endpoint, make_key, serve

# -- the split ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=4), seed=st.integers())
def test_the_weighted_split_converges_to_the_weights(weights, seed):
    targets = [Target(i + 1, w, (f"http://replica-{i}",)) for i, w in enumerate(weights)]
    rng = random.Random(seed)
    draws = 20_000
    seen = Counter(choose_target(targets, rng.random()).revision for _ in range(draws))
    total = sum(weights)
    for target in targets:
        share = target.weight / total
        # Five standard deviations of a binomial share: a wrong split fails, chance never does.
        assert abs(seen[target.revision] / draws - share) <= 5 * (share * (1 - share) / draws) ** 0.5 + 1e-9


def test_a_target_with_no_ready_replica_takes_no_request():
    stable, canary = Target(1, 80, ("http://a",)), Target(2, 20, ())
    assert {choose_target([stable, canary], d / 100).revision for d in range(100)} == {1}
    assert choose_target([Target(1, 100, ())], 0.5) is None
    assert choose_target([Target(1, 0, ("http://a",))], 0.5) is None


def test_the_picker_sends_to_the_least_busy_replica_and_round_robins_ties():
    picker = Picker(random.Random(1))
    upstreams = ("http://a", "http://b", "http://c")
    first = [picker.acquire(upstreams) for _ in range(3)]
    assert sorted(first) == list(upstreams)  # one each before any gets a second
    picker.release("http://b")
    assert picker.acquire(upstreams) == "http://b"  # the only one with fewer in flight
    assert picker.acquire(("http://a",), avoid="http://a") is None  # refused, and no other one


# -- the request's parts ----------------------------------------------------------------------------------------


def test_the_path_names_team_endpoint_and_the_rest_as_sent():
    assert split_path("/ml/chat/v1/completions?x=%20y") == ("ml", "chat", "/v1/completions?x=%20y")
    assert split_path("/ml/chat") == ("ml", "chat", "/")
    assert split_path("/ml/chat/a%2Fb/") == ("ml", "chat", "/a%2Fb/")
    assert split_path("/ml") is None and split_path("/") is None and split_path("//chat/x") is None


def test_a_streams_tokens_come_from_its_usage_chunk_or_else_its_content_chunks():
    with_usage = StreamTokens()
    events = (b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\ndata: {"choices":[{"delta":'
              b'{"content":" b"}}],"usage":null}\n\ndata: {"choices":[],"usage":{"prompt_tokens":7,'
              b'"completion_tokens":2}}\n\ndata: [DONE]\n\n')
    for i in range(0, len(events), 13):  # chunks cut anywhere, as the network cuts them
        with_usage.feed(events[i:i + 13])
    assert with_usage.tokens() == (7, 2)
    without = StreamTokens()
    without.feed(b'data: {"choices":[{"text":"one"}]}\n\ndata: {"choices":[{"text":""}]}\n\n'
                 b'data: {"choices":[{"text":" two"}]}\n\ndata: not json\n\ndata: [DONE]\n\n')
    assert without.tokens() == (0, 2)


# -- keys -------------------------------------------------------------------------------------------------------


@pytest.fixture
def team(db, flavors):
    return make_team("ml-research", "ML Research")


def test_a_key_is_checked_at_request_time_and_its_changes_are_read_by_updated_at(team):
    endpoint = make_endpoint(team)
    raw, key = make_key(team, endpoint, expires_at=timezone.now() + timedelta(hours=1))
    cache = KeyCache()
    assert cache.refresh() == 1
    now = timezone.now()
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk, now).id == key.pk
    assert cache.check(f"bearer  {raw} ", team.pk, endpoint.pk, now) is not None
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk, now + timedelta(hours=2)) is None  # expired by then
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk + 1, now) is None  # another endpoint
    assert cache.check(raw, team.pk, endpoint.pk, now) is None  # not a bearer
    change_key(key, disabled_at=timezone.now())
    assert cache.refresh() == 1  # only the changed one
    assert cache.check(f"Bearer {raw}", team.pk, endpoint.pk, now) is None
    cache.used(cache.by_digest[key.digest], now)
    assert KeyCache.write_last_used(cache.take_used()) == 1
    cache.used(cache.by_digest[key.digest], now + timedelta(seconds=10))
    assert cache.take_used() == {}  # once a minute at most


# -- the route table ----------------------------------------------------------------------------------------------


def test_the_route_table_holds_the_holding_endpoints_with_their_ready_replicas(team):
    ready = make_endpoint(team, "chat")
    serve(ready, 41001, 41002)
    asleep = make_endpoint(team, "asleep", state="scaled_to_zero")
    serve(asleep, 41003)  # whatever the cluster says, an endpoint at zero has no upstream: held
    make_endpoint(team, "gone", state="deleted")
    loading = make_endpoint(team, "loading", state="deploying")
    serve(loading, 41004)
    SimPod.objects.filter(workload=loading.object_name).update(stage=2)  # started, not ready
    EndpointRevision.objects.create(endpoint=ready, number=1, state=RevisionState.RETIRED, created_at=timezone.now())
    EndpointRevision.objects.create(endpoint=ready, number=2, state=RevisionState.STABLE, created_at=timezone.now())
    table = routes()
    assert set(table) == {("ml-research", "chat"), ("ml-research", "asleep"), ("ml-research", "loading")}
    route = table[("ml-research", "chat")]
    assert route.endpoint_id == ready.pk and route.team_id == team.pk and route.ready
    assert route.targets == (Target(2, 100, ("http://127.0.0.1:41001", "http://127.0.0.1:41002")),)
    assert table[("ml-research", "asleep")].targets == (Target(1, 100, ()),)
    assert not table[("ml-research", "loading")].ready


def test_a_service_reaches_only_the_pods_its_selector_selects(team):
    """A canary's Service (``<object_name>-canary``) selects its own pods, not stable's: the selector decides."""
    from sandbox.backend import SandboxBackend
    from sandbox.models import SimObject

    endpoint = make_endpoint(team)
    serve(endpoint, 41001)
    service = SimObject.objects.get(resource_kind="Service", name=endpoint.object_name)
    SimObject.objects.create(cluster=service.cluster, resource_kind="Service", api_version="v1", namespace=service.namespace,
                             name=f"{endpoint.object_name}-canary", workload=service.workload, uid="c",
                             created_at=timezone.now(),
                             manifest={"spec": {"selector": {**service.manifest["spec"]["selector"], "rev": "2"}}})
    stable = ServiceRef(service.namespace, endpoint.object_name)
    canary = ServiceRef(service.namespace, f"{endpoint.object_name}-canary")
    found = SandboxBackend(service.cluster).serving_upstreams([stable, canary, ServiceRef(service.namespace, "none")])
    assert found[stable] == ("http://127.0.0.1:41001",) and found[canary] == ()
    assert found[ServiceRef(service.namespace, "none")] == ()


def test_a_real_cluster_is_reached_at_the_services_address():
    ref = ServiceRef("team-ml", "ep-7-canary", 80)
    backend = KubernetesBackend.__new__(KubernetesBackend)  # no API server needed: no call is made
    assert backend.serving_upstreams([ref]) == {ref: ("http://ep-7-canary.team-ml.svc.cluster.local:80",)}


# -- the counts --------------------------------------------------------------------------------------------------


def test_two_recorders_add_up_in_the_same_rows(team):
    endpoint = make_endpoint(team)
    _raw, key = make_key(team, endpoint)
    now = timezone.now()
    recorders = [Recorder(), Recorder()]
    recorders[1].gateway = "other-host:2"
    for n, recorder in enumerate(recorders):
        for i in range(3 + n):
            recorder.begin(endpoint.pk, team.pk, 1, now)
            recorder.add(Outcome(endpoint.pk, team.pk, 1, key.pk, 500 if i == 0 else 200, now, 10.0 * (i + 1),
                                 stream=i == 1, ttfb_ms=3.0 if i == 1 else None, input_tokens=5, output_tokens=7,
                                 busy_seconds=0.5, error=i == 0))
        recorder.write(recorder.take())
        Recorder.write_load(recorder.load(now, 2.0))
    (window,) = TrafficWindow.objects.filter(endpoint=endpoint)
    assert (window.requests, window.status_2xx, window.status_5xx, window.streams) == (7, 5, 2, 2)
    assert (window.input_tokens, window.output_tokens, window.step) == (35, 49, STEP)
    assert sum(window.latency) == 7 and sum(window.ttft) == 2
    assert histogram.quantile(window.latency, 0.5) <= 20
    assert window.in_flight_max == 4
    (usage,) = KeyUsage.objects.filter(key=key)
    assert (usage.requests_2xx, usage.requests_5xx, usage.errors, usage.input_tokens) == (5, 2, 2, 35)
    loads = {row.gateway: row for row in GatewayLoad.objects.filter(endpoint=endpoint)}
    assert len(loads) == 2 and sum(row.in_flight for row in loads.values()) == 7
    assert sum(row.requests_per_second for row in loads.values()) == 3.5
