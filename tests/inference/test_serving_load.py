"""``manage.py serving_load`` (inference/load.py) as a real process against a real engine (sandbox/engine.py).

The gateway is helper code of its own (``manage.py gateway``); here a recording hop stands in for it: it
takes ``/{team}/{endpoint}/{path}`` as the gateway does, writes down each request's key header and body,
and passes the request to the engine and its answer back chunk by chunk (streams as they come).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from core import processes
from inference.load import Counts, LoadGenerator, arrival_times
from sandbox.engines import MARKER
from tests.e2e.conftest import wait_for
from tests.sandbox.test_engine import _answers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KEY = "sw-" + "k" * 43


@pytest.fixture
def engine():
    """A real engine serving tiny-llama, quick tokens, no load delay, no errors."""
    port = processes.free_port()
    pid = processes.start([sys.executable, "-m", "sandbox.engine", "--port", str(port), "--model", "tiny-llama",
                           "--name", f"pod-{port}"],
                          env=processes.minimal_env({"SLIPWAY_SIM_TOKEN_MS": "5", "SLIPWAY_SIM_LOAD_SECONDS": "0"}),
                          cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{url}/metrics"), timeout=30, interval=0.05, what="the engine to listen")
    yield url
    processes.stop(pid, MARKER)
    wait_for(lambda: not processes.alive(pid, MARKER), timeout=10, interval=0.05, what="the engine to stop")
    processes.reap()


class Hop:
    """The gateway's stand-in: ``/{team}/{endpoint}/{path}`` → the engine's ``/{path}``, recording each request."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.seen, self.port = upstream, [], processes.free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append({"team": request.match_info["team"], "endpoint": request.match_info["endpoint"],
                          "path": request.match_info["path"], "auth": request.headers.get("Authorization"),
                          "body": json.loads(body) if body else None})
        async with self.session.request(request.method, f"{self.upstream}/{request.match_info['path']}", data=body,
                                        headers={"Content-Type": "application/json"}) as answer:
            response = web.StreamResponse(status=answer.status, headers={"Content-Type": answer.content_type})
            try:
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # the load generator stopped mid-answer: what it is asked to do
                pass
            return response

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{team}/{endpoint}/{path:.*}", self._forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        await self.runner.cleanup()
        await self.session.close()

    def __enter__(self) -> Hop:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _last_counts(log: Path) -> dict[str, int]:
    """The figures of the last report line: sent, streamed, each status class."""
    lines = [line for line in log.read_text().splitlines() if "sent " in line]
    if not lines:
        return {}
    line = lines[-1]
    found = {name: int(value) for name, value in re.findall(r"(\dxx|error)=(\d+)", line)}
    sent, streamed = re.search(r"sent (\d+) \((\d+) streamed\)", line).groups()
    tokens_out = re.search(r"out (\d+)", line).group(1)
    return {**found, "sent": int(sent), "streamed": int(streamed), "tokens_out": int(tokens_out)}


def test_it_sends_keyed_mixed_traffic_and_stops_on_sigterm_within_a_second(engine, tmp_path):
    with Hop(engine) as hop:
        log = tmp_path / "load.log"
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "serving_load", "--gateway", f"http://127.0.0.1:{hop.port}/",
                 "--key", KEY, "--endpoint", "ml-research/chat", "--rate", "40", "--stream-share", "0.5",
                 "--report-every", "0.5"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            counts = wait_for(lambda: (c := _last_counts(log)) and c.get("2xx", 0) >= 30 and c["streamed"] >= 5 and c,
                              timeout=60, interval=0.1, what=f"answered requests in {log}")
            assert process.poll() is None, log.read_text()
        finally:
            sent_at = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=10)
        stopped_in = time.monotonic() - sent_at
    output = log.read_text()
    assert code == 0 and stopped_in < 2, (stopped_in, output)
    assert "stopped after" in output.splitlines()[-1] and "Traceback" not in output
    assert counts.get("5xx", 0) == counts.get("error", 0) == 0 and counts["tokens_out"] > 0
    # Every request through the gateway's path for the endpoint, with the key; the model learnt from /v1/models.
    assert {(s["team"], s["endpoint"]) for s in hop.seen} == {("ml-research", "chat")}
    assert {s["auth"] for s in hop.seen} == {f"Bearer {KEY}"}
    assert hop.seen[0]["path"] == "v1/models"
    chats = [s["body"] for s in hop.seen if s["path"] == "v1/chat/completions"]
    assert {body["model"] for body in chats} == {"tiny-llama"}
    streamed = [body for body in chats if body.get("stream")]
    assert 0 < len(streamed) < len(chats)  # a mix, about half and half
    assert all(body["stream_options"] == {"include_usage": True} for body in streamed)


