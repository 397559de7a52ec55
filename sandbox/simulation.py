"""The simulated workloads themselves: how long they run, how they end, what they print.

Everything is a deterministic function of the workload's spec, its name and elapsed time
(no randomness), so tests are reproducible and every process computes the same story.

Knobs read from the first container's env (passed through unchanged by the builders):

* ``SLIPWAY_SIM_DURATION`` — ``90s``, ``5m``, ``1h``, ``1h30m`` or plain seconds. Default: 1-3
  minutes derived from a hash of the workload name. For Deployments it is the time until the
  container crashes (crash outcomes only; a healthy server runs forever).
* ``SLIPWAY_SIM_OUTCOME`` — ``succeed`` (default), ``fail``, ``oom``, ``image-pull``, ``crashloop``.
* ``SLIPWAY_SIM_GPU_UTIL`` — fixed GPU utilisation in percent (e.g. ``3`` to demo idle detection),
  whatever the phase. Without it a run's utilisation follows its phases (:func:`phase`: load,
  train with evaluations, idle), which its GPUs' simulated temperature and power follow too.
* ``SLIPWAY_SIM_IDLE_AFTER`` — runs: ``20m`` style; the run goes idle that long after it started
  (its GPUs held, next to unused) until it ends: a run stuck after its training loop.
* ``SLIPWAY_SIM_GPU_MEMORY_LEAK`` — GiB a minute by which the pod's GPU memory grows (a leak): it
  fills the GPU's memory and holds it full, as the simulated exporter reports it.
* ``SLIPWAY_SIM_GPU_MEMORY_GB`` — the GPU memory (GiB) the pod allocates as it starts. Default
  :data:`DEFAULT_GPU_MEMORY_GB`, a small model's. It matters on a shared GPU only
  (:mod:`sandbox.sharing`): time-sliced pods' memory adds up on their GPU, and the pod that
  grows past what is left is OOMKilled; an MPS client is limited to its share.
* ``SLIPWAY_SIM_FAILED_ATTEMPTS`` — Jobs: only the first N attempts end with a failing outcome
  (``fail``, ``oom``); the attempts after them succeed, so a run that retries and recovers can
  be shown (with ``max_retries`` ≥ N). Default: every attempt ends the same way.
* ``SLIPWAY_SIM_LOG_EVERY`` — seconds between training lines (fractions allowed): Katib-style metric
  lines and ``SLIPWAY_PROGRESS``, see :mod:`sandbox.training_metrics`.
* ``SLIPWAY_SIM_SCHEDULE_SECONDS``, ``SLIPWAY_SIM_PULL_SECONDS``, ``SLIPWAY_SIM_START_SECONDS`` — a pod's
  start, stage by stage (:func:`start_delays`): how long after its creation the scheduler binds it (default
  0: at once, when a node has room), how long its image's pull takes once bound (default 9), and from the
  pull to its container running (default 1). With ``SLIPWAY_SIM_LOAD_SECONDS`` (a server's model load)
  they script an endpoint replica's cold start (docs/serving.md "Cold starts").
* ``SLIPWAY_SIM_CHECKPOINT_EVERY``, ``SLIPWAY_SIM_HONOUR_NOTICE`` (with the contract's
  ``SLIPWAY_CHECKPOINT_DIR`` and ``SLIPWAY_RESUME_FROM``) — runs: simulated checkpoints, resuming
  and preemption notices, see :mod:`sandbox.checkpoints`.
* ``SLIPWAY_SIM_OPTIMUM`` (``LR=3e-4,BATCH=64,OPTIM=adamw``: each parameter's env var and its optimum),
  ``SLIPWAY_SIM_CURVE_SEED`` (an integer, default 0) — runs: a sweep trial's learning curve, whose final
  loss depends on its parameters (the env vars the knob names), see :mod:`sandbox.curves`. Without it a
  run's loss follows the usual curve.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.text import whole_number
from sandbox import checkpoints, curves, training_metrics
from sandbox.sharing import Pace

OUTCOMES = ("succeed", "fail", "oom", "image-pull", "crashloop")
#: Seconds between binding and the container starting (image pull + create), by default:
#: :data:`DEFAULT_PULL_SECONDS` of pull, then :data:`DEFAULT_START_SECONDS` to create and start it.
PULL_SECONDS = 10
DEFAULT_PULL_SECONDS = 9
DEFAULT_START_SECONDS = PULL_SECONDS - DEFAULT_PULL_SECONDS
#: The most any start delay knob may say (an hour): a typo of a unit must not park a pod for days.
MAX_START_DELAY_SECONDS = 3600
#: Kubelet's crash-loop back-off: 10s doubling up to 5 minutes.
BACKOFF_START, BACKOFF_CAP = 10, 300
#: Time a crashing server runs before it dies, when the spec does not say.
DEFAULT_CRASH_SECONDS = 15
#: Exit code and termination reason per failing outcome.
TERMINATION = {"fail": ("Error", 1), "crashloop": ("Error", 1), "oom": ("OOMKilled", 137), "succeed": ("Completed", 0)}

#: The longest a duration knob may say (ten years): the clock adds it to a time, which more would overflow.
MAX_SIM_SECONDS = 10 * 365 * 24 * 3600
#: ASCII digits only: ``\d`` also takes other scripts' digits.
_DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")


#: How long a server takes to load its model before it answers its readiness probe.
DEFAULT_MODEL_LOAD_SECONDS = 20
#: GPU memory (GiB) a pod allocates when its env does not say (SLIPWAY_SIM_GPU_MEMORY_GB): a small
#: model's, so four fit on a time-sliced 15 GiB T4 and one in an MPS client's share of an A10G.
DEFAULT_GPU_MEMORY_GB = 2.0


@dataclass(frozen=True)
class SimSettings:
    duration: int
    outcome: str
    utilization: float | None
    load_seconds: int = 0  # servers: model load time before readiness
    failed_attempts: int | None = None  # Jobs: attempts that fail before one succeeds (None: all)
    checkpoint: dict | None = None  # runs: checkpoint settings (sandbox.checkpoints.plan_settings)
    honour_notice: bool = False  # runs: checkpoint and exit at a preemption notice
    gpu_memory_gb: float = DEFAULT_GPU_MEMORY_GB  # GPU memory allocated as it starts (GiB)
    idle_after: int | None = None  # runs: seconds after its start it goes idle (None: never)
    memory_leak_gb: float | None = None  # GiB a minute its GPU memory grows by (None: no leak)
    curve: dict[str, str] | None = None  # runs: the env its learning curve reads (sandbox.curves; None: the usual)


def stable_int(*parts: object) -> int:
    """A stable non-negative integer from ``parts`` (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha1("/".join(map(str, parts)).encode()).digest()[:8], "big")  # noqa: S324


