"""A small load generator for an endpoint behind the gateway: the demo's live traffic (``manage.py serving_load``).

Open loop: requests arrive as a Poisson process of ``rate`` a second (exponential gaps), whatever the
answers take, as independent callers would; a share of them (``stream_share``) are streamed chat
completions (``"stream": true``, with the usage chunk), the others plain ones. Every request carries
``Authorization: Bearer <key>``. It counts what it sent and what came back by status class (``2xx``,
``4xx``, ``5xx``…; ``error`` for a connection that failed or a stream that ended without ``[DONE]``) and
the tokens the answers' ``usage`` reported, and reports a line every ``report_every`` seconds (a minute
by default) and once at the end.

At most ``max_in_flight`` requests are open at once: when the endpoint stalls (an endpoint waking from
zero holds requests for minutes), arrivals beyond it are counted as ``skipped`` instead of piling up
without bound. Stopping (SIGTERM, SIGINT, or ``duration`` elapsed) cancels the open requests at once
(counted as ``cancelled``, so sent = answered + cancelled): the process ends within a second, not after
the slowest stream.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import aiohttp

#: What the simulated callers ask (varied, so prompts differ in length and the engine's answers too).
PROMPTS = (
    "Say hello in five words.",
    "Summarise the plot of Hamlet in one sentence.",
    "Write a haiku about GPUs waiting in a queue.",
    "What is the capital of Australia?",
    "Explain what a canary release is to a new engineer.",
    "List three uses of a load balancer.",
    "Translate 'good morning' into French and German.",
    "Give me a name for a friendly robot.",
)
#: Seconds between two attempts to learn the served model when it is not given.
MODEL_RETRY_SECONDS = 5.0


@dataclass
class Counts:
    """What was sent and answered so far."""

    sent: int = 0
    streamed: int = 0
    skipped: int = 0
    cancelled: int = 0  # still open when the generator stopped (cut off, never answered)
    classes: Counter = field(default_factory=Counter)  # "2xx", "4xx", "5xx", "error"
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def answered(self) -> int:
        return sum(self.classes.values())

    def line(self, elapsed: float) -> str:
        by_class = " ".join(f"{name}={self.classes[name]}" for name in sorted(self.classes)) or "none yet"
        return (f"{elapsed:.0f}s: sent {self.sent} ({self.streamed} streamed), answered {self.answered}: {by_class}; "
                f"tokens in {self.prompt_tokens} out {self.completion_tokens}; skipped {self.skipped}"
                + (f", cancelled at stop {self.cancelled}" if self.cancelled else ""))


def status_class(status: int) -> str:
    return f"{status // 100}xx"


class LoadGenerator:
    """Sends the load to ``base_url`` (an endpoint's external URL: the gateway's, team and name)."""

    def __init__(self, base_url: str, key: str, *, rate: float, stream_share: float, model: str = "",
                 max_in_flight: int = 200, report_every: float = 60.0, log: Callable[[str], None] = print,
                 rng: random.Random | None = None) -> None:
        if rate <= 0 or not 0 <= stream_share <= 1 or max_in_flight < 1 or report_every <= 0:
            raise ValueError("rate and report_every must be positive, stream_share within 0..1, max_in_flight ≥ 1")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {key}"}
        self.rate, self.stream_share, self.model = rate, stream_share, model
        self.max_in_flight, self.report_every, self.log = max_in_flight, report_every, log
        self.rng = rng or random.Random()
        self.counts = Counts()
        self.in_flight: set[asyncio.Task] = set()

    async def run(self, stop: asyncio.Event, duration: float = 0) -> Counts:
        """Send until ``stop`` is set (or ``duration`` seconds passed, if given); the counts."""
        began = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
        async with aiohttp.ClientSession(timeout=timeout, headers=self.headers,
                                         connector=aiohttp.TCPConnector(limit=self.max_in_flight)) as session:
            reporter = asyncio.create_task(self._report(stop, began))
            try:
                await self._arrivals(session, stop, began, duration)
            finally:
                reporter.cancel()
                for task in list(self.in_flight):
                    task.cancel()
                await asyncio.gather(*self.in_flight, reporter, return_exceptions=True)
        self.log(f"stopped after {self.counts.line(time.monotonic() - began)}")
        return self.counts

    async def _arrivals(self, session: aiohttp.ClientSession, stop: asyncio.Event, began: float,
                        duration: float) -> None:
        while not self.model:
            self.model = await self._served_model(session)
            if self.model:
                self.log(f"sending to {self.base_url}, model {self.model}, {self.rate:g} requests/s, "
                         f"{self.stream_share:.0%} streamed")
            elif await _wait(stop, MODEL_RETRY_SECONDS):
                return
        # Open loop: each arrival is due at an absolute time (the schedule's), so a slow event loop sends late
        # ones at once and the rate stays the one asked, never the loop's pace.
        for due in arrival_times(time.monotonic(), self.rate, self.rng):
            if duration and due >= began + duration:
                await _wait(stop, max(0.0, began + duration - time.monotonic()))
                return
            if await _wait(stop, max(0.0, due - time.monotonic())):
                return
            if len(self.in_flight) >= self.max_in_flight:
                self.counts.skipped += 1
                continue
            task = asyncio.create_task(self._one(session, self.rng.random() < self.stream_share))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def _served_model(self, session: aiohttp.ClientSession) -> str:
        """The first model ``/v1/models`` lists ("" when it does not answer yet: the endpoint may be waking)."""
        try:
            async with session.get(f"{self.base_url}/v1/models") as response:
                if response.status == 200:
                    models = (await response.json()).get("data") or []
                    return str(models[0]["id"]) if models else ""
                self.log(f"/v1/models answered {response.status}: retrying in {MODEL_RETRY_SECONDS:g}s")
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as exc:
            self.log(f"/v1/models failed ({exc.__class__.__name__}): retrying in {MODEL_RETRY_SECONDS:g}s")
        return ""

    async def _one(self, session: aiohttp.ClientSession, stream: bool) -> None:
        body: dict = {"model": self.model, "messages": [{"role": "user", "content": self.rng.choice(PROMPTS)}],
                      "max_tokens": self.rng.randint(8, 64)}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
            self.counts.streamed += 1
        self.counts.sent += 1
        outcome = ""
        try:
            async with session.post(f"{self.base_url}/v1/chat/completions", json=body) as response:
                if response.status != 200:
                    await response.read()
                    outcome = status_class(response.status)
                elif stream:
                    outcome = "2xx" if await self._read_stream(response) else "error"
                else:
                    self._add_usage((await response.json()).get("usage"))
                    outcome = "2xx"
                self.counts.classes[outcome] += 1
        except (TimeoutError, aiohttp.ClientError, ValueError):
            self.counts.classes["error"] += 1
        except asyncio.CancelledError:
            if not outcome:  # cut off by the stop before its answer was counted
                self.counts.cancelled += 1
            raise

    async def _read_stream(self, response: aiohttp.ClientResponse) -> bool:
        """Read the Server-Sent Events to ``[DONE]`` (False: the stream ended before it, or said error)."""
        async for raw in response.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return True
            chunk = json.loads(data)
            if "error" in chunk:
                return False
            self._add_usage(chunk.get("usage"))
        return False

    def _add_usage(self, usage: dict | None) -> None:
        if usage:
            self.counts.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.counts.completion_tokens += int(usage.get("completion_tokens") or 0)

    async def _report(self, stop: asyncio.Event, began: float) -> None:
        while not await _wait(stop, self.report_every):
            self.log(self.counts.line(time.monotonic() - began))


def arrival_times(start: float, rate: float, rng: random.Random) -> Iterator[float]:
    """The instants a Poisson process of ``rate`` a second, begun at ``start``, arrives at (endless).

    Each is the last plus an exponential gap of mean ``1 / rate``. The generator sends at these instants
    (late ones at once), so this schedule, not the sends' measured times (which a loaded machine's event
    loop bunches), is what follows Poisson's law.
    """
    due = start
    while True:
        due += rng.expovariate(rate)
        yield due


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop`` is set; whether it was set."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
