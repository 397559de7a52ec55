"""An endpoint's traffic (inference.traffic): series read from the gateways' windows, figures now, folding into
minutes, and GET /endpoints/{id}/traffic/. The rows are written as the gateways write them (the contract:
inference.models.TrafficWindow), never through the gateway's code."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from django.utils import timezone

from inference import histogram, services, traffic
from inference.models import GatewayLoad, TrafficWindow
from inference.tasks import compact_traffic
from tests.factories import add_member, make_team, make_user
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db


def window(endpoint, start, *, revision=1, step=traffic.RAW_STEP, latencies=(), ttfts=(), errors=0, clients=0,
           tokens=0, in_flight=0):
    """One gateway window as the gateways write it: counts and histograms of the requests that ended in it."""
    latency, ttft = histogram.empty(), histogram.empty()
    for ms in latencies:
        histogram.add(latency, ms)
    for ms in ttfts:
        histogram.add(ttft, ms)
    requests = len(latencies)
    return TrafficWindow.objects.create(
        endpoint=endpoint, team_id=endpoint.team_id, revision=revision, start=start, step=step, requests=requests,
        status_2xx=requests - errors - clients, status_4xx=clients, status_5xx=errors, streams=len(ttfts),
        input_tokens=3 * tokens, output_tokens=tokens, busy_seconds=sum(latencies) / 1000, latency=latency,
        ttft=ttft, in_flight_max=in_flight)


def exact_percentile(values: list[float], q: float) -> float:
    """The brute-force percentile: the value of rank ceil(q·n) in the sorted list."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


@pytest.fixture
def endpoint(member, team, ep_quota, published):
    return services.create_endpoint(member, team, endpoint_payload())


@pytest.fixture
def now():
    return traffic.floor_to(timezone.now(), 60) + timedelta(seconds=1)


