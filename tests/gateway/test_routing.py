"""The gateway's pure parts and its tables, without processes: the weighted split (a property), the upstream
choice, the path split, the stream's token count, the key check, the route table from the sandbox's rows and the
additive writes of two recorders; and the request path of a gateway served in the test's own event loop
(:class:`tests.gateway.support.InProcessGateway`): what it counts of the requests it refuses."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import random
import re
import socket
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from django.db import OperationalError, connection
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import values
from prometheus_client.parser import text_string_to_metric_families

from cluster.backends.base import ServiceRef
from cluster.backends.kubernetes import KubernetesBackend
from gateway.keys import KeyCache
from gateway.recorder import COLUMN_MAX, STEP, Outcome, Recorder, Unwritten
from gateway.server import MAX_BODY_BYTES, WHOLE_ANSWER_LIMIT, StreamTokens, split_path
from inference import canary, histogram
from inference.constants import RevisionState
from inference.manifests import METRIC_GATEWAY_REQUESTS_PER_SECOND, QUERIES
from inference.models import EndpointRevision, GatewayLoad, KeyUsage, TrafficWindow
from inference.routing import Picker, Target, choose_target, routes
from sandbox.models import SimPod
from tests.conftest import redis_url
from tests.factories import make_team
from tests.gateway.support import (
    InProcessGateway,
    base_url,
    bearer,
    change_key,
    exchange,
    make_endpoint,
    make_key,
    serve,
    upstream,
)

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


# -- what the gateway refuses itself -------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def own_figures(monkeypatch):
    """Each gateway's figures in its own memory, as ``manage.py gateway`` keeps them (its command sets the same
    value class), not in the test process's multiprocess files, where two gateways' series of one name would add."""
    monkeypatch.setattr(values, "ValueClass", values.MutexValue)


class Replica:
    """An upstream that answers 200 and counts what it answered: the requests a revision really served."""

    def __init__(self) -> None:
        self.answered = 0

    async def answer(self, _request: web.Request) -> web.Response:
        self.answered += 1
        return web.json_response({"usage": {"prompt_tokens": 3, "completion_tokens": 4}})


def series(gateway: InProcessGateway, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples in the gateway's /metrics whose labels include ``labels``."""
    return sum(sample.value for family in text_string_to_metric_families(gateway.metrics.render().decode())
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


def test_requests_without_a_key_are_no_revisions_traffic_and_decide_no_canary(team):
    """Anyone who knows an endpoint's URL can send requests without a key. Counted as the stable revision's (they
    were), their sub-millisecond 401s filled its 20-request minimum and made its p95 the yardstick the canary rule
    holds the candidate to: a keyless flood rolled a healthy candidate back."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    stable, candidate = Replica(), Replica()
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()

    async def traffic():
        replicas = [await upstream(stable.answer), await upstream(candidate.answer)]
        gateway.route(endpoint, (1, 50, (base_url(replicas[0]),)), (2, 50, (base_url(replicas[1]),)))
        base = await gateway.serve()
        target = f"{base}/{team.slug}/{endpoint.name}/v1/completions"
        async with httpx.AsyncClient() as client:
            # 10 answered requests of the team's callers: too few for a verdict (20 each)...
            answered = await asyncio.gather(*[client.post(target, json={}, headers=bearer(raw)) for _ in range(10)])
            # ... and 200 of a stranger, no key or a made-up one.
            refused = await asyncio.gather(*[client.post(target, json={}, headers=bearer("sw-nope") if i % 2 else {})
                                             for i in range(200)])
        await gateway.close()
        for replica in replicas:
            await replica.close()
        return [a.status_code for a in answered], [a.status_code for a in refused]

    answered, refused = asyncio.run(traffic())
    assert set(answered) == {200} and set(refused) == {401}
    gateway.recorder.write(gateway.recorder.take())
    rows = canary.rows_of([endpoint.pk], endpoint.created_at - timedelta(minutes=5),
                          timezone.now() + timedelta(minutes=1))[endpoint.pk]
    # Each revision's rows hold what it answered, its latency histogram as many requests: none of the 401s.
    for revision, replica in ((1, stable), (2, candidate)):
        mine = [row for row in rows if row[0] == revision]
        assert sum(row[2] for row in mine) == replica.answered
        assert sum(sum(row[4]) for row in mine) == replica.answered
    assert stable.answered + candidate.answered == 10
    # So the rule sees 10 requests between them, too few for a verdict, whatever the flood.
    now = max(row[1] for row in rows) + timedelta(seconds=canary.ROW_SECONDS + canary.SETTLE_SECONDS)
    (window,) = canary.windows(rows, 2, 1, now, 1, canary.Rule())
    assert window.judgement.verdict == canary.NONE, window.as_dict()
    assert window.stable.requests == stable.answered
    # The operators still see the flood, apart, by reason.
    assert series(gateway, "slipway_gateway_refused_total", team=team.slug, endpoint=endpoint.object_name,
                  reason="unauthorized") == 200


@pytest.mark.redis
def test_demand_is_what_the_revisions_were_sent_wherever_it_shows(team):
    """One rule for demand: the requests forwarded to a revision. The requests-per-second autoscaler's series
    (``slipway_gateway_requests_total``, which its KEDA trigger sums), the sandbox's (``GatewayLoad``), and the
    traffic rows (``TrafficWindow``) count the same requests; the 401s and 429s the gateway answered itself are in
    none of them — they are counted apart, by reason, and a key's 429s in its own hour."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    limited_raw, limited = make_key(team, endpoint, requests_per_minute=1)
    replica = Replica()
    gateway = InProcessGateway(redis_url=redis_url())
    gateway.keys.refresh()

    async def traffic():
        server = await upstream(replica.answer)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        base = await gateway.serve()
        target = f"{base}/{team.slug}/{endpoint.name}/v1/completions"
        statuses = Counter()
        async with httpx.AsyncClient() as client:
            for headers in [bearer(raw)] * 5 + [bearer(limited_raw)] * 4 + [{}] * 30 + [bearer("sw-nope")] * 3:
                statuses[(headers.get("Authorization"), (await client.post(target, json={},
                                                                           headers=headers)).status_code)] += 1
        await gateway.close()
        await server.close()
        return statuses

    statuses = asyncio.run(traffic())
    limited_429 = statuses[(f"Bearer {limited_raw}", 429)]
    assert limited_429 >= 3 and statuses[(None, 401)] == 30 and statuses[("Bearer sw-nope", 401)] == 3
    forwarded = replica.answered
    assert forwarded == sum(n for (_who, status), n in statuses.items() if status == 200) == 9 - limited_429
    # The autoscaler's trigger sums this series, selected by team and endpoint.
    (name,) = re.findall(r"rate\((\w+)\{", QUERIES[METRIC_GATEWAY_REQUESTS_PER_SECOND])
    assert series(gateway, name, team=team.slug, endpoint=endpoint.object_name) == forwarded
    assert series(gateway, "slipway_gateway_request_duration_seconds_count", team=team.slug,
                  endpoint=endpoint.object_name) == forwarded
    (load,) = gateway.recorder.load(timezone.now(), 1.0)  # requests a second over one second: the requests
    assert load.requests_per_second == forwarded
    gateway.recorder.write(gateway.recorder.take())
    assert sum(w.requests for w in TrafficWindow.objects.filter(endpoint=endpoint)) == forwarded
    assert series(gateway, "slipway_gateway_refused_total", endpoint=endpoint.object_name, reason="unauthorized") == 33
    assert series(gateway, "slipway_gateway_refused_total", endpoint=endpoint.object_name,
                  reason="rate_limited") == limited_429
    (usage,) = KeyUsage.objects.filter(key=limited)
    assert (usage.requests_2xx, usage.requests_4xx) == (4 - limited_429, limited_429)


# -- counts the database refuses, and a database that is down ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_absurd_usage_is_not_counted_and_blocks_no_other_teams_counts(team):
    """A replica runs its team's image, which answers what it likes: ``"prompt_tokens": 10**19`` (past the columns'
    64 bits) made every later flush of the gateway fail, every team's counts put back and retried until its stop
    lost them."""
    other = make_team("vision", "Vision")
    mine, theirs = make_endpoint(team, "absurd"), make_endpoint(other, "chat")
    raw_mine, key_mine = make_key(team, mine)
    raw_theirs, key_theirs = make_key(other, theirs)
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()

    async def absurd(_request):
        return web.json_response({"usage": {"prompt_tokens": 10**19, "completion_tokens": 2}})

    async def traffic():
        replicas = [await upstream(absurd), await upstream(Replica().answer)]
        gateway.route(mine, (1, 100, (base_url(replicas[0]),)))
        gateway.route(theirs, (1, 100, (base_url(replicas[1]),)))
        base = await gateway.serve()
        async with httpx.AsyncClient() as client:
            statuses = [(await client.post(f"{base}/{slug}/{name}/v1/completions", json={}, headers=bearer(raw)))
                        .status_code for slug, name, raw in (("ml-research", "absurd", raw_mine),
                                                             ("vision", "chat", raw_theirs))]
        await gateway.flush()
        await gateway.close()
        for replica in replicas:
            await replica.close()
        return statuses

    assert asyncio.run(traffic()) == [200, 200]
    assert gateway.recorder.traffic == {} and gateway.recorder.usage == {}  # nothing left to retry
    usage = {row.key_id: row for row in KeyUsage.objects.filter(key__in=[key_mine, key_theirs])}
    assert (usage[key_mine.pk].input_tokens, usage[key_mine.pk].output_tokens) == (0, 2)
    assert (usage[key_theirs.pk].input_tokens, usage[key_theirs.pk].output_tokens) == (3, 4)
    assert [w.requests for w in TrafficWindow.objects.filter(endpoint=theirs)] == [1]
    assert series(gateway, "slipway_gateway_tokens_total", endpoint=mine.object_name, kind="input") == 0


def test_no_sum_exceeds_its_column_and_a_refused_group_drops_alone(team, caplog):
    """Counts the database refuses for their data would be refused at every flush: they are dropped, logged, and
    the other endpoints' counts written; a sum that would pass the column's largest value stays at it."""
    full, poisoned, healthy = (make_endpoint(team, name) for name in ("full", "poisoned", "healthy"))
    _raw, key = make_key(team, full)
    now = timezone.now()
    recorder = Recorder()
    for endpoint in (full, poisoned, healthy):
        recorder.add(Outcome(endpoint.pk, team.pk, 1, key.pk if endpoint == full else None, 200, now, 5.0,
                             input_tokens=10))
    recorder.write(recorder.take())
    TrafficWindow.objects.filter(endpoint=full).update(input_tokens=COLUMN_MAX - 3)
    KeyUsage.objects.filter(key=key).update(input_tokens=COLUMN_MAX - 3)
    for endpoint in (full, poisoned, healthy):
        recorder.add(Outcome(endpoint.pk, team.pk, 1, key.pk if endpoint == full else None, 200, now, 5.0,
                             input_tokens=10))
    (poisoned_window,) = [win for k, win in recorder.traffic.items() if k[0] == poisoned.pk]
    poisoned_window.counts["requests"] = -5  # a count no column of counts takes
    assert recorder.write(recorder.take()) == (2, 1)
    assert TrafficWindow.objects.get(endpoint=full).input_tokens == COLUMN_MAX
    assert KeyUsage.objects.get(key=key).input_tokens == COLUMN_MAX
    assert TrafficWindow.objects.get(endpoint=healthy).requests == 2
    assert TrafficWindow.objects.get(endpoint=poisoned).requests == 1  # its first flush, not the refused one
    assert f"counts of endpoint {poisoned.pk} dropped" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_counts_a_database_outage_kept_are_written_once_it_answers(team):
    """A database that is down (or locked past the gateway's wait) refuses nothing for its data: what it did not
    write is kept and written at the next flush, and what it wrote before it failed is not written again."""
    first, second = make_endpoint(team, "first"), make_endpoint(team, "second")
    _raw, key = make_key(team)
    gateway = InProcessGateway(redis_url="")
    now = timezone.now()

    def requests(count: int) -> None:
        for _ in range(count):
            for endpoint in (first, second):
                gateway.recorder.add(Outcome(endpoint.pk, team.pk, 1, key.pk, 200, now, 5.0, input_tokens=3))

    state = {"down": False, "after_first_usage": False}

    def database(execute, sql, params, many, context):
        """The database goes down when told (every statement fails as a dropped connection fails), or right after
        the first endpoint's counts are written."""
        if state["down"] and sql.lstrip().upper().startswith(("SELECT", "INSERT", "UPDATE")):
            raise OperationalError("server closed the connection unexpectedly")
        result = execute(sql, params, many, context)
        if state["after_first_usage"] and sql.lstrip().upper().startswith('UPDATE "INFERENCE_KEYUSAGE"'):
            state["down"] = True
        return result

    # The gateway's database thread, each of its statements through ``database``.
    gateway.executor = ThreadPoolExecutor(1, initializer=lambda: connection.execute_wrappers.append(database))

    def flush() -> None:
        with pytest.raises(Unwritten):
            asyncio.run(gateway.flush())

    requests(3)
    state["down"] = True
    flush()  # down from the start: nothing written, everything kept
    assert not TrafficWindow.objects.exists()
    requests(2)
    state.update(down=False, after_first_usage=True)
    flush()  # down after the first endpoint's counts: the second's kept
    state.update(down=False, after_first_usage=False)
    requests(1)
    asyncio.run(gateway.flush())
    for endpoint in (first, second):
        assert sum(w.requests for w in TrafficWindow.objects.filter(endpoint=endpoint)) == 6
    rows = KeyUsage.objects.filter(key=key)
    assert sum(r.requests_2xx for r in rows) == 12 and sum(r.input_tokens for r in rows) == 36
    assert gateway.recorder.traffic == {} and gateway.recorder.usage == {}


# -- a held client that leaves, and what passes the gateway ------------------------------------------------------


def test_a_held_request_whose_client_left_is_dropped_not_held_nor_forwarded(team):
    """The gateway runs without handler cancellation: a client that hung up while its request was held stayed held
    (waking the endpoint, up to the 300 s hold), then had the replica work for nobody."""
    asleep = make_endpoint(team, "asleep", state="scaled_to_zero")
    raw, _key = make_key(team, asleep)
    replica = Replica()
    gateway = InProcessGateway(redis_url="", hold_seconds=60)
    gateway.keys.refresh()

    async def scenario():
        server = await upstream(replica.answer)
        gateway.route(asleep, (1, 100, ()), state="scaled_to_zero")
        base = await gateway.serve()
        port = int(base.rsplit(":", 1)[1])
        message = (f"POST /{team.slug}/asleep/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {raw}\r\n"
                   f"Content-Length: 2\r\n\r\n{{}}").encode()
        loop = asyncio.get_running_loop()
        client = socket.create_connection(("127.0.0.1", port))
        await loop.run_in_executor(None, client.sendall, message)
        assert await asyncio.wait_for(gateway.holding.get(), 10) == asleep.pk
        held = gateway.recorder.held[asleep.pk]
        client.close()  # the client gives up
        status = await asyncio.wait_for(gateway.ended.get(), 10)  # well before the 60 s hold
        still_held = gateway.recorder.held[asleep.pk], gateway.waiting.get(asleep.pk)
        gateway.route(asleep, (1, 100, (base_url(server),)))  # the replica is up: nothing is waiting for it
        gateway._release_held()
        await gateway.close()
        await server.close()
        return held, status, still_held

    held, status, still_held = asyncio.run(scenario())
    assert held == 1 and status == 499
    assert still_held == (0, None)
    assert replica.answered == 0
    assert not [row for row in gateway.recorder.load(timezone.now(), 1.0) if row.held or row.requests_per_second]
    assert series(gateway, "slipway_gateway_requests_held", endpoint=asleep.object_name) == 0
    assert series(gateway, "slipway_gateway_refused_total", endpoint=asleep.object_name, reason="client_left") == 1


def test_hop_by_hop_headers_named_in_connection_go_no_further_and_a_head_keeps_its_length(team):
    """RFC 9110 §7.6.1: a header the ``Connection`` header names is for the next hop alone, both ways. And the
    answer to a HEAD, which has no body, says the length its GET would have: the replica's, not the empty body's."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()
    seen = {}

    async def replica(request):
        seen[request.method] = {name.lower() for name in request.headers}
        return web.Response(body=b"x" * 5000, content_type="application/octet-stream",
                            headers={"Connection": "keep-alive, X-Replica-Hop", "X-Replica-Hop": "for the gateway",
                                     "X-Kept": "1"})

    async def scenario():
        server = await upstream(replica)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve()).rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        answers = {method: await loop.run_in_executor(None, exchange, port, (
            f"{method} /{team.slug}/{endpoint.name}/file HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {raw}\r\n"
            f"Connection: close, X-Client-Hop\r\nX-Client-Hop: for the gateway\r\nX-Also: 1\r\n\r\n").encode())
                   for method in ("GET", "HEAD")}
        await gateway.close()
        await server.close()
        return answers

    answers = asyncio.run(scenario())
    for method in ("GET", "HEAD"):
        assert "x-client-hop" not in seen[method] and "x-also" in seen[method]
        head = answers[method].split(b"\r\n\r\n", 1)[0].decode().lower().split("\r\n")
        assert head[0].endswith("200 ok"), head
        assert "x-replica-hop: for the gateway" not in head and "x-kept: 1" in head
        assert "content-length: 5000" in head, (method, head)


def test_forwarding_headers_are_believed_only_from_a_trusted_proxy(team):
    """The replica reads ``X-Forwarded-Proto/-Host/-For`` as the truth about its caller (the links and redirects it
    builds, the address it logs): the gateway passed a client's own on, so any caller could make the endpoint see
    ``https://evil.example`` and any address. Now they are the gateway's, unless the peer is a trusted proxy."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    seen = []

    async def replica(request):
        seen.append({name.lower(): request.headers.getall(name) for name in request.headers})
        return web.json_response({})

    forged = ("X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-For: 203.0.113.6\r\n"
              "x-forwarded-proto: https\r\nForwarded: for=203.0.113.6;proto=https;host=evil.example\r\n"
              "X-Real-IP: 203.0.113.6\r\nX-Forwarded-Port: 443\r\nX-Forwarded-Prefix: /evil\r\n")

    def gateway_trusting(trusted_proxies):
        given = {} if trusted_proxies is None else {"trusted_proxies": trusted_proxies}
        gateway = InProcessGateway(redis_url="", **given)
        gateway.keys.refresh()
        return gateway

    async def scenario(gateway):
        server = await upstream(replica)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve()).rsplit(":", 1)[1])
        answer = await asyncio.get_running_loop().run_in_executor(None, exchange, port, (
            f"GET /{team.slug}/{endpoint.name}/v1/models HTTP/1.1\r\nHost: api.example.com\r\n"
            f"Authorization: Bearer {raw}\r\nConnection: close\r\n{forged}\r\n").encode())
        await gateway.close()
        await server.close()
        return answer

    # Default (SLIPWAY_GATEWAY_TRUSTED_PROXIES empty), and a list that does not hold the caller: trust no one.
    for trusted_proxies in (None, ("10.0.0.0/8", "::1/128")):
        assert asyncio.run(scenario(gateway_trusting(trusted_proxies))).startswith(b"HTTP/1.1 200")
        headers = seen.pop()
        assert headers["x-forwarded-proto"] == ["http"]
        assert headers["x-forwarded-host"] == ["api.example.com"]
        assert headers["x-forwarded-for"] == ["127.0.0.1"]
        for name in ("forwarded", "x-real-ip", "x-forwarded-port", "x-forwarded-prefix"):
            assert name not in headers, name

    # The TLS-terminating proxy in front, on the gateway's trusted list: what it says is believed and passed on.
    assert asyncio.run(scenario(gateway_trusting(("127.0.0.0/8",)))).startswith(b"HTTP/1.1 200")
    headers = seen.pop()
    assert headers["x-forwarded-proto"] == ["https"]
    assert headers["x-forwarded-host"] == ["evil.example"]
    assert headers["x-forwarded-for"] == ["203.0.113.6, 127.0.0.1"]
    assert headers["forwarded"] == ["for=203.0.113.6;proto=https;host=evil.example"]
    assert headers["x-forwarded-port"] == ["443"]


