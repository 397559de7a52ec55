"""A sweep's request checked field by field, its search space as Optuna's distributions, and its shape (pure)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import strategies as st

from sweeps import spec
from sweeps.constants import MAX_GRID_POINTS, PrunerType

BASE = {"image": "ghcr.io/acme/train:1", "command": ["python", "train.py"], "flavor": "a100-80gb",
        "max_runtime_minutes": 30}


def request(**changes) -> dict:
    data = {"name": "lr-search", "trial": dict(BASE),
            "parameters": {"lr": {"type": "float", "min": 1e-5, "max": 1e-1, "log": True},
                           "bs": {"type": "categorical", "choices": [16, 32, 64]}},
            "objective": {"metric": "loss", "goal": "minimize"},
            "pruner": {"type": "asha", "min_resource": 100, "reduction_factor": 3, "max_resource": 2700},
            "parallel": 3, "max_trials": 27, "max_cost": "250"}
    data.update(changes)
    return data


def int_range(low: int, high: int, step: int | None = None) -> dict:
    return {"type": "int", "min": low, "max": high, **({"step": step} if step else {})}


def errors(data: dict) -> dict:
    with pytest.raises(ValidationError) as caught:
        spec.parse(data, "trial")
    return caught.value.message_dict


def test_a_good_request_reads_whole():
    parsed = spec.parse(request(), "trial")
    assert parsed.name == "lr-search" and parsed.base == BASE and parsed.parallel == 3
    assert [p.name for p in parsed.parameters] == ["lr", "bs"]
    assert parsed.max_cost == Decimal("250.00") and parsed.max_gpu_hours is None
    lr = parsed.parameters[0].distribution()
    assert (lr.low, lr.high, lr.log) == (1e-5, 1e-1, True)
    assert parsed.parameters[1].distribution().choices == (16, 32, 64)
    assert parsed.pruner == spec.Pruner(PrunerType.ASHA, min_resource=100, reduction_factor=3, max_resource=2700)


def test_every_bad_field_is_named_at_once():
    found = errors(request(name="Bad_Name", parallel=0, sampler="bayes",
                           parameters={"lr": {"type": "float", "min": 1, "max": 0.1},
                                       "opt": {"type": "categorical", "choices": ["a", "a"]},
                                       "x": {"type": "float", "min": -1, "max": 1, "log": True}},
                           objective={"metric": "loss;drop", "goal": "down"},
                           pruner={"type": "asha", "min_resource": 300, "max_resource": 100},
                           max_cost="-3"))
    assert set(found) == {"name", "parallel", "sampler", "parameters.lr", "parameters.opt", "parameters.x",
                          "objective", "pruner.min_resource", "max_cost"}
    assert found["parameters.lr"] == ["min must be below max."]
    assert "log-scaled" in found["parameters.x"][0]


def test_the_base_is_named_by_the_trial_kind_and_has_no_name_of_its_own():
    assert "trial" in errors(request(trial="python train.py"))
    assert errors(request(trial={**BASE, "name": "x"})) == {"trial.name": [
        "The sweep names its trials (<sweep>-t001, …): leave the name out."]}
    # Secret env is the trial kind's to check (the sweep's dry run renders a trial); the sweep's own fields allow it.
    parsed = spec.parse(request(trial={**BASE, "secret_env": {"WANDB_KEY": "x"}}), "trial")
    assert parsed.base["secret_env"] == {"WANDB_KEY": "x"}


def test_a_parameter_name_becomes_an_env_var_and_may_not_be_slipways():
    assert "parameters" in errors(request(parameters={"slipway_lr": {"type": "int", "min": 1, "max": 3}}))
    assert "parameters" in errors(request(parameters={"LR": {"type": "int", "min": 1, "max": 3}}))


def test_optuna_refuses_log_with_a_step_and_so_do_we():
    found = errors(request(parameters={"lr": {"type": "float", "min": 1e-4, "max": 1, "log": True, "step": 0.1}}))
    assert "log and step" in found["parameters.lr"][0]
    ok = spec.parse(request(parameters={"layers": {"type": "int", "min": 2, "max": 64, "log": True}}), "trial")
    assert ok.parameters[0].distribution().log


def test_a_json_integer_past_a_floats_range_is_a_field_error():
    # JSON integers have no size limit: 10**400 reaches the parser as a Python int no float holds.
    huge = 10 ** 400
    bound = f"Must be within ±{spec.MAX_BOUND}."
    assert errors(request(parameters={"n": {"type": "int", "min": 0, "max": huge}})) == {"parameters.n": [bound]}
    assert errors(request(parameters={"x": {"type": "float", "min": -huge, "max": 1}})) == {"parameters.x": [bound]}
    assert errors(request(parameters={"x": {"type": "float", "min": 0, "max": 1, "step": huge}})) == {
        "parameters.x": [bound]}
    assert errors(request(parameters={"bs": {"type": "categorical", "choices": [16, huge]}})) == {
        "parameters.bs": ["choices: each must be a string, a finite number or a boolean."]}
    # An int a float does hold is a choice as before.
    wide = spec.parse(request(parameters={"bs": {"type": "categorical", "choices": [16, 2 ** 64]}}), "trial")
    assert wide.parameters[0].choices == (16, 2 ** 64)


def test_the_grid_needs_an_enumerable_space_and_runs_each_point_once():
    assert "sampler" in errors(request(sampler="grid"))  # lr is a float without a step
    grid = spec.parse(request(sampler="grid", max_trials=None, parameters={
        "lr": {"type": "float", "min": 0.1, "max": 0.3, "step": 0.1}, "bs": {"type": "categorical", "choices": [1, 2]}}),
        "trial")
    assert grid.parameters[0].grid_values() == [0.1, 0.2, 0.3] and grid.max_trials == 6


def test_a_grid_is_counted_not_listed_and_a_huge_one_refused():
    def grid(**parameters) -> dict:
        return errors(request(sampler="grid", max_trials=None, parameters=parameters))

    # Listing these took every point: 2**53 ints at once (MemoryError), 10**15 floats one by one (the worker's memory).
    huge = {"sampler": [f"The grid has over 10**15 points; at most {MAX_GRID_POINTS}."]}
    assert grid(n=int_range(0, 2 ** 53)) == huge
    assert grid(x={"type": "float", "min": 0, "max": 1e15, "step": 1}) == huge
    # Sixteen ranges of 2**53 ints make a count past str()'s 4,300 digits: said as "over", never printed.
    assert grid(**{f"p{k}": int_range(0, 2 ** 53) for k in range(16)}) == huge
    # Under 10**15 the count is said: the product of each parameter's points.
    assert grid(a=int_range(0, 99), b=int_range(1, 101, 2), c={"type": "categorical", "choices": [1, 2]}) == {
        "sampler": [f"The grid has {100 * 51 * 2} points; at most {MAX_GRID_POINTS}."]}
    edge = spec.parse(request(sampler="grid", max_trials=None, parameters={"a": int_range(1, MAX_GRID_POINTS)}),
                      "trial")
    assert edge.max_trials == MAX_GRID_POINTS and len(edge.parameters[0].grid_values()) == MAX_GRID_POINTS


@given(low=st.integers(-50, 50), span=st.integers(1, 300), step=st.integers(1, 40),
       scale=st.sampled_from([1, 0.1, 0.25, 1e-3]))
def test_a_parameters_grid_count_is_how_many_values_it_lists(low, span, step, scale):
    step = min(step, span)
    ints = spec.Parameter("n", "int", low, low + span, step=step)
    assert ints.grid_count() == len(ints.grid_values()) == span // step + 1
    floats = spec.Parameter("x", "float", low * scale, (low + span) * scale, step=step * scale)
    values = floats.grid_values()
    assert floats.grid_count() == len(values) == span // step + 1  # float rounding neither adds a point nor drops one
    # Listed rounded to 12 digits: from min, by step, the last within max and one step more past it.
    assert values[0] == pytest.approx(floats.low) and values[-1] <= floats.high + 1e-9 < values[-1] + floats.step


def test_asha_rungs_follow_the_halving():
    pruner = spec.Pruner(PrunerType.ASHA, min_resource=1, reduction_factor=3, max_resource=27)
    assert [(r.steps, r.trials) for r in spec.asha_rungs(27, pruner)] == [(1, 27), (3, 9), (9, 3), (27, 1)]
    # 18 trials stop at 1 step, 6 at 3, 2 at 9, one runs all 27: (18 + 18 + 18 + 27) / (27 × 27) of the work.
    assert spec.low_share(27, pruner) == pytest.approx(81 / 729)
    assert spec.low_share(10, spec.Pruner(PrunerType.MEDIAN, startup_trials=4)) == pytest.approx(0.4)
    assert spec.low_share(10, spec.Pruner()) == 1.0


@given(trials=st.integers(1, 999), minimum=st.integers(1, 50), factor=st.integers(2, 6), extra=st.integers(1, 5000))
def test_the_nominal_shape_is_a_share_of_the_work_and_ends_with_a_whole_trial(trials, minimum, factor, extra):
    pruner = spec.Pruner(PrunerType.ASHA, min_resource=minimum, reduction_factor=factor, max_resource=minimum + extra)
    rungs = spec.asha_rungs(trials, pruner)
    assert rungs[0] == spec.Rung(minimum, trials) and rungs[-1].steps == pruner.max_resource
    assert all(a.trials >= b.trials >= 1 and a.steps < b.steps for a, b in itertools.pairwise(rungs))
    share = spec.low_share(trials, pruner)
    assert 0 < share <= 1 and not math.isnan(share)


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_a_float_step_finer_than_any_search_needs_is_a_field_error(sampler):
    # Optuna could not build the distribution of 10**35 steps (decimal.InvalidOperation): the sweep was created and
    # never launched a trial. 10**15 steps is the most a step may cut a range into; it builds.
    fine = {"type": "float", "min": 0, "max": 1e15, "step": 1e-20}
    assert errors(request(sampler=sampler, max_trials=None if sampler == "grid" else 10, parameters={"x": fine})) == {
        "parameters.x": ["step: at most 10**15 steps from min to max; leave step out to sample continuously."]}
    assert "parameters.x" in errors(request(parameters={"x": {"type": "float", "min": 0, "max": 1, "step": 5e-324}}))
    most = spec.parse(request(parameters={"x": {"type": "float", "min": 0, "max": 1, "step": 1e-15}}), "trial")
    assert most.parameters[0].distribution().step == 1e-15