def test_its_schedule_is_poisson_at_the_rate_asked():
    """The instants the generator sends at: over 400 s at 50 a second the count is within Poisson's bounds
    (mean 20,000, sd ~141) and the gaps' coefficient of variation is 1 (exponential), for any seed. A
    constant-rate sender would have a CV near 0; the sends' measured times are not checked for this, since a
    loaded machine's event loop bunches them (it sends late ones at once, which keeps the count)."""
    for seed in (1, 7, 2026):
        times = list(itertools.takewhile(lambda t: t < 1000.0 + 400, arrival_times(1000.0, 50, random.Random(seed))))
        assert 20_000 - 4 * 141 <= len(times) <= 20_000 + 4 * 141
        gaps = [b - a for a, b in itertools.pairwise([1000.0, *times])]
        mean = sum(gaps) / len(gaps)
        cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
        assert abs(mean - 1 / 50) < 0.001 and 0.95 < cv < 1.05, (mean, cv)


def test_it_sends_at_the_rate_asked_and_streams_the_share_asked(engine):
    """In-process, 4 s at 50 a second against a real engine: the count is within Poisson's bounds (mean 200,
    sd ~14) however slow the machine (late arrivals go at once), the stream share near the one asked, and
    every request is answered or was still open at the stop."""
    with Hop(engine) as hop:
        generator = LoadGenerator(f"http://127.0.0.1:{hop.port}/ml-research/chat", KEY, rate=50, stream_share=0.25,
                                  model="tiny-llama", report_every=10, log=lambda line: None)
        counts: Counts = asyncio.run(generator.run(asyncio.Event(), duration=4))
    assert 200 - 4 * 14 <= counts.sent <= 200 + 4 * 14
    assert 0.12 < counts.streamed / counts.sent < 0.4
    # Nothing lost or failed: what was not answered was still open at the stop (how many depends on the
    # machine's pace, so only the sum is exact), and most were answered.
    assert counts.classes["2xx"] == counts.answered and counts.answered + counts.cancelled == counts.sent
    assert counts.answered >= counts.sent // 2


def test_a_wrong_key_is_counted_by_status_class_and_bad_options_are_refused():
    async def refusing(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "Invalid key"}}, status=401)

    async def scenario() -> Counts:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", refusing)
        runner = web.AppRunner(app)
        await runner.setup()
        port = processes.free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            generator = LoadGenerator(f"http://127.0.0.1:{port}/t/e", "sw-wrong", rate=100, stream_share=0.5,
                                      model="m", log=lambda line: None)
            return await generator.run(asyncio.Event(), duration=0.5)
        finally:
            await runner.cleanup()

    counts = asyncio.run(scenario())
    assert counts.sent > 10 and counts.classes == {"4xx": counts.answered}
    bad = subprocess.run([sys.executable, "manage.py", "serving_load", "--key", KEY, "--endpoint", "chat"], cwd=ROOT,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "--endpoint is TEAM/NAME" in bad.stderr
    with pytest.raises(ValueError):
        LoadGenerator("http://x/t/e", KEY, rate=0, stream_share=0.5)
