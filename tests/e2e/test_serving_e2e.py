"""Issue 47's proof end to end on the sandbox, with real processes: a Celery worker with beat (the reconcile
cycle, the apply task, the sandbox's tick that starts a real engine per ready replica) and two gateway processes
(``manage.py gateway``), all on the test database and Redis. The test drives it as a user would: the API creates
the endpoint and its keys, an HTTP client calls the gateways.

One endpoint serves the whole story, in the order a user meets it: asleep at zero replicas, woken by its first
request (held at the gateway, answered, its cold start timed stage by stage); its tokens counted per key and its
cost split over the keys to the cent of the ledger; a stream arriving token by token; a rate-limited key refused
with ``Retry-After``; a revoked key refused by both gateways within 5 s, with the very body another team's key
gets; a 20 % canary splitting 1,000 requests within a chi-squared test's bounds; a bad canary (half its answers
500) rolled back by the rule, as the worker's beat evaluates it, within 60 s of its first error, and no request
failing after. One story rather than a test per point: the worker, the gateways and the wake-up cost most of the
time, and each point starts where the one before left the endpoint. docs/serving.md "The proof end to end" has
the figures it measured.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.db.models import Sum
from django.utils import timezone

from inference import canary, coldstarts, key_costs
from inference.constants import COLD_START_STAGES
from inference.models import ApiKey, ColdStart, EndpointRevision, InferenceEndpoint, KeyUsage, TrafficWindow
from quotas.demo import seed_flavors, seed_team_quotas
from tests.e2e.conftest import lend, module_worker, wait_for
from tests.factories import make_team
from tests.gateway.support import MODEL, bearer, completion, make_key, start_gateway

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres,
              pytest.mark.timeout(480)]  # 192 s and 256 s measured on the loaded 2-vCPU machine

#: The engine's knobs: the model the client asks for, a short model load (the wake-up's longest stage) and 20 ms a token.
KNOBS = {"SLIPWAY_SIM_MODEL": MODEL, "SLIPWAY_SIM_LOAD_SECONDS": "2", "SLIPWAY_SIM_TOKEN_MS": "20", "SLIPWAY_SIM_TTFT_MS": "10"}
#: The chi-squared statistic's critical value at 1 degree of freedom for p = 0.001.
CHI2_CRITICAL = 10.83


@pytest.fixture(scope="module")
def shared_worker(django_db_setup, tmp_path_factory):
    """The module's worker, with the sandbox's engines on (as ``make run`` has them)."""
    yield from module_worker(tmp_path_factory, SLIPWAY_SANDBOX_ENGINES="true")


@pytest.fixture
def worker(transactional_db, shared_worker):
    yield from lend(shared_worker)


@pytest.fixture
def gateways(worker, tmp_path):
    """Starts two gateway processes (at once) when called, on the test's tables; stopped after the test."""
    started = []

    def start() -> list[str]:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(start_gateway, tmp_path, name, SLIPWAY_GATEWAY_HOLD_SECONDS="90") for name in ("a", "b")]
        # Each one that started is kept for the stop below, even when the other did not start.
        started.extend(future.result() for future in futures if future.exception() is None)
        for future in futures:
            future.result()  # the first that failed raises its error
        return [base for _process, base in started]

    yield start
    for process, _base in started:
        assert process.stop() == 0, process.text()


@pytest.fixture
def api(team, member, api_client_for):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4, "a100-1g.10gb": 7}, Decimal("100000"))
    return api_client_for(member)


def until(api, pk: int, check, what: str, timeout: float = 60) -> dict:
    def probe():
        body = api.get(f"/api/v1/endpoints/{pk}/").json()
        return body if check(body) else None

    return wait_for(probe, timeout=timeout, interval=0.3, what=what)


def call(base: str, raw: str, **extra) -> httpx.Response:
    return httpx.post(f"{base}/ml-research/chat/v1/completions", json=completion(**extra), headers=bearer(raw),
                      timeout=120)


def seconds_until_401(base: str, raw: str, since: float, timeout: float = 10) -> tuple[float, httpx.Response]:
    """Poll ``base`` with ``raw`` until it answers 401; (seconds since ``since``, that answer)."""
    def probe():
        answer = call(base, raw)
        return answer if answer.status_code == 401 else None

    answer = wait_for(probe, timeout=timeout, interval=0.1, what=f"{base} to refuse the revoked key")
    return time.monotonic() - since, answer


