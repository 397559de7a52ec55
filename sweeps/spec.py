"""A sweep as requested, checked field by field (docs/sweeps.md "The sweep file"), and its shape: pure.

:func:`parse` turns a request's fields into a :class:`SweepRequest` or raises ``ValidationError`` with every
field's errors at once (``parameters.lr``, ``pruner.min_resource``); the base of its trials is the trial kind's
own fields, checked by that kind when the sweep is previewed (:mod:`sweeps.services`). :func:`shape` is what
the dry run shows before anything runs: the trials, and for ASHA its rungs (:func:`asha_rungs`).

The search space maps one to one onto Optuna's distributions (:meth:`Parameter.distribution`): ``float`` with
bounds, ``log`` and ``step`` (not both, as Optuna refuses); ``int`` with bounds, ``log`` and ``step`` (``log``
only with step 1); ``categorical`` with its choices (strings, numbers, booleans). The grid sampler needs a space
it can enumerate: every parameter categorical, an int, or a float with a step.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

from sweeps import constants as c
from workloads.validation import DNS1123_LABEL, Collector

PARAM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
PARAMETER_KEYS = {"float": {"type", "min", "max", "log", "step"}, "int": {"type", "min", "max", "log", "step"},
                  "categorical": {"type", "choices"}}
PRUNER_KEYS = {c.PrunerType.NONE: {"type"},
               c.PrunerType.MEDIAN: {"type", "startup_trials", "warmup_steps"},
               c.PrunerType.ASHA: {"type", "min_resource", "reduction_factor", "max_resource"}}
#: The largest bound a numeric parameter may have (what a float holds exactly as an integer).
MAX_BOUND = 2 ** 53
#: The most steps a float parameter's step may cut its range into (see :func:`_parameter`).
MAX_FLOAT_STEPS = 10 ** 15


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  #: "float" | "int" | "categorical"
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    def distribution(self):
        """Optuna's distribution of this parameter."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.type == "categorical":
            return CategoricalDistribution(list(self.choices))
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def grid_count(self) -> int | None:
        """How many values :meth:`grid_values` lists, worked out without listing them: a grid's size is checked
        before any of it is listed (an int range of 2**53 would be a list of 2**53 ints). None: not enumerable."""
        if self.type == "categorical":
            return len(self.choices)
        if self.type == "int":
            return len(self._ints())
        if self.step is None:
            return None
        # Each step from min that stays within max, give or take float rounding (0.1 to 0.3 by 0.1 is three);
        # at most MAX_FLOAT_STEPS of them (the parser's rule), so the count is a float's to make.
        return math.floor((self.high - self.low) / self.step + 1e-9) + 1

    def grid_values(self) -> list | None:
        """Every value of an enumerable parameter, in order: :meth:`grid_count` of them (None: not enumerable: a
        float without a step)."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return list(self._ints())
        if self.step is None:
            return None
        return [round(self.low + k * self.step, 12) for k in range(self.grid_count())]

    def _ints(self) -> range:
        return range(int(self.low), int(self.high) + 1, int(self.step or 1))

    def example(self):
        """A value within the space (the preview renders a trial with it): the middle, or the first choice."""
        if self.type == "categorical":
            return self.choices[0]
        middle = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        return round(middle) if self.type == "int" else middle

    def as_field(self) -> dict:
        if self.type == "categorical":
            return {"type": self.type, "choices": list(self.choices)}
        found = {"type": self.type, "min": self.low, "max": self.high, "log": self.log}
        if self.step is not None:
            found["step"] = self.step
        return found


@dataclass(frozen=True)
class Pruner:
    type: str = c.PrunerType.NONE
    startup_trials: int = c.DEFAULT_STARTUP_TRIALS  #: median: trials that run to their end before any is judged
    warmup_steps: int = c.DEFAULT_WARMUP_STEPS  #: median: steps before a trial is judged
    min_resource: int = 1  #: ASHA: the first rung, in the objective's steps
    reduction_factor: int = c.DEFAULT_REDUCTION_FACTOR  #: ASHA: one in this many goes on at each rung
    max_resource: int = 0  #: ASHA: the steps a trial runs when not pruned (the shape's last rung)

    def as_field(self) -> dict:
        if self.type == c.PrunerType.MEDIAN:
            return {"type": self.type, "startup_trials": self.startup_trials, "warmup_steps": self.warmup_steps}
        if self.type == c.PrunerType.ASHA:
            return {"type": self.type, "min_resource": self.min_resource, "reduction_factor": self.reduction_factor,
                    "max_resource": self.max_resource}
        return {"type": self.type}


@dataclass(frozen=True)
class SweepRequest:
    name: str
    base: dict  #: the trials' own fields, as the trial kind's create takes them, without a name
    parameters: tuple[Parameter, ...]
    metric: str
    goal: str
    sampler: str
    pruner: Pruner
    parallel: int
    max_trials: int
    max_cost: Decimal | None
    max_gpu_hours: Decimal | None
    seed: int

    def example_params(self) -> dict:
        return {p.name: p.example() for p in self.parameters}

    def grid_size(self) -> int | None:
        """The grid's points (None: a parameter is not enumerable), worked out: none of them is listed."""
        sizes = [p.grid_count() for p in self.parameters]
        return None if None in sizes else math.prod(sizes)