def test_a_compressed_body_is_forwarded_as_it_was_sent(team, caplog):
    """aiohttp decoded a request body sent with ``Content-Encoding: gzip`` as the gateway read it: the decoded body
    went on under the client's ``Content-Encoding: gzip`` (a replica honouring it could not read it), and a body that
    did not decode raised out of the handler: a 500 for the team's caller and a traceback. A body goes on as it was
    sent, its coding with it — the replica's to read, as the replica's answer comes back untouched."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    seen = []

    async def replica(request):
        seen.append((request.headers.get("Content-Encoding"), await request.read()))
        return web.json_response({})

    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()
    packed = gzip.compress(json.dumps({"prompt": "hello " * 50}).encode())

    async def scenario():
        application = web.Application(handler_args={"auto_decompress": False})  # a replica that reads what came
        application.router.add_route("*", "/{tail:.*}", replica)
        server = TestServer(application, host="127.0.0.1")
        await server.start_server()
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        target = f"{await gateway.serve()}/{team.slug}/{endpoint.name}/v1/completions"
        headers = {**bearer(raw), "Content-Encoding": "gzip", "Content-Type": "application/json"}
        async with httpx.AsyncClient() as client:
            answers = [await client.post(target, content=body, headers=headers) for body in (packed, b"not gzip")]
        await gateway.close()
        await server.close()
        return answers

    assert [answer.status_code for answer in asyncio.run(scenario())] == [200, 200]
    assert seen == [("gzip", packed), ("gzip", b"not gzip")]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_an_answer_nested_past_the_parsers_reach_passes_untouched_and_uncounted(team, caplog):
    """The gateway parses a JSON answer (and each event of a stream) for its ``usage``; Python's parser recurses a
    level a call, and an answer of 100,000 nested ``[`` raised RecursionError out of the handler: a 500 (or a
    stream cut) for the replica's 200 on the team's own endpoint, and a traceback in the log. Now such an answer
    passes byte for byte, its tokens not counted; one nested within reach is still counted."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()
    deep = b"[" * 100_000 + b"]" * 100_000
    within = b"[" * 200 + b"]" * 200
    usage = b'"usage": {"prompt_tokens": 3, "completion_tokens": 4}'
    bodies = {
        "whole": b'{' + usage + b', "deep": ' + deep + b'}',  # 200 kB of a stated length: read whole
        "streamed": b'{' + usage + b', "deep": ' + deep + b'}',  # no length: relayed as it comes
        "events": b'data: {"choices": [{"text": "a"}], "deep": ' + deep + b'}\n\n'
                  b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}\n\ndata: [DONE]\n\n',
        "within": b'{' + usage + b', "deep": ' + within + b'}',
    }

    async def replica(request):
        name = request.path.rsplit("/", 1)[1]
        if name in ("whole", "within"):
            return web.Response(body=bodies[name], content_type="application/json")
        answer = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if name == "events" else "application/json"})
        await answer.prepare(request)
        half = len(bodies[name]) // 2
        await answer.write(bodies[name][:half])
        await answer.write(bodies[name][half:])
        await answer.write_eof()
        return answer

    async def scenario():
        server = await upstream(replica)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        base = await gateway.serve()
        async with httpx.AsyncClient(timeout=30) as client:
            answers = {name: await client.post(f"{base}/{team.slug}/{endpoint.name}/v1/{name}", json={},
                                               headers=bearer(raw)) for name in bodies}
        await gateway.close()
        await server.close()
        return answers

    with caplog.at_level("WARNING"):
        answers = asyncio.run(scenario())
    for name, answer in answers.items():
        assert (name, answer.status_code) == (name, 200)
        assert answer.content == bodies[name], name
    assert not [record for record in caplog.records if record.levelname in ("ERROR", "CRITICAL") or record.exc_info]
    labels = {"endpoint": endpoint.object_name}
    assert series(gateway, "slipway_gateway_requests_total", status_class="2xx", **labels) == 4
    # Counted: the usage within reach (3 + 4) and the stream's last event (5 + 6); the deep answers' are not read.
    assert series(gateway, "slipway_gateway_tokens_total", kind="input", **labels) == 3 + 5
    assert series(gateway, "slipway_gateway_tokens_total", kind="output", **labels) == 4 + 6


