"""The sandbox's inference engine: a real OpenAI-compatible HTTP server, one per running endpoint replica.

A simulated cluster runs no container; for an endpoint's replica the sandbox's kubelet starts this
process instead (:mod:`sandbox.engines`), on 127.0.0.1, so that the replica answers real requests:

* ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (``stream: true`` too:
  Server-Sent Events in OpenAI's format, ``data: {...}`` chunks then ``data: [DONE]``;
  ``stream_options.include_usage`` adds the usage chunk), with OpenAI's ``usage``
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``);
* ``GET /health`` (and the pod's readiness path): 503 while the model loads, then 200;
* ``GET /metrics``: Prometheus text with vLLM's series names (:data:`SERIES`).

It is a simulator, deterministic where it can be: the text is drawn from a fixed word list with a
seed made of the model, the prompt and the request's ``seed``, one word a token; a prompt's tokens are
its words and punctuation marks (:func:`count_tokens`), and a chat's are its messages' plus
:data:`MESSAGE_TOKENS` a message and :data:`REPLY_TOKENS` for the reply's priming, as OpenAI counts
them. Time is real: the first token comes after the request's wait for a free slot and the prefill
(``SLIPWAY_SIM_TTFT_MS``), each next one ``SLIPWAY_SIM_TOKEN_MS`` later, so a stream's first token
reaches its client before the last is generated. At most ``SLIPWAY_SIM_MAX_CONCURRENCY`` requests
are generated at once (vLLM's ``max_num_seqs``); the others wait (``vllm:num_requests_waiting``).
``SLIPWAY_SIM_ERROR_RATE`` of the requests are answered 500 (drawn from a generator seeded by the
pod's name: reproducible per replica).

The knobs come from the pod's env, which is the endpoint's spec env: each revision of an endpoint
carries its own (docs/serving.md lists them). The process imports no Django; it stops when its
parent does (``--parent``), and on SIGTERM within a second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import signal
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sandbox.simulation import load_seconds, stable_int

#: The knobs this engine reads from its env, with their defaults (docs/serving.md).
TOKEN_MS_ENV, TTFT_MS_ENV, ERROR_RATE_ENV = "SLIPWAY_SIM_TOKEN_MS", "SLIPWAY_SIM_TTFT_MS", "SLIPWAY_SIM_ERROR_RATE"
CONCURRENCY_ENV, MAX_TOKENS_ENV, MAX_MODEL_LEN_ENV = ("SLIPWAY_SIM_MAX_CONCURRENCY", "SLIPWAY_SIM_MAX_TOKENS",
                                                     "SLIPWAY_SIM_MAX_MODEL_LEN")
MODEL_ENV = "SLIPWAY_SIM_MODEL"
DEFAULT_TOKEN_MS, DEFAULT_TTFT_MS, DEFAULT_CONCURRENCY = 20.0, 40.0, 8
DEFAULT_MAX_TOKENS, DEFAULT_MAX_MODEL_LEN = 64, 4096
#: Every env name the engine reads (beside ``SLIPWAY_SIM_LOAD_SECONDS``, which the kubelet reads too).
KNOBS = (TOKEN_MS_ENV, TTFT_MS_ENV, ERROR_RATE_ENV, CONCURRENCY_ENV, MAX_TOKENS_ENV, MAX_MODEL_LEN_ENV, MODEL_ENV)
#: Tokens a chat message adds beside its content (its role and delimiters), and the reply's priming.
MESSAGE_TOKENS, REPLY_TOKENS = 3, 3
#: The engine's Prometheus series (vLLM's names; the last one is the simulator's own).
RUNNING, WAITING, CACHE = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"
TTFT, TPOT, E2E = ("vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
                   "vllm:e2e_request_latency_seconds")
PROMPT_TOKENS, GENERATION_TOKENS, SUCCESS = "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success"
ERRORS, OCCUPANCY = "slipway_sim_request_errors", "slipway_sim_occupancy_seconds"
SERIES = (RUNNING, WAITING, CACHE, TTFT, TPOT, E2E, PROMPT_TOKENS, GENERATION_TOKENS, SUCCESS, ERRORS, OCCUPANCY)
#: Histogram buckets as vLLM's (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)

WORDS = (
    "the", "model", "answers", "with", "a", "plausible", "sentence", "about", "graphs", "tensors", "and", "queues",
    "while", "the", "cluster", "schedules", "every", "replica", "on", "its", "own", "gpu", "so", "that", "tokens",
    "arrive", "one", "after", "another", "in", "order", "and", "nothing", "here", "means", "much", "yet", "each",
    "word", "is", "counted", "honestly", "as", "a", "single", "token", "of", "the", "completion", "that", "a",
    "client", "streams", "back", "through", "the", "server",
)
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """A text's tokens as the engine counts them: its words and punctuation marks."""
    return len(_TOKEN.findall(text))


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    """A finite number within [low, high] from ``env[name]``; ``default`` when absent or not one."""
    try:
        value = float(env.get(name, ""))
    except ValueError:
        return default
    return min(max(value, low), high) if math.isfinite(value) else default