def test_an_endpoint_is_woken_called_counted_billed_per_key_limited_revoked_and_split(worker, gateways, api, team):
    ep = api.post("/api/v1/endpoints/", {
        "team": "ml-research", "name": "chat", "image": "registry.example.com/serving/vllm:0.6",
        "flavor": "a100-80gb", "min_replicas": 0, "max_replicas": 1, "scale_down_delay_seconds": 600,
        "autoscale": {"metric": "gateway_in_flight", "target": 4}, "env": KNOBS}, format="json")
    assert ep.status_code == 201, ep.content
    ep = ep.json()
    assert ep["url"].endswith("/ml-research/chat")

    created = api.post(f"/api/v1/endpoints/{ep['id']}/keys/", {"name": "app"}, format="json")
    assert created.status_code == 201, created.content
    raw, key_id = created.json()["key"], created.json()["id"]
    limited = api.post(f"/api/v1/endpoints/{ep['id']}/keys/", {"name": "batch", "requests_per_minute": 2},
                       format="json").json()
    split_key = api.post(f"/api/v1/endpoints/{ep['id']}/keys/", {"name": "split"}, format="json").json()["key"]
    # The gateways start knowing every key (a key created later is known within a refresh, a second).
    first, second = gateways()
    until(api, ep["id"], lambda b: b["state"] == "scaled_to_zero", "the endpoint to sleep at zero")

    # 1. The first request is held while the endpoint wakes, and answered with OpenAI's usage.
    asked = time.monotonic()
    answer = call(first, raw)
    held = time.monotonic() - asked
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert held > float(KNOBS["SLIPWAY_SIM_LOAD_SECONDS"])  # at least the model's load: it was held, not refused
    woke = wait_for(lambda: ColdStart.objects.filter(endpoint_id=ep["id"], from_zero=True, complete=True).first(),
                    timeout=30, what="the wake-up's complete timeline")
    instants = coldstarts.instants_of(woke.stages)
    assert list(instants) == list(COLD_START_STAGES)
    assert coldstarts.attribute(instants).attributed_share >= 0.95

    # The tokens land in the key's hour and the endpoint's traffic rows.
    print(f"held {held:.1f} s")
    wait_for(lambda: KeyUsage.objects.filter(key_id=key_id, input_tokens=usage["prompt_tokens"],
                                             output_tokens=usage["completion_tokens"], requests_2xx=1).exists(),
             timeout=20, what="the key's usage row")
    wait_for(lambda: TrafficWindow.objects.filter(endpoint_id=ep["id"]).aggregate(
        n=Sum("output_tokens"))["n"] == usage["completion_tokens"], timeout=20, what="the endpoint's traffic rows")
    assert ApiKey.objects.get(pk=key_id).last_used_at is not None

    # 2. A stream arrives token by token through the other gateway.
    arrivals = []
    with httpx.stream("POST", f"{second}/ml-research/chat/v1/completions", headers=bearer(raw), timeout=30,
                      json=completion(max_tokens=30, stream=True, prompt="Tell a long story",
                                     stream_options={"include_usage": True})) as streamed:
        assert streamed.status_code == 200
        for line in streamed.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line[6:]))
    assert arrivals[-1][1] == "[DONE]" and len(arrivals) >= 11
    chunks = [json.loads(data) for _at, data in arrivals[:-1]]
    streamed_usage = chunks[-1]["usage"]  # asked for: the last chunk carries the stream's usage
    assert streamed_usage["completion_tokens"] == 30
    # 30 tokens at 20 ms: the first chunk came at least 0.3 s before the last one was generated.
    assert arrivals[-2][0] - arrivals[0][0] > 0.3

    # 3. A key limited to 2 requests a minute: the third gets 429 with Retry-After. The limit counts in
    # calendar minutes (gateway/limits.py): the three go well inside one, not across its turn.
    wait_for(lambda: time.time() % 60 < 50, timeout=15, interval=0.2, what="10 s or more left in the minute")
    statuses = [call(first, limited["key"]) for _ in range(3)]
    assert [s.status_code for s in statuses[:2]] == [200, 200], statuses[0].text
    assert statuses[2].status_code == 429 and int(statuses[2].headers["Retry-After"]) >= 1

    # 4. The endpoint's cost per key sums to its ledger cost to the cent. The ledger's open segment runs to
    # ``now``; half an hour ahead gives a cost of whole cents whatever the test's pace.
    wait_for(lambda: KeyUsage.objects.filter(key_id=limited["id"], requests_2xx=2, requests_4xx=1).exists(),
             timeout=20, what="the limited key's usage")
    # Each gateway flushes its own counts: the stream went through the second one, whose flush may come later.
    streamed_total = usage["completion_tokens"] + streamed_usage["completion_tokens"]
    wait_for(lambda: KeyUsage.objects.filter(key_id=key_id).aggregate(n=Sum("output_tokens"))["n"] == streamed_total,
             timeout=20, what="the stream's tokens in the key's usage")
    now = timezone.now() + timedelta(minutes=30)
    endpoint = InferenceEndpoint.objects.get(pk=ep["id"])
    report = key_costs.endpoint_key_usage(endpoint, endpoint.created_at - timedelta(hours=1),
                                          now + timedelta(hours=1), now=now)
    assert report.ledger_cost > 0
    assert sum(line.cost for line in report.totals) == report.ledger_cost
    by_key = {line.key_id: line for line in report.totals}
    assert by_key[key_id].cost > 0 and by_key[limited["id"]].cost > 0
    # The stream's tokens are counted too.
    assert by_key[key_id].output_tokens == usage["completion_tokens"] + streamed_usage["completion_tokens"]
    assert by_key[key_id].input_tokens == usage["prompt_tokens"] + streamed_usage["prompt_tokens"]
    # The API's report (up to the real now) sums the same way, its keys' tokens as counted.
    served = api.get(f"/api/v1/endpoints/{ep['id']}/keys/usage/")
    assert served.status_code == 200, served.content
    served = served.json()
    assert sum(Decimal(line["cost"]) for line in served["totals"]) == Decimal(served["ledger_cost"])
    tokens = {line["key_id"]: line["output_tokens"] for line in served["totals"]}
    assert tokens[key_id] == by_key[key_id].output_tokens and tokens[limited["id"]] == by_key[limited["id"]].output_tokens > 0

    # 5. Revoked: both gateways refuse it within 5 s; another team's key gets the very same 401.
    revoked_at = time.monotonic()
    assert api.delete(f"/api/v1/endpoints/{ep['id']}/keys/{key_id}/").status_code == 204
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        seen = list(pool.map(lambda base: seconds_until_401(base, raw, revoked_at), (first, second)))
    assert all(seconds <= 5 for seconds, _ in seen), [s for s, _ in seen]
    print(f"revocation seen after {[round(s, 2) for s, _ in seen]} s")
    others, _ = make_key(make_team("vision", "Vision"))
    stranger = call(first, others)
    assert stranger.status_code == 401 and stranger.content == seen[0][1].content == seen[1][1].content

    # 6. A 20 % canary splits 1,000 requests within a chi-squared test's bounds.
    rolled = api.patch(f"/api/v1/endpoints/{ep['id']}/", {"image": "registry.example.com/serving/vllm:0.7",
                                                         "rollout": "canary", "weight": 20}, format="json")
    assert rolled.status_code == 200, rolled.content
    wait_for(lambda: EndpointRevision.objects.filter(endpoint_id=ep["id"], number=2, replicas=1,
                                                     state="canary").exists() and canary_answers(first, split_key),
             timeout=60, interval=0.5, what="the canary to take requests")
    boundary = next_boundary()
    with concurrent.futures.ThreadPoolExecutor(8) as pool, httpx.Client(timeout=30) as client:
        answers = list(pool.map(lambda _: client.post(
            f"{first}/ml-research/chat/v1/completions", json=completion(max_tokens=1),
            headers=bearer(split_key)).status_code, range(1000)))
    assert answers == [200] * 1000
    # Each gateway writes its 10 s windows when they close; on a loaded CI machine (three suites' worth of processes
    # on 2 cores) that took over 30 s once. A longer bound costs nothing when they come on time, and the message says
    # how many had come (slow, or lost?).
    try:
        counted = wait_for(lambda: (lambda c: c if sum(c.values()) == 1000 else None)(split_since(ep["id"], boundary)),
                           timeout=90, what="the 1,000 requests in the traffic rows")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: counted so far {split_since(ep['id'], boundary)}") from None
    to_canary, to_stable = counted.get(2, 0), counted.get(1, 0)
    chi2 = (to_canary - 200) ** 2 / 200 + (to_stable - 800) ** 2 / 800
    assert chi2 < CHI2_CRITICAL, counted
    print(f"split: {counted}, chi2 {chi2:.2f}")

    # 7. A bad canary (half its answers 500) is rolled back by the rule, driven by the worker's beat, within
    # 60 s of its errors starting; after the rollback (and the gateways' next refresh) no request fails.
    assert api.post(f"/api/v1/endpoints/{ep['id']}/rollback/").status_code == 200
    bad = api.patch(f"/api/v1/endpoints/{ep['id']}/", {"env": {**KNOBS, "SLIPWAY_SIM_ERROR_RATE": "0.5"},
                                                      "rollout": "canary", "weight": 20}, format="json")
    assert bad.status_code == 200, bad.content
    outcomes: list[tuple[float, int]] = []
    stop = threading.Event()

    def drive(base: str) -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                at = time.monotonic()
                status = client.post(f"{base}/ml-research/chat/v1/completions", json=completion(max_tokens=1),
                                     headers=bearer(split_key)).status_code
                outcomes.append((at, status))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        running = [pool.submit(drive, base) for base in (first, second, first, second)]
        try:
            # Two waits, each bounded for what it waits on: the canary's bring-up (its Deployment, a real engine
            # started by the sandbox's tick, the gateways' next route refresh: slow on a loaded machine, and not
            # part of the promise), then the rule's reaction. A timeout says which stage stalled and what the rule
            # saw (one CI run timed out after 120 s for the two together and could not say).
            for check, timeout, what in (
                    (lambda: any(status >= 500 for _, status in list(outcomes)), 120, "the bad canary's first 5xx"),
                    (lambda: EndpointRevision.objects.filter(endpoint_id=ep["id"], number=3,
                                                             state="rolled_back").exists(),
                     90, "the bad canary to be rolled back")):
                try:
                    wait_for(check, timeout=timeout, interval=0.2, what=what)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: {canary_state(ep['id'], outcomes)}") from None
            rolled_back = time.monotonic()
            settled = rolled_back + 2  # the gateways' route tables refresh every second
            wait_for(lambda: sum(1 for at, _ in list(outcomes) if at >= settled) >= 200, timeout=60,
                     what="200 requests after the rollback")
        finally:
            stop.set()
        for future in running:
            future.result()
    errors_began = min(at for at, status in outcomes if status >= 500)
    print(f"rollback {rolled_back - errors_began:.1f} s after the first 5xx; {len(outcomes)} requests")
    assert rolled_back - errors_began <= 60
    after = [status for at, status in outcomes if at >= settled]
    assert after and set(after) == {200}
    verdict = EndpointRevision.objects.get(endpoint_id=ep["id"], number=3).verdict
    assert verdict, "the rollback keeps the figures that decided it"