async def sent_by_a_slow_reader(port: int, request: bytes) -> socket.socket:
    """A client connected to the gateway at ``port`` that sent ``request`` whole and takes little of the answer:
    a 4 KiB receive buffer it does not read (blocking reads time out after 10 s once it does read)."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(10)
    client.connect(("127.0.0.1", port))
    await asyncio.get_running_loop().run_in_executor(None, client.sendall, request)
    return client


def test_a_client_that_stops_reading_a_stream_is_dropped_and_its_replica_let_go(team):
    """A write to a client that reads nothing waits until its socket takes more: with no limit, a client that
    stopped reading a stream held the replica's connection, its slot in the picker and the endpoint's in-flight
    count (which the autoscaler reads) for ever. Past the write timeout it is dropped, as one that hung up."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    gateway = InProcessGateway(redis_url="", write_timeout=0.5)
    gateway.keys.refresh()
    let_go = asyncio.Event()

    async def endless(request):  # a stream that never ends, as fast as it is taken
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        event = b'data: {"choices": [{"text": "' + b"x" * 65536 + b'"}]}\n\n'
        try:
            while True:
                await answer.write(event)
        finally:  # the only way out: the gateway closed the connection (a write's error, or the handler cancelled)
            let_go.set()

    async def scenario():
        server = await upstream(endless)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve()).rsplit(":", 1)[1])
        client = await sent_by_a_slow_reader(port, (  # it never reads
            f"POST /{team.slug}/{endpoint.name}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {raw}"
            f"\r\nContent-Length: 2\r\n\r\n{{}}").encode())
        try:
            status = await asyncio.wait_for(gateway.ended.get(), 30)
            await asyncio.wait_for(let_go.wait(), 10)
            return status, dict(gateway.picker.in_flight), gateway.recorder.in_flight[endpoint.pk]
        finally:
            client.close()
            await gateway.close()
            await server.close()

    status, picker, in_flight = asyncio.run(scenario())
    assert status == 200  # what the replica answered, counted as for any client that left mid-answer
    assert picker == {} and in_flight == 0
    labels = {"endpoint": endpoint.object_name}
    assert series(gateway, "slipway_gateway_requests_in_flight", **labels) == 0
    assert series(gateway, "slipway_gateway_requests_total", status_class="2xx", **labels) == 1


