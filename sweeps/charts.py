"""The sweep page's charts as plain data (pure: no query, no clock), drawn by ``static/js/sweeps.js`` with uPlot.

The page embeds :func:`sweep_charts`' answer with ``json_script``; the script draws four kinds of chart from it:

- **the best so far** (:func:`best_so_far`): the best value of the objective among the completed trials, as a
  step line over time and over the GPU-hours the sweep spent, each point a trial that ended;
- **the objective against each parameter** (:func:`parameter_scatter`): a scatter per parameter, a series per
  trial state (pruned ones dimmed), on a log axis for a log-scaled parameter and on an index axis with the
  choices as labels for a categorical one;
- **the learning curves** (:func:`learning_curves`): what each trial reported of the objective, step by step,
  overlaid (pruned ones dimmed, the best trial's drawn wider), each thinned so that the whole chart stays about
  :data:`MOST_POINTS` points.

JSON has no NaN or infinity (``JSON.parse`` refuses them), so a value that is not finite is written as null
(:func:`finite`): a gap in a line, no point in a scatter.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

from sweeps.constants import Goal, TrialState

#: Points the learning curves chart holds at the most, all trials together; each curve keeps at least
#: :data:`MIN_CURVE_POINTS` and at most :data:`MAX_CURVE_POINTS` of its own.
MOST_POINTS = 20_000
MIN_CURVE_POINTS = 20
MAX_CURVE_POINTS = 240

#: The order a chart's series by trial state are listed in (its legend).
STATE_ORDER = (TrialState.COMPLETED, TrialState.PRUNED, TrialState.ACTIVE, TrialState.STOPPED, TrialState.FAILED)


def finite(value) -> float | None:
    """``value`` as a float JSON can hold: None for nothing, NaN or an infinity."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def better(goal: str, value: float, than: float | None) -> bool:
    """Whether ``value`` is better than ``than`` by the sweep's ``goal`` (anything beats None)."""
    if than is None:
        return True
    return value > than if goal == Goal.MAXIMIZE else value < than


def thin(points: list | tuple, most: int) -> list:
    """At most ``most`` of ``points``, evenly spaced by position, the first and the last always kept."""
    points = list(points)
    if len(points) <= most:
        return points
    if most < 2:
        return points[-1:]
    last = len(points) - 1
    picked = sorted({round(i * last / (most - 1)) for i in range(most)})
    return [points[i] for i in picked]


def _seconds(moment: datetime) -> float:
    return round(moment.timestamp(), 3)


def best_so_far(goal: str, trials: list, gpu_hours_by_work: dict[int, Decimal], until: datetime,
                spent_gpu_hours: Decimal) -> dict:
    """The best value among the completed trials, as it improved: ``{"time": {"x", "y"}, "gpu_hours": {"x", "y"}}``.

    One point per trial that ended (any way: a pruned one spent GPU-hours too), in the order they ended: x its end
    (seconds since the epoch) or the GPU-hours the ended trials had spent by then, y the best value after it
    (None until a trial completed with a finite value). A last point holds the best to ``until`` (now, or the
    sweep's end) and to ``spent_gpu_hours`` (all its trials', the active ones' too), so the step line shows what
    was spent since the last improvement. ``trials``: the sweep's :class:`sweeps.models.Trial` rows;
    ``gpu_hours_by_work``: ``{workload uid: GPU-hours}`` (:class:`sweeps.work.Spend`).
    """
    ended = sorted((t for t in trials if t.state != TrialState.ACTIVE and t.finished_at is not None),
                   key=lambda t: (t.finished_at, t.number))
    best: float | None = None
    hours = Decimal(0)
    time = {"x": [], "y": []}
    gpu = {"x": [], "y": []}
    for trial in ended:
        value = finite(trial.value) if trial.state == TrialState.COMPLETED else None
        if value is not None and better(goal, value, best):
            best = value
        hours += gpu_hours_by_work.get(trial.workload_id, Decimal(0)) if trial.workload_id is not None else 0
        time["x"].append(_seconds(trial.finished_at))
        time["y"].append(best)
        gpu["x"].append(round(float(hours), 4))
        gpu["y"].append(best)
    if best is not None:
        if not time["x"] or _seconds(until) > time["x"][-1]:
            time["x"].append(_seconds(until))
            time["y"].append(best)
        total = round(float(spent_gpu_hours), 4)
        if not gpu["x"] or total > gpu["x"][-1]:
            gpu["x"].append(total)
            gpu["y"].append(best)
    return {"time": time, "gpu_hours": gpu}