@dataclass(frozen=True)
class Knobs:
    """What the env of one revision says of its engine."""

    token_ms: float = DEFAULT_TOKEN_MS
    ttft_ms: float = DEFAULT_TTFT_MS
    error_rate: float = 0.0
    concurrency: int = DEFAULT_CONCURRENCY
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    load_seconds: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Knobs:
        return cls(token_ms=_number(env, TOKEN_MS_ENV, DEFAULT_TOKEN_MS, 0, 60_000),
                   ttft_ms=_number(env, TTFT_MS_ENV, DEFAULT_TTFT_MS, 0, 600_000),
                   error_rate=_number(env, ERROR_RATE_ENV, 0.0, 0, 1),
                   concurrency=int(_number(env, CONCURRENCY_ENV, DEFAULT_CONCURRENCY, 1, 4096)),
                   max_tokens=int(_number(env, MAX_TOKENS_ENV, DEFAULT_MAX_TOKENS, 1, 1_000_000)),
                   max_model_len=int(_number(env, MAX_MODEL_LEN_ENV, DEFAULT_MAX_MODEL_LEN, 16, 10_000_000)),
                   load_seconds=float(load_seconds(env)))


def served_model(env: Mapping[str, str], args: list[str], fallback: str) -> str:
    """The name the engine serves its model under: ``SLIPWAY_SIM_MODEL``, else the container's
    ``--served-model-name`` or ``--model`` argument (as vLLM takes them), else ``fallback``."""
    if env.get(MODEL_ENV, "").strip():
        return env[MODEL_ENV].strip()
    for option in ("--served-model-name", "--model"):
        for i, arg in enumerate(args):
            name, sep, value = arg.partition("=")
            if name == option:
                value = value if sep else (args[i + 1] if i + 1 < len(args) else "")
                if value.strip():
                    return value.strip()
    return fallback


def words(seed: int, count: int) -> list[str]:
    """The first ``count`` tokens of the text drawn for ``seed``."""
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(count)]


def natural_length(seed: int) -> int:
    """How many tokens the answer for ``seed`` has when ``max_tokens`` does not cut it (8 to 63)."""
    return 8 + seed % 56


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def error_response(status: int, message: str, kind: str, param: str | None = None,
                   code: str | None = None) -> web.Response:
    """OpenAI's error shape."""
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}},
                             status=status)


@dataclass(frozen=True)
class Request:
    """One validated completion request."""

    chat: bool
    prompt_tokens: int
    max_tokens: int
    seed: int
    stream: bool
    include_usage: bool
    stops: tuple[str, ...]