def test_a_points_rates_are_exact_and_its_percentiles_those_of_all_its_requests(endpoint, now):
    rng = random.Random(47)
    minute = traffic.floor_to(now, 60) - timedelta(minutes=5)
    every, streamed = [], []
    # Six windows of one minute, each of a different size and spread: their merge is read at once.
    for i in range(6):
        latencies = [rng.lognormvariate(5 + i / 3, 0.8) for _ in range(rng.randint(5, 80))]
        ttfts = [rng.uniform(20, 400) for _ in range(len(latencies) // 3)]
        every += latencies
        streamed += ttfts
        window(endpoint, minute + timedelta(seconds=10 * i), latencies=latencies, ttfts=ttfts, errors=i,
               tokens=100 * i, in_flight=i + 2)
    answer = traffic.series(endpoint, since=minute, step=60, now=now)
    point = answer["t"].index(int(minute.timestamp()))
    total = {name: values[point] for name, values in answer["total"].items()}
    assert total["requests_per_second"] == round(len(every) / 60, 3)
    assert total["error_rate"] == round(sum(range(6)) / len(every), 4)
    assert total["tokens_per_second"] == round(sum(100 * i for i in range(6)) / 60, 3)
    assert total["in_flight"] == 7
    merged = histogram.empty()
    for ms in every:
        histogram.add(merged, ms)
    for q, name in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms"), (0.99, "latency_p99_ms")):
        # The merge of the windows is the histogram of all the requests: the same figure, to the digit...
        assert total[name] == round(histogram.quantile(merged, q), 1)
        # ...and the true percentile lies in the bucket the figure was read from.
        true = exact_percentile(every, q)
        index = histogram.bucket(true)
        low = histogram.BOUNDS_MS[index - 1] if index else 0
        assert low <= total[name] <= histogram.BOUNDS_MS[index], (name, true, total[name])
    true_ttft = exact_percentile(streamed, 0.5)
    index = histogram.bucket(true_ttft)
    assert histogram.BOUNDS_MS[index - 1] <= total["ttft_p50_ms"] <= histogram.BOUNDS_MS[index]
    # The other points of the hour had no request: a rate of 0, no percentile, no error rate.
    others = [i for i in range(len(answer["t"])) if i != point]
    assert {answer["total"]["requests_per_second"][i] for i in others} == {0}
    assert {answer["total"]["latency_p95_ms"][i] for i in others} == {None}
    assert {answer["total"]["error_rate"][i] for i in others} == {None}


def test_each_revision_apart_and_the_endpoint_as_their_sum(endpoint, now):
    start = traffic.floor_to(now, 60) - timedelta(minutes=2)
    window(endpoint, start, revision=1, latencies=[100] * 40, errors=1, in_flight=3)
    window(endpoint, start, revision=2, latencies=[900] * 10, errors=5, in_flight=2)
    answer = traffic.series(endpoint, since=start, step=60, now=now)
    first = answer["t"].index(int(start.timestamp()))
    one, two = answer["revisions"]
    assert (one["revision"], two["revision"]) == (1, 2)
    assert one["error_rate"][first] == 0.025 and two["error_rate"][first] == 0.5
    assert answer["total"]["error_rate"][first] == round(6 / 50, 4)
    assert answer["total"]["requests_per_second"][first] == round(50 / 60, 3)
    assert answer["total"]["in_flight"][first] == 5  # both revisions at once in the same window
    assert two["latency_p50_ms"][first] > one["latency_p95_ms"][first]
    only = traffic.series(endpoint, since=start, step=60, revision=2, now=now)
    assert [r["revision"] for r in only["revisions"]] == [2]
    assert only["total"]["requests_per_second"] == two["requests_per_second"]


def test_folding_into_minutes_keeps_every_sum_and_the_series(endpoint, settings, now):
    settings.SLIPWAY_TRAFFIC_RAW_MINUTES = 120
    rng = random.Random(3)
    start = traffic.floor_to(now, 60) - timedelta(hours=3)
    for i in range(60):  # ten minutes of windows, three hours ago: past the raw window
        latencies = [rng.uniform(1, 5000) for _ in range(rng.randint(0, 30))]
        window(endpoint, start + timedelta(seconds=10 * i), revision=1 + i % 2, latencies=latencies,
               ttfts=[rng.uniform(1, 500) for _ in range(rng.randint(0, 5))], errors=min(i % 3, len(latencies)),
               tokens=i, in_flight=rng.randint(0, 9))
    recent = window(endpoint, traffic.floor_to(now, 10) - timedelta(minutes=1), latencies=[50] * 4)

    def sums():
        rows = TrafficWindow.objects.filter(endpoint=endpoint)
        return ({name: sum(getattr(r, name) for r in rows) for name in traffic.SUMMED if name != "busy_seconds"},
                histogram.merge(r.latency for r in rows), histogram.merge(r.ttft for r in rows),
                round(sum(r.busy_seconds for r in rows), 6))

    before, series_before = sums(), traffic.series(endpoint, since=start, step=60, now=now)
    assert compact_traffic() == "folded=60 pruned=0"
    assert sums() == before
    folded = TrafficWindow.objects.filter(endpoint=endpoint, step=traffic.MINUTE)
    assert folded.count() == 20  # ten minutes, two revisions
    assert TrafficWindow.objects.filter(endpoint=endpoint, step=traffic.RAW_STEP).get() == recent
    # The series over minutes reads the same from the windows as from their minutes.
    assert traffic.series(endpoint, since=start, step=60, now=now) == series_before
    # A late window of a folded minute adds to it.
    window(endpoint, start, revision=1, latencies=[7] * 5, errors=2)
    minute = folded.get(revision=1, start=start)
    requests = minute.requests
    traffic.compact(now)
    minute.refresh_from_db()
    assert minute.requests == requests + 5 and minute.status_5xx >= 2


def test_rows_past_the_retention_and_gone_gateways_are_pruned(endpoint, settings, now):
    settings.SLIPWAY_TRAFFIC_KEEP_DAYS = 30
    window(endpoint, now - timedelta(days=31), step=60, latencies=[5])
    kept = window(endpoint, now - timedelta(days=29), step=60, latencies=[5])
    GatewayLoad.objects.create(endpoint=endpoint, gateway="gw:1", updated_at=now - timedelta(hours=2))
    fresh = GatewayLoad.objects.create(endpoint=endpoint, gateway="gw:2", updated_at=now)
    assert traffic.compact(now) == (0, 1)
    assert list(TrafficWindow.objects.all()) == [kept]
    assert list(GatewayLoad.objects.all()) == [fresh]
    settings.SLIPWAY_TRAFFIC_KEEP_DAYS = 0
    assert traffic.prune(now + timedelta(days=400)) == 0


def test_a_step_finer_than_a_minute_is_kept_over_the_raw_window_only(endpoint, settings, now):
    settings.SLIPWAY_TRAFFIC_RAW_MINUTES = 2
    answer = traffic.series(endpoint, since=now - timedelta(minutes=10), step=10, now=now)
    cutoff = int(traffic.raw_cutoff(now).timestamp())
    assert {w for t, w in zip(answer["t"], answer["seconds"], strict=True) if t < cutoff} == {60}
    assert {w for t, w in zip(answer["t"], answer["seconds"], strict=True) if t >= cutoff} == {10}
    assert answer["t"][-1] + answer["seconds"][-1] >= int(now.timestamp())


def test_the_figures_now_are_the_last_five_minutes_in_words(endpoint, now):
    assert traffic.figures_now(endpoint, now).words() == "no requests"
    window(endpoint, traffic.floor_to(now, 10) - timedelta(seconds=30), latencies=[200] * 299 + [2400], errors=3,
           ttfts=[90] * 10, tokens=1500)
    window(endpoint, now - timedelta(minutes=20), latencies=[1] * 1000)  # older: not now
    found = traffic.figures_now(endpoint, now)
    assert found.total["requests_per_second"] == 1.0 and found.total["error_rate"] == 0.01
    assert found.words().startswith("1 requests/s, 1.0 % errors, p50 ")
    assert "first token p50 " in found.words() and found.words().endswith("5 tokens/s")
    assert list(found.revisions) == [1]


# -- the API ---------------------------------------------------------------------------------------------
def test_the_api_answers_the_series_the_contract_names(endpoint, api, now):
    window(endpoint, traffic.floor_to(timezone.now(), 10) - timedelta(seconds=20), latencies=[120] * 30, errors=3)
    response = api.get(f"/api/v1/endpoints/{endpoint.pk}/traffic/?step=30")
    assert response.status_code == 200
    answer = response.json()
    assert set(answer) == {"ref", "since", "until", "step", "revision", "t", "seconds", "total", "revisions"}
    assert set(answer["total"]) == set(traffic.FIGURES) and answer["step"] == 30 and answer["revision"] is None
    assert len(answer["t"]) == len(answer["total"]["requests_per_second"]) >= 120
    assert sum(answer["total"]["requests_per_second"][i] * answer["seconds"][i] for i in range(len(answer["t"]))) \
        == pytest.approx(30)
    assert [r["revision"] for r in answer["revisions"]] == [1]
    since = int((timezone.now() - timedelta(minutes=10)).timestamp())
    answer = api.get(f"/api/v1/endpoints/{endpoint.pk}/traffic/?since={since}&step=60&revision=2").json()
    assert answer["revisions"] == [] and set(answer["total"]["requests_per_second"]) == {0}
    assert 10 <= len(answer["t"]) <= 11


@pytest.mark.parametrize(("query", "field"), [
    ("since=yesterday", "since"), ("step=15", "step"), ("step=0", "step"), ("step=%C2%B2", "step"),
    ("step=99999999999", "step"), ("revision=0", "revision"), ("revision=x", "revision"),
    ("revision=99999999999", "revision"),
    ("since=2020-01-01T00:00:00Z&step=10", "step"),  # millions of points
])
def test_a_bad_query_is_a_400_naming_it(endpoint, api, query, field):
    response = api.get(f"/api/v1/endpoints/{endpoint.pk}/traffic/?{query}")
    assert response.status_code == 400 and field in response.json()["errors"], (query, response.content)


def test_another_teams_endpoint_is_a_404(endpoint, flavors):
    from rest_framework.test import APIClient

    other = make_user("mallory")
    add_member(make_team("other"), other)
    outsider = APIClient()
    outsider.force_authenticate(other)
    assert outsider.get(f"/api/v1/endpoints/{endpoint.pk}/traffic/").status_code == 404


def test_the_endpoint_page_shows_the_traffic_card(endpoint, member, client, now):
    window(endpoint, traffic.floor_to(timezone.now(), 10) - timedelta(seconds=20), latencies=[120] * 60)
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert 'id="traffic"' in page and 'id="traffic-data"' in page
    assert f'data-url="/api/v1/endpoints/{endpoint.pk}/traffic/"' in page
    assert "0.2 requests/s, 0.0 % errors, p50 " in page
    partial = client.get(f"/endpoints/{endpoint.pk}/traffic/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "0.2 requests/s" in partial.content.decode()
    assert "Revision 1:" not in partial.content.decode()  # one revision: the endpoint's words are its
    # A canary beside it: each revision's figures apart, in the words and in the charts' series.
    window(endpoint, traffic.floor_to(timezone.now(), 10) - timedelta(seconds=20), revision=2, latencies=[900] * 30,
           errors=15)
    partial = client.get(f"/endpoints/{endpoint.pk}/traffic/", HTTP_HX_REQUEST="true").content.decode()
    assert "Revision 1: 0.2 requests/s, 0.0 % errors" in partial and "Revision 2: 0.1 requests/s, 50.0 % errors" in partial
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert '"revisions": [{"revision": 1' in page and '{"revision": 2' in page


def test_a_since_with_an_offset_postgresql_refuses_is_read_in_utc(endpoint, api):
    """As GPU telemetry's: Python takes offsets up to 24 h, PostgreSQL refuses one past 15:59 (never a 500)."""
    from datetime import timezone as tz

    hour = traffic.floor_to(timezone.now() - timedelta(hours=3), 3600)
    far_east = hour.astimezone(tz(timedelta(hours=20))).strftime("%Y-%m-%dT%H:%M:%S%%2B20:00")
    response = api.get(f"/api/v1/endpoints/{endpoint.pk}/traffic/?since={far_east}&step=3600")
    assert response.status_code == 200 and response.json()["since"] == hour.strftime("%Y-%m-%dT%H:%M:%SZ")
