"""The sandbox's inference engine as a real process (sandbox/engine.py), called over HTTP: OpenAI's answers and
usage, streaming token by token, /health while the model loads, vLLM's series on /metrics, the error rate,
and requests waiting beyond its concurrency."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core import processes
from sandbox import engine
from sandbox.engines import MARKER
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def start_engine():
    """Start engines with the given knobs; each is stopped after the test."""
    started = []

    def start(model: str = "tiny-llama", **knobs: str) -> str:
        port = processes.free_port()
        pid = processes.start([sys.executable, "-m", "sandbox.engine", "--port", str(port), "--model", model,
                               "--name", f"pod-{port}", "--readiness-path", "/health/ready"],
                              env=processes.minimal_env(knobs), cwd=ROOT)
        started.append(pid)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{url}/metrics"), timeout=30, interval=0.05, what="the engine to listen")
        return url

    yield start
    for pid in started:
        processes.stop(pid, MARKER)
    wait_for(lambda: not any(processes.alive(pid, MARKER) for pid in started), timeout=10, interval=0.05,
             what="the engines to stop")
    processes.reap()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _families(url: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}


def _value(url: str, name: str) -> float:
    return sum(sample.value for family in _families(url).values() for sample in family.samples
               if sample.name == name)


def test_it_answers_openai_completions_with_honest_usage(start_engine):
    url = start_engine(SLIPWAY_SIM_TOKEN_MS="1", SLIPWAY_SIM_LOAD_SECONDS="0")
    models = httpx.get(f"{url}/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny-llama"]
    prompt = "Say hello, politely."
    answer = httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": prompt, "max_tokens": 5}).json()
    assert answer["object"] == "text_completion" and answer["model"] == "tiny-llama"
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "length" and engine.count_tokens(choice["text"]) == 5
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}  # Say hello , politely .
    # Deterministic: the same prompt and seed give the same text; another seed another.
    again = httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": prompt, "max_tokens": 5}).json()
    assert again["choices"][0]["text"] == choice["text"]
    seeded = [httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": prompt, "max_tokens": 5,
                                                          "seed": seed}).json()["choices"][0]["text"]
              for seed in range(5)]
    assert len(set(seeded)) > 1
    # A chat: its messages' tokens, 3 a message and 3 for the reply's priming, as OpenAI counts them.
    chat = httpx.post(f"{url}/v1/chat/completions", json={
        "model": "tiny-llama", "max_tokens": 64,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]}).json()
    assert chat["object"] == "chat.completion"
    message = chat["choices"][0]["message"]
    assert message["role"] == "assistant" and chat["choices"][0]["finish_reason"] == "stop"  # 8-63 tokens, under 64
    assert chat["usage"]["prompt_tokens"] == (3 + 3) + (3 + 2) + 3
    assert chat["usage"]["completion_tokens"] == engine.count_tokens(message["content"])
    assert chat["usage"]["total_tokens"] == chat["usage"]["prompt_tokens"] + chat["usage"]["completion_tokens"]


def test_bad_requests_get_openai_errors_naming_the_field(start_engine):
    url = start_engine(SLIPWAY_SIM_LOAD_SECONDS="0", SLIPWAY_SIM_MAX_MODEL_LEN="64")
    cases = [
        ({"model": "other", "prompt": "x"}, 404, "model"),
        ({"model": "tiny-llama"}, 400, "prompt"),
        ({"model": "tiny-llama", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "tiny-llama", "prompt": "x", "max_tokens": 100}, 400, "max_tokens"),  # past the context window
        ({"model": "tiny-llama", "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"model": "tiny-llama", "prompt": "x", "stop": 3}, 400, "stop"),
        ({"model": "tiny-llama", "prompt": "x", "n": 2}, 400, "n"),
    ]
    for body, status, param in cases:
        answer = httpx.post(f"{url}/v1/completions", json=body)
        assert (answer.status_code, answer.json()["error"]["param"]) == (status, param), body
    broken = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny-llama", "messages": []}).status_code == 400


def test_a_stream_sends_each_token_as_it_is_generated(start_engine):
    url = start_engine(SLIPWAY_SIM_TOKEN_MS="60", SLIPWAY_SIM_TTFT_MS="0", SLIPWAY_SIM_LOAD_SECONDS="0")
    body = {"model": "tiny-llama", "prompt": "Tell me a story", "max_tokens": 8, "stream": True,
            "stream_options": {"include_usage": True}}
    events: list[tuple[float, str]] = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line:
                events.append((time.monotonic(), line))
    assert all(line.startswith("data: ") for _, line in events)
    assert events[-1][1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for _, line in events[:-1]]
    *tokens, last, usage = chunks
    assert len(tokens) == 8 and all(c["choices"][0]["finish_reason"] is None for c in tokens)
    assert all(c["usage"] is None for c in [*tokens, last])  # include_usage: null on every chunk but the last
    assert last["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 8,
                                                         "total_tokens": 12}
    # The first token arrived long before the last was generated: 7 tokens later, 60 ms each.
    assert events[7][0] - events[0][0] >= 0.3
    # The same text as the answer without streaming.
    whole = httpx.post(f"{url}/v1/completions", json={**body, "stream": False, "stream_options": None}).json()
    assert "".join(c["choices"][0]["text"] for c in tokens) == whole["choices"][0]["text"]
    # A chat stream: the role first, then the content's pieces, then the finish.
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=30, json={
            "model": "tiny-llama", "stream": True, "max_tokens": 3,
            "messages": [{"role": "user", "content": "Hi"}]}) as answer:
        lines = [line for line in answer.iter_lines() if line]
    deltas = [json.loads(line.removeprefix("data: "))["choices"][0] for line in lines[:-1]]
    assert deltas[0]["delta"] == {"role": "assistant", "content": ""}
    assert [d["finish_reason"] for d in deltas] == [None, None, None, None, "length"]
    assert "usage" not in json.loads(lines[0].removeprefix("data: "))  # without include_usage: no usage key


def test_health_answers_503_until_the_model_is_loaded(start_engine):
    url = start_engine(SLIPWAY_SIM_LOAD_SECONDS="2")
    assert httpx.get(f"{url}/health").status_code == 503
    assert httpx.get(f"{url}/health/ready").status_code == 503  # the pod's readiness path too
    assert httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": "x"}).status_code == 503
    wait_for(lambda: _answers(f"{url}/health/ready"), timeout=10, interval=0.05, what="the model to load")
    assert httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": "x"}).status_code == 200


def test_metrics_have_vllms_series_names(start_engine):
    url = start_engine(SLIPWAY_SIM_TOKEN_MS="1", SLIPWAY_SIM_LOAD_SECONDS="0")
    httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": "one two three", "max_tokens": 4})
    families = _families(url)
    assert {engine.RUNNING, engine.WAITING, engine.TTFT, engine.TPOT, engine.E2E} <= set(families)
    assert families[engine.TTFT].type == "histogram" and families[engine.RUNNING].type == "gauge"
    assert [s.labels for s in families[engine.RUNNING].samples] == [{"model_name": "tiny-llama"}]
    assert _value(url, "vllm:time_to_first_token_seconds_count") == 1
    assert _value(url, "vllm:prompt_tokens_total") == 3 and _value(url, "vllm:generation_tokens_total") == 4
    assert _value(url, "vllm:request_success_total") == 1


def test_the_error_rate_answers_that_share_with_500(start_engine):
    url = start_engine(SLIPWAY_SIM_ERROR_RATE="0.3", SLIPWAY_SIM_TOKEN_MS="0", SLIPWAY_SIM_TTFT_MS="0",
                       SLIPWAY_SIM_LOAD_SECONDS="0")
    count = 400
    with httpx.Client(timeout=10) as client:
        statuses = [client.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": "x", "max_tokens": 1})
                    .status_code for _ in range(count)]
    errors = statuses.count(500)
    assert set(statuses) == {200, 500}
    spread = 5 * math.sqrt(count * 0.3 * 0.7)  # five standard deviations of the binomial
    assert abs(errors - count * 0.3) <= spread, errors
    assert _value(url, "slipway_sim_request_errors_total") == errors


def test_requests_beyond_its_concurrency_wait(start_engine):
    url = start_engine(SLIPWAY_SIM_MAX_CONCURRENCY="2", SLIPWAY_SIM_TOKEN_MS="100", SLIPWAY_SIM_LOAD_SECONDS="0")
    results: list[int] = []

    def call() -> None:
        answer = httpx.post(f"{url}/v1/completions", json={"model": "tiny-llama", "prompt": "x", "max_tokens": 10},
                            timeout=60)
        results.append(answer.status_code)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    wait_for(lambda: _value(url, "vllm:num_requests_waiting") == 4, timeout=10, interval=0.02,
             what="four requests waiting")
    assert _value(url, "vllm:num_requests_running") == 2
    assert _value(url, "vllm:gpu_cache_usage_perc") == 1.0
    for thread in threads:
        thread.join(timeout=60)
    assert results == [200] * 6
    assert (_value(url, "vllm:num_requests_running"), _value(url, "vllm:num_requests_waiting")) == (0, 0)
    # The waiting shows in the time to first token: the last two waited for two rounds of ~1 s.
    assert _value(url, "vllm:time_to_first_token_seconds_sum") > 2 * 2 * 0.9


def test_the_knobs_are_read_within_bounds():
    knobs = engine.Knobs.from_env({"SLIPWAY_SIM_TOKEN_MS": "nan", "SLIPWAY_SIM_ERROR_RATE": "7",
                                   "SLIPWAY_SIM_MAX_CONCURRENCY": "0", "SLIPWAY_SIM_LOAD_SECONDS": "1m"})
    assert (knobs.token_ms, knobs.error_rate, knobs.concurrency, knobs.load_seconds) == (
        engine.DEFAULT_TOKEN_MS, 1.0, 1, 60.0)
    assert engine.served_model({}, ["--model", "/models/llama", "--served-model-name=chat"], "ep-1") == "chat"
    assert engine.served_model({}, ["--model=/models/llama"], "ep-1") == "/models/llama"
    assert engine.served_model({"SLIPWAY_SIM_MODEL": "m"}, ["--model", "x"], "ep-1") == "m"
    assert engine.served_model({}, [], "ep-1") == "ep-1"