class Engine:
    """The engine's state: its knobs, slots, gauges and series."""

    def __init__(self, model: str, knobs: Knobs, name: str) -> None:
        self.model, self.knobs, self.name = model, knobs, name
        self.started = time.monotonic()
        self.created = int(time.time())
        self.slots = asyncio.Semaphore(knobs.concurrency)
        self.running = self.waiting = 0
        self.errors = random.Random(stable_int("errors", name))
        self.busy_since, self.occupied = time.monotonic(), 0.0
        registry = self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.series = {
            RUNNING: Gauge(RUNNING, "Requests being generated now.", labels, registry=registry),
            WAITING: Gauge(WAITING, "Requests waiting for a free slot.", labels, registry=registry),
            CACHE: Gauge(CACHE, "Fraction of the slots in use (the KV cache's stand-in).", labels, registry=registry),
            TTFT: Histogram(TTFT, "Seconds from arrival to the first token.", labels, buckets=TTFT_BUCKETS,
                            registry=registry),
            TPOT: Histogram(TPOT, "Seconds between two output tokens.", labels, buckets=TPOT_BUCKETS,
                            registry=registry),
            E2E: Histogram(E2E, "Seconds from arrival to the last token.", labels, buckets=E2E_BUCKETS,
                           registry=registry),
            PROMPT_TOKENS: Counter(PROMPT_TOKENS, "Prompt tokens processed.", labels, registry=registry),
            GENERATION_TOKENS: Counter(GENERATION_TOKENS, "Tokens generated.", labels, registry=registry),
            SUCCESS: Counter(SUCCESS, "Requests finished.", [*labels, "finished_reason"], registry=registry),
            ERRORS: Counter(ERRORS, "Requests answered with a simulated 5xx (SLIPWAY_SIM_ERROR_RATE).", labels,
                            registry=registry),
            OCCUPANCY: Counter(OCCUPANCY, "Integral of the busy fraction of the slots over time: its rate is "
                                          "the engine's load, which the sandbox's GPU utilization follows.", labels,
                               registry=registry),
        }
        self._gauges()

    def loaded(self) -> bool:
        return time.monotonic() - self.started >= self.knobs.load_seconds

    def _gauges(self) -> None:
        """Account the time spent at the old occupancy, then publish the gauges of now."""
        now = time.monotonic()
        self.series[OCCUPANCY].labels(self.model).inc((now - self.busy_since) * self.occupied)
        self.busy_since = now
        self.occupied = self.running / self.knobs.concurrency
        self.series[RUNNING].labels(self.model).set(self.running)
        self.series[WAITING].labels(self.model).set(self.waiting)
        self.series[CACHE].labels(self.model).set(self.occupied)

    def metrics(self) -> bytes:
        self._gauges()  # the occupancy integral up to now
        return generate_latest(self.registry)

    @contextlib.asynccontextmanager
    async def slot(self):
        """A generation slot: waiting (``num_requests_waiting``) until one is free, running while held."""
        self.waiting += 1
        self._gauges()
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        self._gauges()
        try:
            yield
        finally:
            self.running -= 1
            self.slots.release()
            self._gauges()

    def parse(self, body: object, chat: bool) -> Request:
        """The request's fields, checked as OpenAI's API checks them (a :class:`BadRequest` names the field)."""
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object.")
        if body.get("model") != self.model:
            raise BadRequest(f"The model `{body.get('model')}` does not exist.", "model", 404, "model_not_found")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
                raise BadRequest("'messages' must be a non-empty list of {role, content} objects.", "messages")
            prompt = sum(MESSAGE_TOKENS + count_tokens(_content(m.get("content"))) for m in messages) + REPLY_TOKENS
            text = json.dumps(messages, sort_keys=True)
        else:
            raw = body.get("prompt")
            if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
                raw = raw[0]
            if not isinstance(raw, str):
                raise BadRequest("'prompt' must be a string (one prompt a request here).", "prompt")
            prompt, text = max(count_tokens(raw), 1), raw
        field = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        limit = body.get(field)
        if limit is None:
            limit = min(self.knobs.max_tokens, self.knobs.max_model_len - prompt)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise BadRequest(f"'{field}' must be a positive integer.", field)
        if prompt + limit > self.knobs.max_model_len:
            raise BadRequest(f"This model's maximum context length is {self.knobs.max_model_len} tokens. However, you "
                             f"requested {prompt + limit} tokens ({prompt} in the messages, {limit} in the "
                             "completion). Please reduce the length of the messages or completion.", field)
        if body.get("n", 1) != 1:
            raise BadRequest("Only n=1 is served by the sandbox's engine.", "n")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise BadRequest("'seed' must be an integer.", "seed")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("'stream' must be a boolean.", "stream")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise BadRequest("'stream_options' must be an object.", "stream_options")
        if options and not stream:
            raise BadRequest("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        stop = body.get("stop")
        stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) \
            else None
        if stops is None or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
            raise BadRequest("'stop' must be a string or a list of up to 4 strings.", "stop")
        return Request(chat=chat, prompt_tokens=prompt, max_tokens=limit,
                       seed=stable_int(self.model, text, seed if seed is not None else ""), stream=stream,
                       include_usage=bool(options.get("include_usage")), stops=stops)

    async def generate(self, request: Request, arrived: float):
        """The answer's pieces as they are generated, then ``(None, finish_reason)``: waits for a slot,
        the prefill, and each token's time. Records the request's series on the way."""
        model, knobs = self.model, self.knobs
        async with self.slot():
            planned = min(natural_length(request.seed), request.max_tokens)
            reason = "stop" if planned < request.max_tokens else "length"
            start = time.monotonic()
            text, emitted, last = "", 0, start
            for i, word in enumerate(words(request.seed, planned)):
                due = start + (knobs.ttft_ms + i * knobs.token_ms) / 1000
                await asyncio.sleep(max(due - time.monotonic(), 0))
                piece = word if i == 0 else f" {word}"
                cut = _stop_at(text + piece, request.stops)
                if cut is not None:
                    piece, reason = cut[len(text):], "stop"
                    if not piece.strip():
                        break  # the stop string begins with this token: nothing of it is sent
                now = time.monotonic()
                if i == 0:
                    self.series[TTFT].labels(model).observe(now - arrived)
                else:
                    self.series[TPOT].labels(model).observe(now - last)
                last, emitted = now, emitted + 1
                text += piece
                yield piece, None
                if cut is not None:
                    break
        self.series[E2E].labels(model).observe(time.monotonic() - arrived)
        self.series[PROMPT_TOKENS].labels(model).inc(request.prompt_tokens)
        self.series[GENERATION_TOKENS].labels(model).inc(emitted)
        self.series[SUCCESS].labels(model, reason).inc()
        yield None, (reason, emitted)


