"""Two real gateway processes (``manage.py gateway``) in front of real upstreams (the sandbox's engine, an echo
server), against the test database and Redis: forwarding, streaming, keys, limits, holding, failures, counts."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time

import httpx
import pytest
from django.utils import timezone

from inference.models import ColdStart, GatewayLoad, KeyUsage, TrafficWindow
from tests.e2e.conftest import wait_for
from tests.factories import make_team
from tests.gateway.support import (
    Echo,
    bearer,
    change_key,
    completion,
    expired,
    make_endpoint,
    make_key,
    serve,
    start_engine,
    start_gateway,
    until_status,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

HOLD_SECONDS = 8


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory):
    """One engine (30 ms a token) and one echo server for the module."""
    tmp = tmp_path_factory.mktemp("upstreams")
    engine, port = start_engine(tmp, SLIPWAY_SIM_TOKEN_MS="30", SLIPWAY_SIM_TTFT_MS="20")
    echo = Echo()
    yield {"engine": port, "echo": echo.port}
    echo.stop()
    engine.stop()


@pytest.fixture(scope="module")
def gateways(tmp_path_factory, django_db_setup, django_db_blocker):
    """Two gateway processes on the test database (holding requests :data:`HOLD_SECONDS` at most)."""
    tmp = tmp_path_factory.mktemp("gateways")
    with django_db_blocker.unblock():
        # b's /metrics is for its scraper's token alone (no address is allowed): the public route's callers'.
        started = [start_gateway(tmp, "a", SLIPWAY_GATEWAY_HOLD_SECONDS=str(HOLD_SECONDS)),
                   start_gateway(tmp, "b", SLIPWAY_GATEWAY_HOLD_SECONDS=str(HOLD_SECONDS),
                                 SLIPWAY_METRICS_ALLOW="192.0.2.1/32", SLIPWAY_METRICS_TOKEN=SCRAPE_TOKEN)]
    yield [base for _process, base in started]
    for process, _base in started:
        assert process.stop() == 0, process.text()  # SIGTERM: a clean stop after the last write of its counts


@pytest.fixture
def team(db, flavors):
    return make_team("ml-research", "ML Research")


@pytest.fixture
def endpoint(team, upstreams):
    endpoint = make_endpoint(team)
    serve(endpoint, upstreams["engine"])
    return endpoint


SCRAPE_TOKEN = "scrape-token-for-the-tests"


def url(base: str, team: str = "ml-research", name: str = "chat", rest: str = "v1/completions") -> str:
    return f"{base}/{team}/{name}/{rest}"


def test_a_request_goes_through_with_its_path_query_body_and_headers_untouched(gateways, team, upstreams):
    echoing = make_endpoint(team, "echo")
    serve(echoing, upstreams["echo"])
    raw, _key = make_key(team, echoing)
    target = url(gateways[0], name="echo", rest="v1/some%2Fthing/x?b=2&a=%20one&a=two")
    body = b'{"exact": "bytes",  "kept":true}'
    answer = until_status(target, 200, method="POST", content=body,
                          headers={**bearer(raw), "Cookie": "session=secret", "X-Custom": "kept",
                                   "Content-Type": "application/json"})
    seen = answer.json()
    assert seen["method"] == "POST"
    assert seen["path"] == "/v1/some%2Fthing/x?b=2&a=%20one&a=two"
    assert seen["body"] == body.decode()
    headers = {name.lower(): value for name, value in seen["headers"].items()}
    assert headers["x-custom"] == "kept" and headers["content-type"] == "application/json"
    assert "authorization" not in headers and "cookie" not in headers
    assert headers["x-forwarded-for"] == "127.0.0.1" and headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-host"] == gateways[0].removeprefix("http://")


def test_the_engine_answers_through_the_gateway_as_it_answers_directly(gateways, team, endpoint, upstreams):
    raw, _key = make_key(team)  # a team key: valid for every endpoint of the team
    through = until_status(url(gateways[1]), 200, method="POST", json=completion(), headers=bearer(raw)).json()
    direct = httpx.post(f"http://127.0.0.1:{upstreams['engine']}/v1/completions", json=completion()).json()
    assert through["choices"] == direct["choices"] and through["usage"] == direct["usage"]
    missing = httpx.get(url(gateways[1], rest="no/such/path"), headers=bearer(raw))
    assert missing.status_code == 404  # the replica's own answer, passed through


def test_a_stream_arrives_token_by_token(gateways, team, endpoint):
    raw, _key = make_key(team, endpoint)
    until_status(url(gateways[0]), 200, method="POST", json=completion(), headers=bearer(raw))
    arrivals = []
    with httpx.stream("POST", url(gateways[0]), headers=bearer(raw), timeout=10,
                      json=completion(max_tokens=30, stream=True, prompt="Tell a long story")) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line[6:]))
    assert arrivals[-1][1] == "[DONE]"
    tokens = [json.loads(data) for _at, data in arrivals[:-1]]
    assert len(tokens) >= 10
    # 30 ms a token: the first chunk came long before the engine generated the last one.
    assert arrivals[-1][0] - arrivals[0][0] > 0.2


def test_every_refusal_is_the_same_401(gateways, team, endpoint):
    other = make_team("vision", "Vision")
    make_endpoint(other, "chat")
    good, _ = make_key(team, endpoint)
    revoked, revoked_key = make_key(team, endpoint)
    disabled, disabled_key = make_key(team, endpoint)
    change_key(revoked_key, revoked_at=timezone.now())
    change_key(disabled_key, disabled_at=timezone.now())
    late, _ = make_key(team, endpoint, **expired())
    others, _ = make_key(other)
    other_endpoint = make_endpoint(team, "other")
    for_another_endpoint, _ = make_key(team, other_endpoint)
    base = gateways[0]
    until_status(url(base), 200, method="POST", json=completion(), headers=bearer(good))
    until_status(url(base), 401, method="POST", json=completion(), headers=bearer(revoked))
    until_status(url(base), 401, method="POST", json=completion(), headers=bearer(disabled))
    cases = {
        "no key": (url(base), {}),
        "wrong key": (url(base), bearer("sw-" + "x" * 43)),
        "not a bearer": (url(base), {"Authorization": f"Basic {good}"}),
        "revoked": (url(base), bearer(revoked)),
        "disabled": (url(base), bearer(disabled)),
        "expired": (url(base), bearer(late)),
        "another team's key": (url(base), bearer(others)),
        "another endpoint's key": (url(base), bearer(for_another_endpoint)),
        "unknown endpoint": (url(base, name="nope"), bearer(good)),
        "unknown team": (url(base, team="nobody"), bearer(good)),
        "no endpoint at all": (f"{base}/ml-research", bearer(good)),
    }
    seen = {}
    for case, (target, headers) in cases.items():
        answer = httpx.post(target, json=completion(), headers=headers)
        seen[case] = (answer.status_code, answer.content, answer.headers.get("www-authenticate"),
                      answer.headers.get("content-type"))
    assert len(set(seen.values())) == 1, seen
    assert seen["no key"][0] == 401 and seen["no key"][2] == "Bearer"


def test_a_revocation_reaches_both_gateways_within_five_seconds(gateways, team, endpoint):
    raw, key = make_key(team, endpoint)
    for base in gateways:
        until_status(url(base, rest="v1/models"), 200, headers=bearer(raw))
    change_key(key, revoked_at=timezone.now())
    revoked = time.monotonic()
    for base in gateways:
        until_status(url(base, rest="v1/models"), 401, headers=bearer(raw), timeout=5)
    assert time.monotonic() - revoked <= 5


def test_a_key_over_its_requests_per_minute_gets_429_with_retry_after(gateways, team, endpoint):
    raw, _key = make_key(team, endpoint, requests_per_minute=2)
    until_status(url(gateways[0], rest="v1/models"), 200, headers=bearer(raw))
    # Across both processes: the counter is Redis's. Enough requests to pass 2 even if a minute turns meanwhile.
    statuses = [httpx.get(url(gateways[i % 2], rest="v1/models"), headers=bearer(raw)) for i in range(6)]
    refused = [a for a in statuses if a.status_code == 429]
    assert refused, [a.status_code for a in statuses]
    assert 1 <= int(refused[0].headers["retry-after"]) <= 60
    assert refused[0].json()["error"]["type"] == "rate_limit_error"


def test_a_key_over_its_tokens_per_minute_gets_429(gateways, team, endpoint):
    raw, _key = make_key(team, endpoint, tokens_per_minute=10)
    until_status(url(gateways[0]), 200, method="POST", json=completion(max_tokens=8), headers=bearer(raw))
    # The first answer's tokens (prompt + 8) are added after it; the next request in the minute is refused.
    answer = until_status(url(gateways[1]), 429, method="POST", json=completion(max_tokens=8), headers=bearer(raw))
    assert int(answer.headers["retry-after"]) >= 1


def test_a_held_request_is_answered_once_a_replica_is_ready(gateways, team, upstreams):
    asleep = make_endpoint(team, "asleep", state="scaled_to_zero")
    ColdStart.objects.create(endpoint=asleep, pod="asleep-0", from_zero=True, started_at=timezone.now(),
                             stages={"admitted": timezone.now().isoformat()})
    probe = make_endpoint(team, "probe")  # read in the same table as the one asleep: once it answers, both are known
    serve(probe, upstreams["engine"])
    raw, _key = make_key(team)
    until_status(url(gateways[0], name="probe", rest="v1/models"), 200, headers=bearer(raw))
    with httpx.Client(timeout=HOLD_SECONDS + 5) as client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = time.monotonic()
        pending = pool.submit(client.post, url(gateways[0], name="asleep"), json=completion(),
                              headers=bearer(raw))
        wait_for(lambda: GatewayLoad.objects.filter(endpoint=asleep, held__gte=1).exists(), timeout=HOLD_SECONDS,
                 what="the held request in GatewayLoad")
        type(asleep).objects.filter(pk=asleep.pk).update(state="ready")
        serve(asleep, upstreams["engine"])
        answer = pending.result()
    assert answer.status_code == 200, answer.text
    assert time.monotonic() - sent < HOLD_SECONDS + 1
    wait_for(lambda: "first_byte" in ColdStart.objects.get(endpoint=asleep).stages, timeout=5,
             what="the cold start's first byte")
    assert ColdStart.objects.get(endpoint=asleep).complete


def test_a_request_held_past_the_limit_gets_503_with_retry_after(gateways, team, upstreams):
    make_endpoint(team, "asleep", state="scaled_to_zero")
    probe = make_endpoint(team, "probe")  # read in the same table as the one asleep
    serve(probe, upstreams["engine"])
    raw, _key = make_key(team)
    until_status(url(gateways[1], name="probe", rest="v1/models"), 200, headers=bearer(raw))
    start = time.monotonic()
    answer = httpx.post(url(gateways[1], name="asleep"), json=completion(), headers=bearer(raw),
                        timeout=HOLD_SECONDS * 3)
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"].isdigit()
    assert HOLD_SECONDS - 0.5 <= time.monotonic() - start < HOLD_SECONDS * 2
    assert answer.json()["error"]["code"] == "no_ready_replica"


def test_a_replica_that_dies_mid_stream_ends_the_stream_with_an_error(gateways, team, tmp_path):
    engine, port = start_engine(tmp_path, "dying", SLIPWAY_SIM_TOKEN_MS="200")
    try:
        fragile = make_endpoint(team, "fragile")
        serve(fragile, port)
        raw, _key = make_key(team, fragile)
        until_status(url(gateways[0], name="fragile", rest="v1/models"), 200, headers=bearer(raw))
        lines = []
        start = time.monotonic()
        with httpx.stream("POST", url(gateways[0], name="fragile"), headers=bearer(raw), timeout=10,
                          json=completion(max_tokens=40, stream=True)) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
                    if len(lines) == 2:
                        os.kill(engine.proc.pid, signal.SIGKILL)
        assert time.monotonic() - start < 8  # never a hang
        assert "[DONE]" not in lines
        assert json.loads(lines[-1])["error"]["code"] == "upstream_disconnected"
        # The replica is gone: the next request is refused at connect, no other upstream: 502.
        assert httpx.post(url(gateways[0], name="fragile"), json=completion(), headers=bearer(raw)).status_code == 502
    finally:
        engine.stop()


def test_a_whole_answer_cut_short_is_a_502_and_a_large_one_arrives_whole(gateways, team, upstreams):
    # Answers of a known length up to 256 KiB are read whole and sent in one write (gateway.server._relay_whole);
    # larger ones stream through. Either way the client gets the replica's bytes, or a clear error.
    echoing = make_endpoint(team, "echo")
    serve(echoing, upstreams["echo"])
    raw, _key = make_key(team, echoing)
    cut = until_status(url(gateways[0], name="echo", rest="cut"), 502, headers=bearer(raw))
    assert cut.json()["error"]["code"] == "upstream_disconnected"
    for size in (1000, 300 * 1024):
        answer = httpx.get(url(gateways[0], name="echo", rest=f"big?bytes={size}"), headers=bearer(raw), timeout=10)
        assert answer.status_code == 200 and answer.json()["filler"] == "x" * size
        assert int(answer.headers["content-length"]) == len(answer.content)


def test_counts_of_two_gateways_add_up(gateways, team, endpoint):
    raw, key = make_key(team, endpoint)
    for base in gateways:
        until_status(url(base, rest="v1/models"), 200, headers=bearer(raw))
    tokens = [0, 0]
    for i in range(6):
        answer = httpx.post(url(gateways[i % 2]), json=completion(max_tokens=4 + i, stream=i % 3 == 0,
                                                                    **({"stream_options": {"include_usage": True}}
                                                                       if i % 3 == 0 else {})),
                            headers=bearer(raw))
        assert answer.status_code == 200
        if i % 3 == 0:
            usage = [json.loads(line[6:]) for line in answer.text.splitlines()
                     if line.startswith("data: {") and '"usage":{' in line][-1]["usage"]
        else:
            usage = answer.json()["usage"]
        tokens[0] += usage["prompt_tokens"]
        tokens[1] += usage["completion_tokens"]
    models = 2  # the two GETs of v1/models above

    def usage_rows():
        rows = KeyUsage.objects.filter(key=key, endpoint=endpoint)
        return sum(r.requests_2xx for r in rows) == 6 + models and rows

    rows = wait_for(usage_rows, timeout=15, what="both gateways' key usage")
    assert sum(r.input_tokens for r in rows) == tokens[0]
    assert sum(r.output_tokens for r in rows) == tokens[1]
    windows = TrafficWindow.objects.filter(endpoint=endpoint)  # written in the same flushes as the usage
    # (401s of the polls above, before the key reached a gateway's cache, are no revision's: counted apart)
    assert sum(w.status_2xx for w in windows) == 6 + models
    assert sum(w.streams for w in windows) == 2
    assert (sum(w.input_tokens for w in windows), sum(w.output_tokens for w in windows)) == tuple(tokens)
    assert sum(sum(w.latency) for w in windows) == sum(w.requests for w in windows)
    assert sum(sum(w.ttft) for w in windows) == sum(w.streams for w in windows)
    wait_for(lambda: GatewayLoad.objects.filter(endpoint=endpoint).values("gateway").distinct().count() == 2,
             timeout=5, what="a load row of each gateway")
    wait_for(lambda: type(key).objects.get(pk=key.pk).last_used_at, timeout=10, what="the key's last use written")


def test_metrics_are_team_labelled(gateways, team, endpoint):
    raw, _key = make_key(team, endpoint)
    until_status(url(gateways[0]), 200, method="POST", json=completion(stream=True), headers=bearer(raw))
    text = httpx.get(f"{gateways[0]}/metrics").text
    samples = [line for line in text.splitlines() if line.startswith("slipway_gateway_")]
    assert any(line.startswith("slipway_gateway_requests_total{") and 'status_class="2xx"' in line
               for line in samples)
    assert any(line.startswith("slipway_gateway_time_to_first_byte_seconds_count{") for line in samples)
    assert samples and all('team="' in line for line in samples if "{" in line), samples
    assert all('team="ml-research"' in line or 'team="vision"' in line for line in samples if "{" in line)
    # The labels the ScaledObject's gateway triggers select and the tenant label proxy pins: the endpoint's name on
    # the cluster and its team's namespace.
    mine = [line for line in samples if line.startswith("slipway_gateway_requests_total{")
            and f'endpoint="{endpoint.object_name}"' in line]
    assert mine and all(f'namespace="{team.namespace}"' in line and 'team="ml-research"' in line for line in mine), \
        samples


def test_metrics_are_for_the_scraper_alone(gateways):
    """Every team's figures are in /metrics: a caller from an address not allowed, without the token, gets 403."""
    assert httpx.get(f"{gateways[1]}/metrics").status_code == 403
    assert httpx.get(f"{gateways[1]}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    answer = httpx.get(f"{gateways[1]}/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert answer.status_code == 200 and "slipway_gateway_" in answer.text