def result_of(trial) -> float | None:
    """What a trial's point on a parameter's scatter stands at: the value the study was told at its end
    (completed, pruned), else the newest value it reported (an active trial's now); None: nothing finite."""
    return finite(trial.value) if trial.value is not None else finite(trial.objective)


def _index_of(choices: list, value) -> int | None:
    """The position of ``value`` among a categorical parameter's ``choices`` (a ``True`` is no ``1``)."""
    for index, choice in enumerate(choices):
        if type(choice) is type(value) and choice == value:
            return index
    return next((index for index, choice in enumerate(choices) if choice == value), None)


def parameter_scatter(parameters: dict, trials: list) -> list[dict]:
    """A scatter per parameter of the sweep, by name: the objective (:func:`result_of`) against the parameter's
    value, each trial one point in the series of its state.

    Each chart: ``{"name", "scale": "linear" | "log" | "categorical", "labels": the choices as text (a
    categorical's, whose x is the choice's index) or None, "x": sorted, "trials": the trials' numbers along x,
    "series": [{"state", "label", "y": one per x, None where the trial is in another series}]}``. ``parameters``:
    the sweep's ``{name: {"type", "log", "choices", …}}``.
    """
    charts = []
    for name in sorted(parameters):
        field = parameters[name]
        categorical = field.get("type") == "categorical"
        choices = list(field.get("choices") or ())
        points = []
        for trial in trials:
            y = result_of(trial)
            if y is None or name not in (trial.params or {}):
                continue
            raw = trial.params[name]
            x = _index_of(choices, raw) if categorical else finite(raw)
            if x is None:
                continue
            points.append((x, trial.number, trial.state, y))
        points.sort(key=lambda p: (p[0], p[1]))
        present = [state for state in STATE_ORDER if any(p[2] == state for p in points)]
        charts.append({
            "name": name,
            "scale": "categorical" if categorical else ("log" if field.get("log") else "linear"),
            "labels": [str(choice) for choice in choices] if categorical else None,
            "x": [p[0] for p in points],
            "trials": [p[1] for p in points],
            "series": [{"state": state, "label": TrialState(state).label,
                        "y": [p[3] if p[2] == state else None for p in points]} for state in present],
        })
    return charts


def learning_curves(sweep, trials: list, reports: dict, best_number: int | None) -> list[dict]:
    """Each trial's reported objective, step by step: ``[{"label": its name, "number", "state", "best": whether it
    is the sweep's best trial, "steps", "values"}]`` in trial order, for the trials that reported a point.

    ``reports``: ``{workload uid: TrialReport}`` (the trial kind's objective, all points). Each curve is thinned
    (:func:`thin`) to its share of :data:`MOST_POINTS`, within :data:`MIN_CURVE_POINTS` and
    :data:`MAX_CURVE_POINTS`.
    """
    reported = [(trial, reports[trial.workload_id].points) for trial in trials
                if trial.workload_id is not None and trial.workload_id in reports and reports[trial.workload_id].points]
    if not reported:
        return []
    share = max(MIN_CURVE_POINTS, min(MAX_CURVE_POINTS, MOST_POINTS // len(reported)))
    curves = []
    for trial, points in reported:
        kept = thin(points, share)
        curves.append({"label": trial.name, "number": trial.number, "state": trial.state,
                       "best": trial.number == best_number, "steps": [step for step, _value in kept],
                       "values": [finite(value) for _step, value in kept]})
    return curves


def sweep_charts(sweep, trials: list, reports: dict, gpu_hours_by_work: dict[int, Decimal],
                 spent_gpu_hours: Decimal, best_number: int | None, until: datetime) -> dict:
    """What the sweep page's script draws (module docstring): ``{"metric", "goal", "best", "parameters",
    "curves"}`` — :func:`best_so_far`, :func:`parameter_scatter` and :func:`learning_curves` of ``trials``."""
    return {
        "metric": sweep.metric,
        "goal": sweep.goal,
        "best": best_so_far(sweep.goal, trials, gpu_hours_by_work, until, spent_gpu_hours),
        "parameters": parameter_scatter(sweep.parameters, trials),
        "curves": learning_curves(sweep, trials, reports, best_number),
    }
