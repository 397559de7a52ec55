"""Runs as a sweep's trials (docs/sweeps.md): a trial's fields from the sweep's base, and what it reported.

The run kind's :class:`workloads.registry.Trials` (``jobs.kind``) delegates here. A trial receives its
parameters the two ways a training script reads them: as env vars named after them, upper-cased (``lr`` →
``LR=0.00031``), and as ``{lr}`` placeholders in its args and env values (``--lr={lr}``). Only placeholders
that name a parameter are replaced, so other braces (a JSON argument) stay as written. A value is written
as Python's ``str`` gives it (``3.1e-05``, ``64``, ``adamw``): the shortest text that reads back as the
same number, which is the value Optuna recorded.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from jobs.metrics import LAST_READ_WITHIN
from jobs.models import RunLogCursor, RunMetric, TrainingRun
from workloads.registry import TrialReport

_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


def value_text(value) -> str:
    """A parameter's value as a trial's env and args carry it."""
    return str(value)


def put_in(text: str, params: dict) -> str:
    """``text`` with each ``{name}`` of a parameter replaced by its value; other braces as they are."""
    return _PLACEHOLDER.sub(lambda m: value_text(params[m.group(1)]) if m.group(1) in params else m.group(0), text)


def trial_fields(fields: dict, name: str, params: dict) -> dict:
    """One trial's run fields: the sweep's base with its name, its parameters as env vars and in placeholders."""
    trial = dict(fields)
    trial["name"] = name
    env = {key: put_in(value, params) if isinstance(value, str) else value
           for key, value in (fields.get("env") or {}).items()}
    env.update({param.upper(): value_text(value) for param, value in params.items()})
    trial["env"] = env
    if isinstance(fields.get("args"), list):
        trial["args"] = [put_in(arg, params) if isinstance(arg, str) else arg for arg in fields["args"]]
    return trial


def settled(run: TrainingRun, read_done: bool, now: datetime) -> bool:
    """Whether nothing more of ``run``'s metrics will be read: final, and its log read once after it ended
    (or never to be: it never reached a cluster, or ended longer ago than the reader looks back)."""
    if not run.is_final:
        return False
    return read_done or run.cluster_id is None or run.finished_at is None or run.finished_at < now - LAST_READ_WITHIN


def objective(workloads: list, metric: str, after: dict[int, int], now: datetime | None = None) -> dict[int, TrialReport]:
    """What each run of ``workloads`` (rows of the one table, by uid) reported of ``metric`` after ``after[uid]``."""
    now = now or timezone.now()
    runs = {run.workload_id: run for run in TrainingRun.objects.filter(workload_id__in=[w.uid for w in workloads])
            .only("id", "workload_id", "state", "cluster_id", "finished_at")}
    if not runs:
        return {}
    done = set(RunLogCursor.objects.filter(run_id__in=[r.pk for r in runs.values()], done=True)
               .values_list("run_id", flat=True))
    wanted = Q()
    for uid, run in runs.items():
        wanted |= Q(run_id=run.pk, step__gt=after.get(uid, -1))
    points: dict[int, list[tuple[int, float]]] = {}
    for run_id, step, value in (RunMetric.objects.filter(wanted, name=metric).order_by("run_id", "step")
                                .values_list("run_id", "step", "value")):
        points.setdefault(run_id, []).append((step, value))
    return {uid: TrialReport(tuple(points.get(run.pk, ())), settled(run, run.pk in done, now))
            for uid, run in runs.items()}