def _content(content: object) -> str:
    """A chat message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _stop_at(text: str, stops: tuple[str, ...]) -> str | None:
    """``text`` up to the first stop string in it, None when there is none."""
    found = [text.index(stop) for stop in stops if stop in text]
    return text[:min(found)] if found else None


def usage(request: Request, completion: int) -> dict:
    return {"prompt_tokens": request.prompt_tokens, "completion_tokens": completion,
            "total_tokens": request.prompt_tokens + completion}


def _chunk(engine: Engine, request: Request, ident: str, piece: str | None, reason: str | None,
           first: bool = False) -> dict:
    if request.chat:
        delta = {"role": "assistant", "content": ""} if first else ({"content": piece} if piece is not None else {})
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": reason}
        kind = "text_completion"
    chunk = {"id": ident, "object": kind, "created": int(time.time()), "model": engine.model, "choices": [choice]}
    if request.include_usage:
        chunk["usage"] = None  # as OpenAI: every chunk but the last carries a null usage
    return chunk


async def _completion(http: web.Request, chat: bool) -> web.StreamResponse:
    engine: Engine = http.app["engine"]
    arrived = time.monotonic()
    if not engine.loaded():
        return error_response(503, "The model is still loading.", "service_unavailable")
    try:
        request = engine.parse(await http.json(), chat)
    except json.JSONDecodeError:
        return error_response(400, "The body is not valid JSON.", "invalid_request_error")
    except BadRequest as exc:
        return error_response(exc.status, str(exc), "invalid_request_error", exc.param, exc.code)
    if engine.knobs.error_rate and engine.errors.random() < engine.knobs.error_rate:
        engine.series[ERRORS].labels(engine.model).inc()
        return error_response(500, f"Simulated engine error ({ERROR_RATE_ENV}={engine.knobs.error_rate:g}).",
                              "server_error")
    ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    if request.stream:
        return await _stream(http, engine, request, ident)
    text = ""
    async for piece, end in engine.generate(request, arrived):
        if piece is not None:
            text += piece
        else:
            reason, completion = end
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
               "finish_reason": reason} if chat
              else {"index": 0, "text": text, "logprobs": None, "finish_reason": reason})
    return web.json_response({"id": ident, "object": "chat.completion" if chat else "text_completion",
                              "created": int(time.time()), "model": engine.model, "choices": [choice],
                              "usage": usage(request, completion)})


async def _stream(http: web.Request, engine: Engine, request: Request, ident: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(http)

    async def send(payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        await response.write(f"data: {data}\n\n".encode())

    if request.chat:
        await send(_chunk(engine, request, ident, None, None, first=True))
    async for piece, end in engine.generate(request, time.monotonic()):
        if piece is not None:
            await send(_chunk(engine, request, ident, piece, None))
            continue
        reason, completion = end
        await send(_chunk(engine, request, ident, None if request.chat else "", reason))
        if request.include_usage:
            await send({"id": ident, "object": "chat.completion.chunk" if request.chat else "text_completion",
                        "created": int(time.time()), "model": engine.model, "choices": [],
                        "usage": usage(request, completion)})
    await send("[DONE]")
    await response.write_eof()
    return response


async def completions(http: web.Request) -> web.StreamResponse:
    return await _completion(http, chat=False)


async def chat_completions(http: web.Request) -> web.StreamResponse:
    return await _completion(http, chat=True)


async def models(http: web.Request) -> web.Response:
    engine: Engine = http.app["engine"]
    if not engine.loaded():
        return error_response(503, "The model is still loading.", "service_unavailable")
    return web.json_response({"object": "list", "data": [
        {"id": engine.model, "object": "model", "created": engine.created, "owned_by": "slipway-sandbox",
         "root": engine.model, "max_model_len": engine.knobs.max_model_len}]})


async def health(http: web.Request) -> web.Response:
    """200 once the model is loaded (``SLIPWAY_SIM_LOAD_SECONDS`` after the start), 503 before."""
    return web.Response(status=200 if http.app["engine"].loaded() else 503)


async def metrics(http: web.Request) -> web.Response:
    return web.Response(body=http.app["engine"].metrics(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def app(engine: Engine, readiness_path: str = "/health") -> web.Application:
    application = web.Application()
    application["engine"] = engine
    application.router.add_get("/health", health)
    if readiness_path and readiness_path != "/health":
        application.router.add_get(readiness_path, health)
    application.router.add_get("/metrics", metrics)
    application.router.add_get("/v1/models", models)
    application.router.add_post("/v1/completions", completions)
    application.router.add_post("/v1/chat/completions", chat_completions)
    return application


async def _watch_parent(parent: int) -> None:
    """Stop once the process that started the engine is gone (it was reparented)."""
    while os.getppid() == parent:
        await asyncio.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True, help="the model name it serves")
    parser.add_argument("--name", default="", help="the pod it stands for (seeds its error draws)")
    parser.add_argument("--readiness-path", default="/health")
    parser.add_argument("--parent", type=int, default=0, help="stop when this process is no longer the parent")
    args = parser.parse_args(argv)
    application = app(Engine(args.model, Knobs.from_env(os.environ), args.name or args.model), args.readiness_path)
    if args.parent:
        async def watch(application: web.Application):
            task = asyncio.create_task(_watch_parent(args.parent))
            yield
            task.cancel()
        application.cleanup_ctx.append(watch)
    web.run_app(application, host="127.0.0.1", port=args.port, access_log=None, print=None, shutdown_timeout=1.0)


if __name__ == "__main__":
    main()
