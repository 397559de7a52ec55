"""Simulated checkpointing: a run pod that saves its state every N seconds, resumes from the
last checkpoint it is handed, and (if it honours it) checkpoints and exits at a preemption notice.

The contract it plays is the one Slipway gives runs that opt in (docs/api.md, "The checkpoint
contract"): ``SLIPWAY_CHECKPOINT_DIR``, ``SLIPWAY_RESUME_FROM`` and the notice annotation
``slipway.dev/notice`` (the file ``/etc/slipway/notice``). Knobs, from the first container's env:

* ``SLIPWAY_SIM_CHECKPOINT_EVERY`` — ``20s`` style (as ``SLIPWAY_SIM_DURATION``): every N seconds
  of its own run time the pod prints ``SLIPWAY_CHECKPOINT step=<n> path=<dir>/step-<n>``, ``n`` the
  training step it has reached then — the step of its metric and progress lines
  (:mod:`sandbox.training_metrics`: 20 a line, a line every ``SLIPWAY_SIM_LOG_EVERY``), so "resumes
  from step 120" and "step 120 of 2400" are one scale (issue 46: they were not, "step 3" beside
  "step 120");
* ``SLIPWAY_RESUME_FROM`` ending in ``step-<k>``: the log starts with ``resuming from step <k>``,
  steps continue from ``k``, and the run's duration is shortened by the seconds of work ``k``
  stands for;
* ``SLIPWAY_SIM_HONOUR_NOTICE=1``: when the notice reaches the pod, it saves a last checkpoint
  (rounded up to the next step) and exits at once with code 143, instead of running on until
  the grace period's end.

Everything is a function of the plan and the pod's times, like the rest of :mod:`sandbox.simulation`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.text import whole_number
from sandbox import training_metrics

#: Where checkpoints go when the pod has no ``SLIPWAY_CHECKPOINT_DIR``.
DEFAULT_DIR = "/ckpt"
#: The annotation carrying a preemption notice (its value: the deadline), seen in the downward-API file.
#: The exit code of a pod that checkpointed and stopped at a notice (as a script exiting on SIGTERM).
NOTICE_EXIT_CODE = 143
_STEP = re.compile(r"step-([0-9]+)/*$")
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Checkpointing:
    """A plan's checkpoint settings (``plan["ckpt"]``)."""

    every: int
    directory: str = DEFAULT_DIR
    resume: int = 0  # the training step resumed from (0: a fresh start)
    log_every: float = training_metrics.DEFAULT_EVERY  # seconds between training lines: the steps' pace

    def path(self, step: int) -> str:
        return f"{self.directory.rstrip('/') or ''}/step-{step}"

    def line(self, step: int) -> str:
        return f"SLIPWAY_CHECKPOINT step={step} path={self.path(step)}"

    @property
    def done_before(self) -> float:
        """Seconds of work the step resumed from stands for (earlier attempts')."""
        return self.resume / training_metrics.STEPS_PER_LINE * self.log_every

    def step_of(self, seconds: float) -> int:
        """The training step reached after ``seconds`` of this attempt's work (as its metric lines count)."""
        return training_metrics.total_steps(self.done_before + seconds, self.log_every)

    def final_step(self, seconds: float) -> int:
        """The step a notice's last checkpoint saves after ``seconds``: rounded up to the next line's step."""
        lines = math.ceil((self.done_before + seconds) / self.log_every - 1e-9)
        return lines * training_metrics.STEPS_PER_LINE


def resume_step(path: str) -> int:
    """``k`` of a checkpoint path ending in ``step-<k>`` (0 when empty or of another shape)."""
    match = _STEP.search(path.strip())
    # A step of more digits than any run reaches is of another shape too (int() refuses thousands of digits).
    return (whole_number(match.group(1), longer=0) or 0) if match else 0


def plan_settings(env: dict[str, str], every: int | None) -> dict | None:
    """What a pod plan keeps of the checkpoint knobs (None: the pod does not checkpoint)."""
    if not every or every <= 0:
        return None
    return {"every": every, "dir": env.get("SLIPWAY_CHECKPOINT_DIR") or DEFAULT_DIR,
            "resume": resume_step(env.get("SLIPWAY_RESUME_FROM", "")),
            "log": training_metrics.log_every(env) or training_metrics.DEFAULT_EVERY}


def honours_notice(env: dict[str, str]) -> bool:
    return env.get("SLIPWAY_SIM_HONOUR_NOTICE", "").strip().lower() in _TRUE


def from_plan(plan: dict) -> Checkpointing | None:
    raw = plan.get("ckpt")
    if not raw:
        return None
    return Checkpointing(every=int(raw["every"]), directory=str(raw.get("dir") or DEFAULT_DIR),
                         resume=int(raw.get("resume") or 0),
                         log_every=float(raw.get("log") or training_metrics.DEFAULT_EVERY))


def notice_exit(plan: dict, started: datetime | None, notice_at: datetime | None) -> datetime | None:
    """When a pod that honours notices stops because of one (None: it does not, or has none yet).

    It reads the file as soon as it runs: a notice given before it started stops it at its start.
    """
    if not plan.get("honour") or started is None or notice_at is None:
        return None
    return max(started, notice_at)


def body_lines(ckpt: Checkpointing, elapsed: int, since: int, tail: int) -> list[tuple[int, str]]:
    """Checkpoint lines between ``since`` and ``elapsed`` seconds of run time, as (second, line),
    at most the last ``tail`` of them. Bare: the line is what the script prints; the run's log
    (sandbox.simulation) puts its logger's time stamp before it."""
    last = elapsed // ckpt.every
    first = max(1, math.ceil(since / ckpt.every), last - tail + 1)
    return [(j * ckpt.every, ckpt.line(ckpt.step_of(j * ckpt.every))) for j in range(first, last + 1)]


def notice_footer(ckpt: Checkpointing | None, elapsed: float, end: str) -> list[str]:
    """The last lines of a pod that honoured a notice: a final checkpoint (unless one was just
    saved on schedule), then its exit."""
    lines = []
    if ckpt is not None and elapsed % ckpt.every:
        lines.append(f"{end} INFO  {ckpt.line(ckpt.final_step(elapsed))}")
    lines.append(f"{end} INFO  preemption notice received: checkpoint saved, exiting")
    return lines


def shortened(duration: int, settings: dict | None) -> int:
    """The run time left after resuming: the seconds of work step ``k`` stands for were done by earlier attempts."""
    if not settings or not settings["resume"]:
        return duration
    return max(duration - math.floor(from_plan({"ckpt": settings}).done_before), 1)


def seconds_between(start: datetime, end: datetime) -> float:
    return max((end - start) / timedelta(seconds=1), 0.0)