def parse_duration(value: str) -> int | None:
    """Seconds in ``90s`` / ``5m`` / ``1h`` / ``1h30m`` / ``120``, at most :data:`MAX_SIM_SECONDS`; None when
    unparsable."""
    # Digits are read without int() on a number thousands of digits long (a ValueError of Python's) and the
    # whole is held to MAX_SIM_SECONDS: a run's env is its owner's to write, and "²", "9" * 5000 or
    # "99999999999999h" made the cluster's apply raise.
    value = value.strip().lower()
    plain = whole_number(value, longer=MAX_SIM_SECONDS)
    if plain is not None:
        return min(plain, MAX_SIM_SECONDS)
    match = _DURATION.match(value)
    if not value or not match:
        return None
    hours, minutes, seconds = (whole_number(part or "0", longer=MAX_SIM_SECONDS) for part in match.groups())
    return min(hours * 3600 + minutes * 60 + seconds, MAX_SIM_SECONDS)


def default_duration(workload: str) -> int:
    """1-3 minutes, fixed per workload name: lively demos, reproducible tests."""
    return 60 + stable_int(workload) % 121


def sim_settings(env: dict[str, str], *, workload: str, kind: str) -> SimSettings:
    outcome = env.get("SLIPWAY_SIM_OUTCOME", "succeed").strip().lower() or "succeed"
    if outcome not in OUTCOMES:
        outcome = "succeed"
    duration = parse_duration(env.get("SLIPWAY_SIM_DURATION", "")) if env.get("SLIPWAY_SIM_DURATION") else None
    if duration is None:
        duration = DEFAULT_CRASH_SECONDS if kind == "Deployment" else default_duration(workload)
    # A finite number (NaN is no JSON the plan's column could hold on PostgreSQL); gpu_utilization() clamps it.
    utilization = _finite_float(env.get("SLIPWAY_SIM_GPU_UTIL", ""))
    gpu_memory_gb = _positive_float(env.get("SLIPWAY_SIM_GPU_MEMORY_GB", ""))
    raw_idle = env.get("SLIPWAY_SIM_IDLE_AFTER", "")
    idle_after = parse_duration(raw_idle) if raw_idle and kind != "Deployment" else None
    loading = load_seconds(env) if kind == "Deployment" else 0
    raw = env.get("SLIPWAY_SIM_FAILED_ATTEMPTS", "").strip()
    failed_attempts = whole_number(raw, 9, longer=MAX_FAILED_ATTEMPTS)
    checkpoint = None
    if kind != "Deployment":
        raw = env.get("SLIPWAY_SIM_CHECKPOINT_EVERY", "")
        checkpoint = checkpoints.plan_settings(env, parse_duration(raw) if raw else None)
        duration = checkpoints.shortened(duration, checkpoint)  # a resumed run has less left to do
    return SimSettings(duration=max(duration, 1), outcome=outcome, utilization=utilization,
                       load_seconds=loading, failed_attempts=failed_attempts, checkpoint=checkpoint,
                       honour_notice=kind != "Deployment" and checkpoints.honours_notice(env),
                       gpu_memory_gb=DEFAULT_GPU_MEMORY_GB if gpu_memory_gb is None else gpu_memory_gb,
                       idle_after=idle_after, memory_leak_gb=_positive_float(env.get("SLIPWAY_SIM_GPU_MEMORY_LEAK", "")),
                       curve=curves.knob_env(env) if kind != "Deployment" else None)