def _finite(value: Any) -> bool:
    """Whether ``value`` is a number a float can hold (a browser reads every JSON number as one). A JSON integer is a
    Python int of any size: 10**400 is past a float's range, and math.isfinite raises OverflowError on it."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def _number(col: Collector, where: str, value: Any, integral: bool) -> float | int | None:
    # An int is finite however large; one past a float's range (10**400) is refused by the bound, before float().
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole and not _finite(value):
        col.add(where, "Must be a finite number." if not integral else "Must be a whole number.")
        return None
    if abs(value) > MAX_BOUND:
        col.add(where, f"Must be within ±{MAX_BOUND}.")
        return None
    if integral and not float(value).is_integer():
        col.add(where, "Must be a whole number.")
        return None
    return int(value) if integral else float(value)


def _parameter(col: Collector, name: str, data: Any) -> Parameter | None:
    where = f"parameters.{name}"
    if not PARAM_NAME.fullmatch(name) or name.upper().startswith("SLIPWAY_"):
        col.add("parameters", f"{name[:40]!r}: a parameter's name is lowercase letters, digits and '_', starting "
                              "with a letter, at most 32 characters, not starting with slipway_ (its env var is "
                              "the name upper-cased).")
        return None
    if not isinstance(data, Mapping):
        col.add(where, 'Must be an object such as {"type": "float", "min": 1e-5, "max": 1e-2, "log": true}.')
        return None
    kind = data.get("type")
    if kind not in PARAMETER_KEYS:
        col.add(where, "type: must be one of float, int, categorical.")
        return None
    unknown = sorted(str(k) for k in data if k not in PARAMETER_KEYS[kind])
    if unknown:
        col.add(where, f"Unknown field(s) {', '.join(unknown)[:200]}; a {kind} parameter has "
                       f"{', '.join(sorted(PARAMETER_KEYS[kind]))}.")
        return None
    if kind == "categorical":
        choices = data.get("choices")
        if not isinstance(choices, list) or not 1 <= len(choices) <= c.MAX_CHOICES:
            col.add(where, f"choices: must be a list of 1 to {c.MAX_CHOICES} values.")
            return None
        if not all(isinstance(v, (str, bool)) or _finite(v) for v in choices):
            col.add(where, "choices: each must be a string, a finite number or a boolean.")
            return None
        if any(isinstance(v, str) and (len(v) > 200 or "\x00" in v) for v in choices):
            col.add(where, "choices: a string choice is at most 200 characters, without NUL bytes.")
            return None
        if len({(type(v).__name__, v) for v in choices}) != len(choices):
            col.add(where, "choices: must not repeat a value.")
            return None
        return Parameter(name, kind, choices=tuple(choices))
    integral = kind == "int"
    before = len(col.errors.get(where, ()))
    low = _number(col, where, data.get("min"), integral) if "min" in data else col.add(where, "min: required.")
    high = _number(col, where, data.get("max"), integral) if "max" in data else col.add(where, "max: required.")
    log = data.get("log", False)
    if not isinstance(log, bool):
        col.add(where, "log: must be true or false.")
    step = data.get("step")
    if step is not None:
        step = _number(col, where, step, integral)
        if step is not None and step <= 0:
            col.add(where, "step: must be above zero.")
    if len(col.errors.get(where, ())) > before or low is None or high is None:
        return None
    if low >= high:
        col.add(where, "min must be below max.")
    elif log and low <= 0:
        col.add(where, "A log-scaled parameter's min must be above zero.")
    elif log and step is not None and (not integral or step != 1):
        col.add(where, "log and step do not go together (Optuna samples a log scale continuously; an int's step "
                       "must be 1).")
    elif step is not None and step > high - low:
        col.add(where, "step: must not exceed max - min.")
    elif step is not None and not integral and (high - low) / step > MAX_FLOAT_STEPS:
        # Optuna counts a float's steps in decimal arithmetic of 28 digits: past ~10**27 its distribution cannot
        # be built, and the sweep would be created and never launch a trial. No search needs 10**15 steps.
        col.add(where, f"step: at most 10**{round(math.log10(MAX_FLOAT_STEPS))} steps from min to max; leave step "
                       "out to sample continuously.")
    if len(col.errors.get(where, ())) > before:
        return None
    return Parameter(name, kind, low, high, bool(log), step)


def _parameters(col: Collector) -> tuple[Parameter, ...]:
    data = col.data.get("parameters")
    if not isinstance(data, Mapping) or not data:
        col.add("parameters", f"Must be an object of 1 to {c.MAX_PARAMETERS} parameters by name.")
        return ()
    if len(data) > c.MAX_PARAMETERS:
        col.add("parameters", f"At most {c.MAX_PARAMETERS} parameters.")
        return ()
    found = [_parameter(col, str(name), spec) for name, spec in data.items()]
    return tuple(p for p in found if p is not None)


def _objective(col: Collector) -> tuple[str, str]:
    data = col.data.get("objective")
    if not isinstance(data, Mapping):
        col.add("objective", 'Must be an object such as {"metric": "loss", "goal": "minimize"}.')
        return "", c.Goal.MINIMIZE
    unknown = sorted(str(k) for k in data if k not in ("metric", "goal"))
    if unknown:
        col.add("objective", f"Unknown field(s) {', '.join(unknown)[:200]}; it has metric and goal.")
    metric = data.get("metric")
    if not isinstance(metric, str) or not METRIC_NAME.fullmatch(metric):
        col.add("objective", "metric: the name of a metric the trials report (letters, digits, _ . / -, at most 64).")
        metric = ""
    goal = data.get("goal", c.Goal.MINIMIZE)
    if goal not in c.Goal.values:
        col.add("objective", "goal: must be minimize or maximize.")
        goal = c.Goal.MINIMIZE
    return metric, goal


def _pruner(col: Collector) -> Pruner:
    data = col.data.get("pruner")
    if data is None:
        return Pruner()
    if not isinstance(data, Mapping) or data.get("type") not in c.PrunerType.values:
        col.add("pruner", 'Must be an object whose type is none, median or asha (e.g. {"type": "asha", '
                          '"min_resource": 100, "reduction_factor": 3, "max_resource": 2700}).')
        return Pruner()
    kind = data["type"]
    unknown = sorted(str(k) for k in data if k not in PRUNER_KEYS[kind])
    if unknown:
        col.add("pruner", f"Unknown field(s) {', '.join(unknown)[:200]}; a {kind} pruner has "
                          f"{', '.join(sorted(PRUNER_KEYS[kind]))}.")
        return Pruner()
    inner = Collector(data)
    if kind == c.PrunerType.MEDIAN:
        startup = inner.integer("startup_trials", c.DEFAULT_STARTUP_TRIALS, 0, c.MAX_TRIALS)
        warmup = inner.integer("warmup_steps", c.DEFAULT_WARMUP_STEPS, 0, MAX_BOUND)
        pruner = Pruner(kind, startup_trials=startup or 0, warmup_steps=warmup or 0)
    elif kind == c.PrunerType.ASHA:
        minimum = inner.integer("min_resource", None, 1, MAX_BOUND)
        factor = inner.integer("reduction_factor", c.DEFAULT_REDUCTION_FACTOR, 2, 100)
        maximum = inner.integer("max_resource", None, 1, MAX_BOUND)
        if minimum is None and "min_resource" not in inner.errors:
            inner.add("min_resource", "Required: the steps every trial runs before the first judgement.")
        if maximum is None and "max_resource" not in inner.errors:
            inner.add("max_resource", "Required: the steps a trial runs when it is not pruned (the dry run's shape).")
        if minimum is not None and maximum is not None and minimum >= maximum:
            inner.add("min_resource", "Must be below max_resource.")
        pruner = Pruner(kind, min_resource=minimum or 1, reduction_factor=factor or c.DEFAULT_REDUCTION_FACTOR,
                        max_resource=maximum or 0)
    else:
        pruner = Pruner()
    for key, messages in inner.errors.items():
        for message in messages:
            col.add(f"pruner.{key}", message)
    return pruner


def _money(col: Collector, name: str) -> Decimal | None:
    value = col.data.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        col.add(name, "Must be a positive amount such as 250 or \"250.00\".")
        return None
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        col.add(name, "Must be a positive amount such as 250 or \"250.00\".")
        return None
    if not amount.is_finite() or amount <= 0 or amount > Decimal("1e12"):
        col.add(name, "Must be above zero and at most 1,000,000,000,000.")
        return None
    return amount.quantize(Decimal("0.01"))


def parse(data: Mapping[str, Any], base_key: str) -> SweepRequest:
    """Check a sweep request's fields (its ``team`` aside); ``base_key`` is the field of its trials' base (the
    trial kind's noun). Raises ``ValidationError`` with every field's errors."""
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = Collector(data)
    known = {"team", "name", base_key, "parameters", "objective", "sampler", "pruner", "parallel", "max_trials",
             "max_cost", "max_gpu_hours", "seed"}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        col.add("non_field_errors", f"Unknown field(s): {', '.join(unknown)[:200]}.")
    name = col.string("name", max_length=c.MAX_NAME_LENGTH)
    if name and not DNS1123_LABEL.fullmatch(name):
        col.add("name", "Use lowercase letters, digits and '-', starting and ending with a letter or digit (its "
                        "trials are named <name>-t001, …).")
    base = data.get(base_key)
    if not isinstance(base, Mapping):
        col.add(base_key, "Must be an object: the fields of each trial, as creating one takes them (no name: the "
                          "sweep names its trials).")
        base = {}
    elif "name" in base:
        col.add(f"{base_key}.name", "The sweep names its trials (<sweep>-t001, …): leave the name out.")
    parameters = _parameters(col)
    metric, goal = _objective(col)
    sampler = data.get("sampler", c.Sampler.TPE)
    if sampler not in c.Sampler.values:
        col.add("sampler", "Must be one of tpe, random, grid.")
        sampler = c.Sampler.TPE
    pruner = _pruner(col)
    parallel = col.integer("parallel", c.DEFAULT_PARALLEL, 1, c.MAX_PARALLEL)
    max_trials = col.integer("max_trials", None, 1, c.MAX_TRIALS)
    seed = col.integer("seed", 0, 0, 2 ** 31 - 1)
    max_cost, max_gpu_hours = _money(col, "max_cost"), _money(col, "max_gpu_hours")
    request = SweepRequest(name, dict(base), parameters, metric, goal, sampler, pruner, parallel or 1,
                           max_trials or c.DEFAULT_MAX_TRIALS, max_cost, max_gpu_hours, seed or 0)
    if sampler == c.Sampler.GRID and parameters and not col.errors:
        size = request.grid_size()
        if size is None:
            col.add("sampler", "The grid needs every parameter enumerable: categorical, int, or a float with a step.")
        elif size > c.MAX_GRID_POINTS:
            # Past 10**15 the count tells nothing more (and past 4,300 digits str() refuses it).
            shown = size if size <= 10 ** 15 else "over 10**15"
            col.add("sampler", f"The grid has {shown} points; at most {c.MAX_GRID_POINTS}.")
        elif max_trials is None or max_trials > size:
            request = replace(request, max_trials=size)  # the grid's points, each once
    if col.errors:
        raise ValidationError(col.errors)
    return request


@dataclass(frozen=True)
class Rung:
    steps: int  #: the objective's step at which this rung judges (the last: a trial's whole length)
    trials: int  #: trials that reach it if the halving goes as designed


def asha_rungs(trials: int, pruner: Pruner) -> list[Rung]:
    """ASHA's nominal shape: rung k judges at ``min_resource × η^k`` steps, and one in η of the trials that
    reach a rung goes on to the next (at least one); the last entry is a trial's whole length. Nominal: ASHA
    promotes as results arrive, so what happens depends on their order; this is the shape it aims at."""
    rungs, steps, reaching = [], pruner.min_resource, trials
    while steps < pruner.max_resource:
        rungs.append(Rung(steps, reaching))
        steps *= pruner.reduction_factor
        reaching = max(1, math.ceil(reaching / pruner.reduction_factor))
    rungs.append(Rung(pruner.max_resource, reaching))
    return rungs


def low_share(trials: int, pruner: Pruner) -> float:
    """The share of ``trials`` full trials' work a sweep does at the least its pruner lets it: ASHA's nominal
    shape (each trial stops at the rung it does not pass), the median's startup trials alone (the others may be
    stopped as soon as they are judged), everything without a pruner."""
    if trials <= 0:
        return 0.0
    if pruner.type == c.PrunerType.ASHA:
        rungs = asha_rungs(trials, pruner)
        steps = 0
        for index, rung in enumerate(rungs):
            going_on = rungs[index + 1].trials if index + 1 < len(rungs) else 0
            steps += (rung.trials - going_on) * rung.steps
        return steps / (trials * pruner.max_resource)
    if pruner.type == c.PrunerType.MEDIAN:
        return min(pruner.startup_trials, trials) / trials
    return 1.0
