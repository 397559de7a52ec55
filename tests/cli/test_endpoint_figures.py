"""``slipway endpoint traffic`` and ``slipway endpoint cold-starts`` against a live server: the figures the API
answers (docs/serving.md "Traffic", "Cold starts"), one row a point or timeline, and a bad option said."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from inference import services, traffic
from inference.constants import EndpointState
from inference.models import InferenceEndpoint
from teams.services import create_api_token
from tests.inference.conftest import endpoint_payload
from tests.inference.test_cold_starts import OFFSETS, timeline_row
from tests.inference.test_traffic import window


@pytest.fixture
def endpoint(member, team, ep_quota):
    created = services.create_endpoint(member, team, endpoint_payload())
    InferenceEndpoint.objects.filter(pk=created.pk).update(state=EndpointState.READY)
    return created


def test_traffic_prints_a_row_a_point_with_the_apis_figures(cli, endpoint):
    minute = traffic.floor_to(timezone.now(), 60) - timedelta(minutes=3)
    window(endpoint, minute, latencies=[100] * 50 + [400] * 10, errors=6, tokens=240)
    window(endpoint, minute + timedelta(seconds=10), revision=2, latencies=[200] * 30, ttfts=[40] * 30)

    since = (minute - timedelta(minutes=7)).isoformat()  # one start for both calls, whenever each is made
    out = cli("endpoint", "traffic", "llama-chat", "--since", since, "--step", "60")
    assert out.exit_code == 0, out.output
    answer = json.loads(cli("endpoint", "traffic", "llama-chat", "--since", since, "--step", "60",
                            "-o", "json").stdout)
    header, *lines = out.stdout.splitlines()[1:]
    assert header.split()[:3] == ["AT", "REQ/S", "5XX"]
    # A row a point, in order: the JSON, read a moment later, may have one point more (a minute began).
    printed = [" ".join(line.split()[:2]) for line in lines]
    shown = [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S") for t in answer["t"]]
    assert len(printed) >= 10 and printed == shown[:len(printed)]
    i = answer["t"].index(int(minute.timestamp()))
    total = answer["total"]
    row = lines[i].split()
    # 90 requests in the minute, 6 of them 5xx; the printed figures are the API's, rounded.
    assert total["requests_per_second"][i] == pytest.approx(90 / 60)
    assert row[2:4] == [f"{total['requests_per_second'][i]:.2f}", f"{total['error_rate'][i] * 100:.1f}%"]
    assert row[4:6] == [f"{total['latency_p50_ms'][i]:.0f}", "ms"]
    assert f"{total['ttft_p50_ms'][i]:.0f} ms" in lines[i]
    empty = lines[i - 1].split()
    assert empty[2:4] == ["0.00", "—"]  # a point without requests: no error rate, no latency

    only = json.loads(cli("endpoint", "traffic", "llama-chat", "--since", "10m", "--revision", "2",
                          "-o", "json").stdout)
    assert only["revision"] == 2 and sum(only["total"]["requests_per_second"]) * only["step"] == pytest.approx(30)


def test_traffic_with_a_bad_step_or_time_says_which(cli, endpoint):
    bad_step = cli("endpoint", "traffic", "llama-chat", "--step", "7")
    assert bad_step.exit_code != 0 and "step" in bad_step.output and "multiple of 10" in bad_step.output
    bad_since = cli("endpoint", "traffic", "llama-chat", "--since", "yesterday")
    assert bad_since.exit_code != 0 and "since" in bad_since.output and "RFC 3339" in bad_since.output


def test_cold_starts_prints_the_timelines_and_each_stages_figures(cli, endpoint):
    timeline_row(endpoint, "llama-chat-a", 0, OFFSETS)
    timeline_row(endpoint, "llama-chat-b", 600, {**OFFSETS, "model_loaded": 131, "ready": 132})
    out = cli("endpoint", "cold-starts", "llama-chat")
    assert out.exit_code == 0, out.output
    answer = json.loads(cli("endpoint", "cold-starts", "llama-chat", "-o", "json").stdout)
    lines = out.stdout.splitlines()
    assert lines[0] == f"endpoint {endpoint.pk}: 2 timelines kept, 2 complete"
    assert lines[1].split()[:3] == ["ID", "POD", "REV"]
    newest = lines[2].split()
    assert newest[1] == "llama-chat-b" and newest[5:7] == ["132.0", "s"]
    assert "model_loaded 100.0 s" in lines[2]  # 31 → 131: the slowest stage, named
    stages = {line.split()[0]: line.split()[1:] for line in lines[5:] if line.strip()}
    loaded = next(f for f in answer["stages"] if f["stage"] == "model_loaded")
    assert stages["model_loaded"][:2] == [f"{loaded['p50_seconds']:.1f}", "s"]
    assert stages["to_ready"][-1] == "2"


def test_another_teams_endpoint_is_not_found(cli, endpoint, outsider):
    _token, raw = create_api_token(outsider, "cli")
    for verb in ("traffic", "cold-starts"):
        out = cli("endpoint", verb, str(endpoint.pk), SLIPWAY_TOKEN=raw)
        assert out.exit_code != 0 and "not found" in out.output.lower(), out.output
        assert "llama-chat" not in out.output