def load_seconds(env: dict[str, str]) -> int:
    """How long a server loads its model before it answers its readiness probe: ``SLIPWAY_SIM_LOAD_SECONDS``
    (``30s`` style), :data:`DEFAULT_MODEL_LOAD_SECONDS` when absent or unparsable. The kubelet's readiness
    delay and the engine's ``/health`` (:mod:`sandbox.engine`) both read it here."""
    raw = env.get("SLIPWAY_SIM_LOAD_SECONDS", "")
    parsed = parse_duration(raw) if raw else None
    return DEFAULT_MODEL_LOAD_SECONDS if parsed is None else parsed


def start_delays(env: dict[str, str]) -> tuple[int, int, int]:
    """A pod's scripted start (``30s`` style, or seconds): the scheduler's delay before it binds the pod
    (``SLIPWAY_SIM_SCHEDULE_SECONDS``), its image's pull (``SLIPWAY_SIM_PULL_SECONDS``) and the container's
    creation and start after it (``SLIPWAY_SIM_START_SECONDS``). A value absent or not a duration is its
    default; one above :data:`MAX_START_DELAY_SECONDS` is held to it."""
    def knob(name: str, default: int) -> int:
        raw = env.get(name, "")
        parsed = parse_duration(raw) if raw else None
        return default if parsed is None else min(parsed, MAX_START_DELAY_SECONDS)

    return (knob("SLIPWAY_SIM_SCHEDULE_SECONDS", 0), knob("SLIPWAY_SIM_PULL_SECONDS", DEFAULT_PULL_SECONDS),
            knob("SLIPWAY_SIM_START_SECONDS", DEFAULT_START_SECONDS))


def schedule_delay(plan: dict) -> int:
    """Seconds after its creation before the scheduler binds a pod of ``plan``."""
    return int(plan.get("sched_s") or 0)


def pull_seconds(plan: dict) -> int:
    """Seconds from a pod's binding to its image pulled (its ``Pulled`` event)."""
    return int(plan.get("pull_s", DEFAULT_PULL_SECONDS))