def canary_state(endpoint_id: int, outcomes: list[tuple[float, int]]) -> str:
    """What a stalled rollback wait reports: revision 3 as stored, the answers so far, and the rule's windows now."""
    revision = EndpointRevision.objects.filter(endpoint_id=endpoint_id, number=3).first()
    seen = list(outcomes)
    statuses = {status: sum(1 for _, s in seen if s == status) for status in {s for _, s in seen}}
    if revision is None:
        return f"no revision 3; answers {statuses}"
    now = timezone.now()
    rule = canary.Rule.from_settings()
    rows = canary.rows_of([endpoint_id], *canary.span(now, rule.bad_windows)).get(endpoint_id, [])
    stable = EndpointRevision.objects.filter(endpoint_id=endpoint_id, state="stable").values_list(
        "number", flat=True).first()
    windows = [w.as_dict() for w in canary.windows(rows, 3, stable, now, rule.bad_windows, rule)]
    return (f"revision 3 {revision.state}, {revision.replicas} replicas, windows good {revision.good_windows} "
            f"bad {revision.bad_windows}; answers {statuses}; the rule's windows now {windows}")


def canary_answers(base: str, raw: str) -> bool:
    """True once a burst of requests reached the canary (revision 2) as the gateway counts them."""
    for _ in range(10):
        call(base, raw, max_tokens=1)
    return TrafficWindow.objects.filter(endpoint__name="chat", revision=2, requests__gt=0).exists()


def next_boundary():
    """Wait for the gateways' next 10 s row to begin and return its start: the rows from it on hold only what
    follows. The boundary is strictly after the call: one taken from the second the call began in (as once)
    could fall just before the last of ``canary_answers``' probes, which the split then counted (1,003 of 1,000)."""
    now = timezone.now()
    start = now.replace(microsecond=0) + timedelta(seconds=10 - now.second % 10)
    wait_for(lambda: timezone.now() >= start, timeout=12, interval=0.05, what="a 10 s boundary")
    return start


def split_since(endpoint_id: int, start) -> dict[int, int]:
    rows = TrafficWindow.objects.filter(endpoint_id=endpoint_id, start__gte=start).values("revision").annotate(
        n=Sum("requests"))
    return {row["revision"]: row["n"] for row in rows}