# -- slow clients: a body sent a byte at a time, a whole answer nobody reads ---------------------------------------


@contextlib.asynccontextmanager
async def raw_client(gateway: InProcessGateway, endpoint, replica: Replica):
    """The gateway served in this loop, routing ``endpoint`` to ``replica``, and a raw non-blocking socket to it (what
    a test sends byte by byte); all of it closed after."""
    server = await upstream(replica.answer)
    gateway.route(endpoint, (1, 100, (base_url(server),)))
    port = int((await gateway.serve()).rsplit(":", 1)[1])
    client = socket.create_connection(("127.0.0.1", port))
    client.setblocking(False)
    try:
        yield asyncio.get_running_loop(), client
    finally:
        client.close()
        await gateway.close()
        await server.close()


async def http_answer(client: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer read from ``client`` (a non-blocking socket, in the test's loop): its status, its headers
    (lowercased names) and its body, as long as its ``Content-Length`` says — read while the connection stays open."""
    loop = asyncio.get_running_loop()
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await loop.sock_recv(client, 65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = await loop.sock_recv(client, 65536)
        assert chunk, body
        body += chunk
    return int(status_line.split()[1]), headers, body


def test_a_body_sent_a_byte_at_a_time_gets_a_408_at_the_body_timeout(team):
    """``request.read()`` had no limit: a client that sent its headers, then its body a byte at a time (a slowloris),
    held the handler and its connection for as long as it liked — a pause between bytes never long enough for any
    timeout between reads. The whole body has a deadline: past it 408, the connection closed, counted as a refusal
    (no revision saw it) and in the key's hour, and nothing left held (no in-flight count, no picker slot, no wait)."""
    endpoint = make_endpoint(team)
    raw, key = make_key(team, endpoint)
    replica = Replica()
    gateway = InProcessGateway(redis_url="", body_timeout=0.5)
    gateway.keys.refresh()
    length = 200  # at the client's pace below, 10 s to send it all

    async def scenario():
        async with raw_client(gateway, endpoint, replica) as (loop, client):
            await loop.sock_sendall(client, (
                f"POST /{team.slug}/{endpoint.name}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                f"{raw}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{").encode())
            sent, status = 1, None
            while status is None and sent < length:
                try:  # the slowloris's pace, not a synchronisation: one more byte whenever 50 ms pass unanswered
                    status = await asyncio.wait_for(gateway.ended.get(), 0.05)
                except TimeoutError:
                    await loop.sock_sendall(client, b" ")
                    sent += 1
            answer = await http_answer(client)
            return (status, sent, answer, dict(gateway.picker.in_flight), gateway.recorder.in_flight[endpoint.pk],
                    dict(gateway.waiting))

    status, sent, (answered, headers, body), picker, in_flight, waiting = asyncio.run(scenario())
    assert status == 408 and 1 < sent < length  # it kept sending, and was cut at the deadline, not at a pause
    assert answered == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "body_timeout"
    assert replica.answered == 0
    assert picker == {} and in_flight == 0 and waiting == {}
    labels = {"endpoint": endpoint.object_name}
    assert series(gateway, "slipway_gateway_refused_total", reason="body_timeout", **labels) == 1
    assert series(gateway, "slipway_gateway_requests_total", **labels) == 0
    _traffic, usage = gateway.recorder.take()
    assert [(k[0], counts["requests_4xx"]) for k, counts in usage.items()] == [(key.pk, 1)]


def test_a_client_that_hangs_up_mid_body_is_counted_as_gone_not_a_500(team, caplog):
    """A client that hung up before its body was whole made ``request.read()`` raise: the handler ended in aiohttp's
    500 for nobody and a traceback in the log, and the request was counted nowhere. It is a client that left."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    replica = Replica()
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()

    async def scenario():
        server = await upstream(replica.answer)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve()).rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        client = socket.create_connection(("127.0.0.1", port))
        try:
            await loop.run_in_executor(None, client.sendall, (
                f"POST /{team.slug}/{endpoint.name}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                f"{raw}\r\nContent-Length: 100\r\n\r\n{{\"prompt\": ").encode())
            await asyncio.wait_for(gateway.begun.get(), 10)  # its handler waits for the rest of the body
            client.close()
            return await asyncio.wait_for(gateway.ended.get(), 10)
        finally:
            client.close()
            await gateway.close()
            await server.close()

    assert asyncio.run(scenario()) == 499
    assert replica.answered == 0
    assert series(gateway, "slipway_gateway_refused_total", endpoint=endpoint.object_name, reason="client_left") == 1
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_a_chunked_body_whose_framing_breaks_is_bounded_by_the_body_timeout_and_forwarded_nowhere(team, caplog):
    """A chunk size that is not hexadecimal, part-way through a chunked body: aiohttp's compiled parser drops the
    framing error without telling the handler that reads the body (docs/serving.md "Slow requests"), so the request
    is a body that never arrives — refused with the body timeout's 408, the connection closed, nothing forwarded,
    nothing left held and no error logged. (Were aiohttp to hand the error to the body, a prompt 400 would be the
    answer to write here.)"""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    replica = Replica()
    gateway = InProcessGateway(redis_url="", body_timeout=0.5)
    gateway.keys.refresh()

    async def scenario():
        async with raw_client(gateway, endpoint, replica) as (loop, client):
            await loop.sock_sendall(client, (
                f"POST /{team.slug}/{endpoint.name}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                f"{raw}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"pro\r\n").encode())
            await asyncio.wait_for(gateway.begun.get(), 10)  # its handler reads the body
            await loop.sock_sendall(client, b"zz\r\nmore\r\n0\r\n\r\n")  # "zz" is no chunk size
            status = await asyncio.wait_for(gateway.ended.get(), 10)
            return (status, await http_answer(client), dict(gateway.picker.in_flight),
                    gateway.recorder.in_flight[endpoint.pk], dict(gateway.waiting))

    status, (answered, headers, body), picker, in_flight, waiting = asyncio.run(scenario())
    assert status == 408 and answered == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "body_timeout"
    assert replica.answered == 0 and picker == {} and in_flight == 0 and waiting == {}
    assert series(gateway, "slipway_gateway_refused_total", endpoint=endpoint.object_name, reason="body_timeout") == 1
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_a_body_past_the_largest_gets_the_apis_413_and_is_counted_as_refused(team):
    """A body over the gateway's 64 MiB was refused by aiohttp itself: a plain-text 413 no client written for the
    API's error shape reads, counted nowhere (neither the refusals nor the key's hour). It is the gateway's refusal,
    as a body too slow is: the API's error shape, the connection closed, counted by reason and in the key's hour."""
    endpoint = make_endpoint(team)
    raw, key = make_key(team, endpoint)
    replica = Replica()
    gateway = InProcessGateway(redis_url="")
    gateway.keys.refresh()
    chunk = b" " * (1024 * 1024)

    async def scenario():
        server = await upstream(replica.answer)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve()).rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write((f"POST /{team.slug}/{endpoint.name}/v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                          f"Bearer {raw}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {MAX_BODY_BYTES + len(chunk)}\r\n\r\n").encode())
            for _ in range(MAX_BODY_BYTES // len(chunk) + 1):  # sent until the gateway has ended the request
                writer.write(chunk)
                await writer.drain()
                if not gateway.ended.empty():
                    break
            status = await asyncio.wait_for(gateway.ended.get(), 10)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if line)
            body = await asyncio.wait_for(reader.readexactly(int(headers["Content-Length"])), 10)
            return status, head.split(b" ")[1], headers, body
        finally:
            writer.close()
            await gateway.close()
            await server.close()

    status, answered, headers, body = asyncio.run(scenario())
    assert status == 413 and answered == b"413" and headers["Connection"] == "close"
    assert json.loads(body)["error"]["code"] == "body_too_large" and "64 MiB" in json.loads(body)["error"]["message"]
    assert replica.answered == 0
    labels = {"endpoint": endpoint.object_name}
    assert series(gateway, "slipway_gateway_refused_total", reason="body_too_large", **labels) == 1
    assert series(gateway, "slipway_gateway_requests_total", **labels) == 0
    _traffic, usage = gateway.recorder.take()
    assert [(k[0], counts["requests_4xx"]) for k, counts in usage.items()] == [(key.pk, 1)]


def test_a_client_that_reads_nothing_of_a_whole_answer_is_dropped_at_the_write_timeout(team):
    """An answer of a stated length up to 256 KiB is read whole and sent in one write; returned unwritten, aiohttp
    wrote it after the handler, outside the write timeout: a client that read nothing held its connection and the
    write for as long as it stayed connected. It is written under the same timeout as a stream's chunks: past it the
    client is dropped (it sees the answer short), and the request counted with the replica's status, as a stream's."""
    endpoint = make_endpoint(team)
    raw, _key = make_key(team, endpoint)
    gateway = InProcessGateway(redis_url="", write_timeout=0.5)
    gateway.keys.refresh()
    size = WHOLE_ANSWER_LIMIT - 1024

    async def whole(_request):  # at once, its length stated: read whole by the gateway
        return web.Response(body=b"x" * size, content_type="application/json")

    def read_all(client: socket.socket) -> bytes:
        received = b""
        try:
            while chunk := client.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received

    async def scenario():
        server = await upstream(whole)
        gateway.route(endpoint, (1, 100, (base_url(server),)))
        port = int((await gateway.serve(send_buffer=4096)).rsplit(":", 1)[1])
        client = await sent_by_a_slow_reader(port, (  # it reads nothing until the end
            f"GET /{team.slug}/{endpoint.name}/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {raw}\r\n"
            f"Connection: close\r\n\r\n").encode())
        loop = asyncio.get_running_loop()
        try:
            status = await asyncio.wait_for(gateway.ended.get(), 30)
            # Only now does it read: what the gateway had written before it gave up, then the connection's end.
            return status, await loop.run_in_executor(None, read_all, client)
        finally:
            client.close()
            await gateway.close()
            await server.close()

    status, received = asyncio.run(scenario())
    assert status == 200
    assert received.startswith(b"HTTP/1.1 200 ") and len(received) < size  # dropped, not waited for
    labels = {"endpoint": endpoint.object_name}
    assert series(gateway, "slipway_gateway_requests_total", status_class="2xx", **labels) == 1
    assert series(gateway, "slipway_gateway_requests_in_flight", **labels) == 0
    assert series(gateway, "slipway_gateway_refused_total", **labels) == 0


@pytest.mark.parametrize("bind", ["0.0.0.0:²", "0.0.0.0:" + "9" * 5000, "0.0.0.0:0", "0.0.0.0:65536", "8080", ":80"],
                         ids=["superscript", "5000-digits", "zero", "too-high", "no-host", "empty-host"])
def test_a_bind_without_a_port_is_the_commands_error(bind):
    """``manage.py gateway --bind``: "²" passed isdigit() and int() refused it, as it refuses 5,000 digits: a traceback."""
    from django.core.management.base import CommandError

    from gateway.management.commands.gateway import parse_bind

    with pytest.raises(CommandError, match="--bind takes HOST:PORT with a port from 1 to 65535"):
        parse_bind(bind)
    assert parse_bind("[::]:8081") == ("::", 8081)