def start_after_binding(plan: dict) -> int:
    """Seconds from a pod's binding to its container running: the pull, then the container's creation
    (plans compiled before the knobs existed: :data:`PULL_SECONDS` in all)."""
    return pull_seconds(plan) + int(plan.get("start_s", DEFAULT_START_SECONDS))


def _finite_float(raw: str) -> float | None:
    """A finite number in ``raw``, None when there is none (the knob's default applies)."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _positive_float(raw: str) -> float | None:
    """A finite number above 0 in ``raw``, None when there is none (the knob's default applies)."""
    value = _finite_float(raw)
    return value if value is not None and value > 0 else None


#: The most SLIPWAY_SIM_FAILED_ATTEMPTS says (more digits read as this: every attempt fails).
MAX_FAILED_ATTEMPTS = 999_999_999
#: Outcomes SLIPWAY_SIM_FAILED_ATTEMPTS limits to the first attempts.
RETRYABLE_OUTCOMES = ("fail", "oom")


def pull_failure(plan: dict) -> str:
    """The kubelet's waiting reason for a pod whose image cannot be pulled, "" when it pulls.

    The registry's verdict on the image (``plan["pull"]``, :mod:`sandbox.registry`) or, for an
    image the registry would pull, the ``image-pull`` outcome a spec asks for (a "not found").
    """
    return plan.get("pull") or ("ErrImagePull" if plan["out"] == "image-pull" else "")


def pod_outcome(plan: dict, owner_kind: str, index: int) -> str:
    """How one pod ends. A Job's pod ``index`` is its attempt (0-based): past the plan's failed
    attempts (``SLIPWAY_SIM_FAILED_ATTEMPTS``) a failing outcome turns into success."""
    outcome, fails = plan["out"], plan.get("fails")
    if owner_kind == "Job" and fails is not None and index >= fails and outcome in RETRYABLE_OUTCOMES:
        return "succeed"
    return outcome


@dataclass(frozen=True)
class CrashState:
    """Where a crash-looping container is at time ``t`` (restartPolicy Always)."""

    restarts: int
    running: bool  # True: inside a run; False: waiting in CrashLoopBackOff
    backoff: int  # the current back-off in seconds (meaningful when not running)
    last_exit: datetime | None  # when the previous run ended
    run_started: datetime


def crash_state(started: datetime, run_seconds: int, now: datetime) -> CrashState:
    """Replay run/back-off cycles from ``started`` until ``now`` (bounded: back-off caps at 5m)."""
    t, restarts, backoff, last_exit = started, 0, BACKOFF_START, None
    for _ in range(100_000):
        end = t + timedelta(seconds=run_seconds)
        if now < end:
            return CrashState(restarts, True, backoff, last_exit, t)
        resume = end + timedelta(seconds=backoff)
        if now < resume:
            return CrashState(restarts, False, backoff, end, t)
        t, last_exit = resume, end
        restarts += 1
        backoff = min(backoff * 2, BACKOFF_CAP)
    return CrashState(restarts, False, backoff, last_exit, t)


#: A simulated run's phases, which its GPUs' telemetry shows (utilization, and the power and heat that follow it).
LOAD, TRAIN, EVAL, IDLE, SERVE = "load", "train", "eval", "idle", "serve"
#: Loading data and the model: this fraction of the run, within these bounds (seconds).
LOAD_FRACTION, LOAD_MIN_SECONDS, LOAD_MAX_SECONDS = 0.1, 5, 120
#: Evaluations: at these fractions of the run, each this fraction of it long, within these bounds (seconds).
EVALS_AT = (0.25, 0.5, 0.75)
EVAL_FRACTION, EVAL_MIN_SECONDS, EVAL_MAX_SECONDS = 0.04, 5, 300
#: Percent busy in each phase (a slow deterministic wobble on top), for a GPU of its own.
PHASE_UTIL = {LOAD: (18, 4), TRAIN: (88, 7), EVAL: (45, 5), IDLE: (1, 0)}


def phase(plan: dict, server: bool, elapsed: float) -> str:
    """What a pod of ``plan`` does ``elapsed`` seconds after its container started.

    A run loads (the first tenth of its duration, 5 s to 2 min), then trains, evaluating at a
    quarter, half and three quarters of it (4 % of it each, 5 s to 5 min), and sits idle from
    ``SLIPWAY_SIM_IDLE_AFTER`` on when that is set (its GPUs allocated, unused). A server loads
    its model until it is ready, then serves.
    """
    if server:
        return LOAD if elapsed < float(plan.get("ready") or 0) else SERVE
    idle_after = plan.get("idle")
    if idle_after is not None and elapsed >= idle_after:
        return IDLE
    duration = float(plan.get("dur") or 0)
    if elapsed < min(max(duration * LOAD_FRACTION, LOAD_MIN_SECONDS), LOAD_MAX_SECONDS):
        return LOAD
    length = min(max(duration * EVAL_FRACTION, EVAL_MIN_SECONDS), EVAL_MAX_SECONDS)
    if any(at * duration <= elapsed < at * duration + length for at in EVALS_AT):
        return EVAL
    return TRAIN


def gpu_utilization(pod_name: str, fixed: float | None, *, serving_load: float | None, now: datetime,
                    phase_now: str = TRAIN) -> int:
    """Synthetic GPU utilisation (percent) of a running pod.

    A run's follows its phase (:func:`phase`: training hovers in the high 80s/90s with a slow
    deterministic wobble, loading and evaluating far less, idle next to nothing); a server follows
    its share of the endpoint's load once its model is loaded; ``SLIPWAY_SIM_GPU_UTIL`` pins it
    whatever the phase (idle-run demos).
    """
    if fixed is not None:
        return int(max(0.0, min(100.0, fixed)))
    wobble = math.sin(now.timestamp() / 97.0 + stable_int(pod_name) % 628 / 100.0)
    if serving_load is not None and phase_now != LOAD:
        return int(max(0.0, min(100.0, serving_load + 4 * wobble)))
    base, swing = PHASE_UTIL.get(phase_now, PHASE_UTIL[LOAD])
    return int(base + swing * wobble)


def gpu_memory_mib(plan: dict, elapsed: float) -> int:
    """The GPU memory (MiB, per GPU) a running pod holds: what it allocated as it started
    (``SLIPWAY_SIM_GPU_MEMORY_GB``), plus what a leak (``SLIPWAY_SIM_GPU_MEMORY_LEAK``, GiB a minute)
    added since. The exporter reports no more than the GPU has: a leak fills it and holds it full."""
    leak = float(plan.get("leak") or 0) * max(elapsed, 0.0) / 60
    return round((float(plan.get("mem") or 0) + leak) * 1024)


def _rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


#: The learning rate a simulated run trains with when its arguments name none.
DEFAULT_LR = 3e-4
#: How training scripts commonly spell the learning-rate option.
LR_OPTIONS = ("--lr", "--learning-rate", "--learning_rate")


def learning_rate(args: tuple[str, ...] | list[str]) -> float | None:
    """The learning rate the user's arguments give (``--lr 3e-4`` or ``--lr=3e-4``), None when none or not a number."""
    for i, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name not in LR_OPTIONS:
            continue
        if not sep:
            value = args[i + 1] if i + 1 < len(args) else ""
        try:
            lr = float(value)
        except ValueError:
            return None
        return lr if math.isfinite(lr) and lr > 0 else None
    return None


def _args_lines(stamp: str, args: tuple[str, ...] | list[str]) -> list[str]:
    """The line a script logs about its command-line arguments (none when it got none)."""
    return [f"{stamp} INFO  args: {shlex.join(args)}"] if args else []


def training_log(pod_name: str, *, image: str, started: datetime, until: datetime, outcome: str,
                 finished: bool, workers: int, tail: int, args: tuple[str, ...] | list[str] = (),
                 ckpt: checkpoints.Checkpointing | None = None, noticed: bool = False,
                 oom_detail: str = "", every: float | None = None, planned: float | None = None,
                 pace: Pace | None = None, curve: dict[str, str] | None = None) -> list[str]:
    """Plausible training output from ``started`` to ``until`` (only the last ``tail`` lines are built).

    It echoes the container's ``args`` as a training script does, and trains with the learning
    rate they give (``--lr``), so what the user typed shows up where they look for it.
    ``ckpt``: it checkpoints (and resumes) as :mod:`sandbox.checkpoints` says; ``noticed``: it
    stopped at ``until`` because of a preemption notice; ``oom_detail``: why it ran out of GPU
    memory, when its shared GPU's memory is the cause (:mod:`sandbox.sharing`). Its training lines
    are metric lines (:mod:`sandbox.training_metrics`): one ``every`` seconds
    (``SLIPWAY_SIM_LOG_EVERY``), and its progress towards the steps of its ``planned`` seconds (this
    attempt's; None: no progress lines). ``pace``: on a time-sliced GPU its steps follow the work it
    got done (:class:`sandbox.sharing.Pace`), not the clock; None: the clock. ``curve``: the env
    entries its learning curve reads (:attr:`SimSettings.curve`, ``SLIPWAY_SIM_OPTIMUM``): its loss at
    each step is then its :class:`sandbox.curves.Curve`'s at that step (a resumed attempt's goes on
    from its step), and it trains with the parameter named ``LR`` when there is one and ``--lr`` says
    none; None: the usual curve, a function of the time worked.
    """
    every = every or training_metrics.DEFAULT_EVERY
    elapsed = max(0, int((until - started).total_seconds()))
    seed = stable_int(pod_name) % 1000
    shape = curves.curve_for(curve) if curve else None
    given_lr = learning_rate(args)
    swept_lr = curves.learning_rate(curve) if curve and given_lr is None else None
    lr = given_lr or (swept_lr[1] if swept_lr else DEFAULT_LR)
    lr_source = "--lr" if given_lr else swept_lr[0] if swept_lr else "default"
    resumed = ckpt.resume if ckpt is not None else 0
    done_before = ckpt.done_before if ckpt is not None else 0  # seconds of work of earlier attempts
    total = training_metrics.total_steps(done_before + planned, every) if planned else 0
    header = [
        *([f"{_rfc3339(started)} INFO  resuming from step {resumed} ({ckpt.path(resumed)})"]
          if ckpt is not None and resumed else []),
        # Where it resumes, said at once as a script does (issue 46): its progress is this attempt's
        # from its first line, not the last attempt's until a few training lines are done.
        *([training_metrics.progress_line(_rfc3339(started), resumed, total)] if total and resumed else []),
        f"{_rfc3339(started)} INFO  starting {image}",
        *_args_lines(_rfc3339(started), args),
        f"{_rfc3339(started)} INFO  torch.distributed initialised: world_size={workers} backend=nccl",
        f"{_rfc3339(started)} INFO  loading dataset shards … done (1,204,331 samples)",
        f"{_rfc3339(started)} INFO  optimizer AdamW, learning rate {lr:g} ({lr_source})",
    ]
    worked = pace.work(started, until) if pace is not None else max(0.0, (until - started).total_seconds())
    steps = training_metrics.lines_in(max(0.0, worked), every)
    footer: list[str] = []
    end = _rfc3339(until)
    if finished and noticed:
        footer = checkpoints.notice_footer(ckpt, elapsed, end)
    elif finished and outcome == "succeed":
        footer = [f"{end} INFO  training complete: saved checkpoint to /checkpoints/final.pt"]
    elif finished and outcome == "oom" and oom_detail:
        footer = [f"{end} ERROR torch.OutOfMemoryError: CUDA out of memory. {oom_detail}", f"{end} Killed"]
    elif finished and outcome == "oom":
        footer = [f"{end} ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                  "(GPU 0; 79.15 GiB total capacity; 77.02 GiB already allocated)", f"{end} Killed"]
    elif finished:
        footer = [f"{end} ERROR Traceback (most recent call last):",
                  f'{end} ERROR   File "/workspace/train.py", line 214, in <module>',
                  f"{end} ERROR RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error"]
    first = max(1, steps - max(tail - len(footer), 0) + 1)
    timed: list[tuple[int, str]] = []
    for k in range(first, steps + 1):
        seconds = k * every  # of work; when it was done, on the clock:
        wall = pace.wall(started, seconds) if pace is not None else seconds
        step = (k + training_metrics.lines_in(done_before, every)) * training_metrics.STEPS_PER_LINE  # resumed: goes on
        if shape is not None:  # a sweep trial's curve (sandbox.curves), by the step it reports
            loss = shape.loss_at(step)
        else:
            loss = 0.35 + 2.4 * math.exp(-(seconds + done_before) / 600.0) + 0.02 * math.sin(k * 1.7 + seed)
        stamp = training_metrics.stamp(started + timedelta(seconds=wall), every)
        timed.append((wall, training_metrics.step_line(stamp, step, loss, lr, 410 + seed % 40)))
        if total and k % training_metrics.PROGRESS_EVERY == 0:
            timed.append((wall, training_metrics.progress_line(stamp, step, total)))
    if ckpt is not None:
        since = int(first * every) if first > 1 else 0
        # Stamped like every other line (a logger's prefix, which the contract's parser allows):
        # the portal dates a checkpoint read from the log by it (the checkpoint contract's log reading).
        timed.extend((second, f"{_rfc3339(started + timedelta(seconds=second))} INFO  {line}")
                     for second, line in checkpoints.body_lines(ckpt, elapsed, since, max(tail, 0)))
    timed.sort(key=lambda pair: pair[0])  # stable: a checkpoint follows the progress line of its second
    body = [line for _, line in timed]
    return (header + body + footer)[-tail:] if tail > 0 else []


SERVE_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")


def server_log(pod_name: str, *, image: str, started: datetime, until: datetime, load: float, tail: int,
               port: int | None = None, args: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Server start-up lines (its ``args``, listening on ``port``, 8080 when none is declared), then
    access-log lines whose rate follows the endpoint's load."""
    header = [
        f"{_rfc3339(started)} INFO  starting {image}",
        *_args_lines(_rfc3339(started), args),
        f"{_rfc3339(started)} INFO  model weights loaded onto cuda:0",
        f'{_rfc3339(started)} INFO  Uvicorn running on http://0.0.0.0:{port or 8080} (Press CTRL+C to quit)',
    ]
    elapsed = max(0, int((until - started).total_seconds()))
    every = max(1, int(30 / max(load, 1.0)))  # busier endpoint: denser log
    count = elapsed // every
    first = max(1, count - tail + 1)
    seed = stable_int(pod_name)
    body = []
    for k in range(first, count + 1):
        at = started + timedelta(seconds=k * every)
        h = stable_int(seed, k)
        path = SERVE_PATHS[h % len(SERVE_PATHS)]
        status = 200 if h % 50 else 429
        stamp = at.strftime("%d/%b/%Y:%H:%M:%S +0000")
        body.append(f'10.42.{h % 7}.{h % 250 + 2} - - [{stamp}] "POST {path} HTTP/1.1" {status} {200 + h % 3000} '
                    f"{(h % 900) / 1000 + 0.05:.3f}")
    body.insert(0, f'{_rfc3339(started)} INFO  "GET /health/ready HTTP/1.1" 200')
    return (header + body)[-tail:] if tail > 0 else []


def default_load(ref_key: str, threshold: float, max_replicas: int, now: datetime) -> float:
    """A gentle demo curve: 5-65% of the endpoint's full capacity, over a 30-minute period."""
    phase = stable_int(ref_key) % 1000 / 1000.0
    minute = now.timestamp() // 60 * 60  # moves once a minute, like a scraped metric, not every tick
    fraction = 0.35 + 0.30 * math.sin(2 * math.pi * (minute / 1800.0 + phase))
    return round(threshold * max(max_replicas, 1) * fraction, 1)


def wanted_replicas(load: float, threshold: float, low: int) -> int:
    """KEDA-style, before the ceiling: ceil(load / threshold), at least one while there is load.

    Zero only at zero load (KEDA then scales to ``low``, zero when it may).
    """
    if load <= 0:
        return low
    return max(low, 1, math.ceil(load / threshold)) if threshold > 0 else max(low, 1)


def desired_replicas(load: float, threshold: float, low: int, high: int) -> int:
    """What the HPA sets: :func:`wanted_replicas` clamped to the ceiling ``high``."""
    return min(wanted_replicas(load, threshold, low), high) if high >= 1 else 0
