"""Sweep trials' learning curves (sandbox.curves): a seeded family whose final loss is a bowl around
the optimum named by ``SLIPWAY_SIM_OPTIMUM``, whose pace depends on the parameters (so some curves
cross), and which a run with the knob prints through its metric lines."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.metric_lines import parse_lines
from sandbox import curves
from sandbox.checkpoints import Checkpointing
from sandbox.curves import FINAL_NOISE, INITIAL, STEP_NOISE, curve_for, curve_of, final_loss, knob_env
from sandbox.simulation import sim_settings, training_log

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
OPTIMUM = "LR=3e-4,BATCH=64,OPTIM=adamw"


def trial(seed: int = 0, **params: str) -> dict[str, str]:
    return {"SLIPWAY_SIM_OPTIMUM": OPTIMUM, "SLIPWAY_SIM_CURVE_SEED": str(seed), **params}


def noise_free(curve: curves.Curve, step: int) -> float:
    return curve.final + (curve.initial - curve.final) * (1 + step / curve.tau) ** -curve.alpha


LR = st.floats(min_value=1e-6, max_value=1.0)
SEED = st.integers(min_value=-(2**40), max_value=2**40)
STEPS = st.lists(st.integers(min_value=0, max_value=100_000), min_size=1, max_size=20)


def test_without_the_knob_there_is_no_curve_and_the_log_keeps_its_usual_loss():
    assert curve_for({"LR": "3e-4"}) is None and curve_for({"SLIPWAY_SIM_OPTIMUM": "  "}) is None
    assert knob_env({"LR": "3e-4"}) is None
    assert sim_settings({"LR": "3e-4"}, workload="w", kind="Job").curve is None
    plain = training_log("run-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=60), outcome="succeed",
                         finished=False, workers=1, tail=1000)
    assert plain == training_log("run-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=60),
                                 outcome="succeed", finished=False, workers=1, tail=1000, curve=None)
    # Today's curve, to the digit (0.35 + 2.4 e^(-t/600) + 0.02 sin(1.7 k + seed)).
    assert "2026-11-22T10:00:10Z INFO  step=20 loss=" in plain[4]
    assert "(default)" in plain[3]


@settings(max_examples=200, deadline=None)
@given(LR, st.sampled_from(["16", "32", "64", "128", "256"]), SEED, STEPS)
def test_the_same_env_gives_the_same_losses(lr, batch, seed, steps):
    env = trial(seed, LR=repr(lr), BATCH=batch, OPTIM="sgd")
    first, again = curve_for(env), curve_for(dict(env))
    assert first == again
    assert [first.loss_at(s) for s in steps] == [again.loss_at(s) for s in steps]


def test_a_number_is_one_trial_however_it_is_spelled_and_the_seed_draws_another_one():
    assert curve_for(trial(LR="3e-4", BATCH="64")) == curve_for(trial(LR="0.0003", BATCH="64.0"))
    assert curve_for(trial(LR="3e-4", OPTIM="AdamW ")) == curve_for(trial(LR="3e-4", OPTIM="adamw"))
    assert curve_for(trial(1, LR="3e-4")).final != curve_for(trial(2, LR="3e-4")).final


def test_the_final_loss_is_a_bowl_in_log_space_lowest_at_the_optimum():
    # Distance: squared decades from a positive optimum; a mismatch of a word costs MISMATCH.
    assert curve_for(trial(LR="3e-4", BATCH="64", OPTIM="adamw")).distance == 0
    assert curve_for(trial(LR="3e-2")).distance == pytest.approx(4.0)
    assert curve_for(trial(LR="3e-6")).distance == pytest.approx(4.0)
    assert curve_for(trial(LR="3e-3", BATCH="640", OPTIM="sgd")).distance == pytest.approx(1 + 1 + curves.MISMATCH)
    for seed in range(20):
        for side in (1, -1):
            finals = [curve_for(trial(seed, LR=repr(3e-4 * 10 ** (side * k)))).final for k in range(5)]
            assert finals == sorted(finals) and len(set(finals)) == 5  # grows with the distance, noise and all
    noiseless = [final_loss(d) for d in (0, 0.1, 1, 4, 9, 100)]
    assert noiseless == sorted(noiseless) and noiseless[0] == curves.FLOOR and noiseless[-1] < INITIAL


@settings(max_examples=200, deadline=None)
@given(SEED, st.floats(min_value=0.5, max_value=5.0), st.sampled_from([1, -1]))
def test_half_a_decade_off_is_worse_than_the_optimum_whatever_the_noise(seed, decades, side):
    best = curve_for(trial(seed, LR="3e-4"))
    off = curve_for(trial(seed, LR=repr(3e-4 * 10 ** (side * decades))))
    assert off.final > best.final
    assert off.loss_at(100_000) > best.loss_at(100_000)


@settings(max_examples=300, deadline=None)
@given(LR, st.sampled_from(["16", "64", "256", "0", "fast"]), SEED, STEPS)
def test_the_noise_is_bounded(lr, batch, seed, steps):
    curve = curve_for(trial(seed, LR=repr(lr), BATCH=batch))
    assert abs(curve.final / final_loss(curve.distance) - 1) <= FINAL_NOISE + 1e-12
    assert curves.FLOOR * (1 - FINAL_NOISE) <= curve.final <= INITIAL
    for step in steps:
        loss = curve.loss_at(step)
        assert abs(loss / noise_free(curve, step) - 1) <= STEP_NOISE + 1e-12
        assert 0 < loss <= INITIAL * (1 + STEP_NOISE)


def test_a_larger_learning_rate_is_faster_early_and_some_curves_cross():
    fast, slow = curve_for(trial(LR="9e-3")), curve_for(trial(LR="3e-5"))
    assert fast.tau < slow.tau and fast.final > slow.final
    for seed in range(30):  # 30x the optimum leads at step 100, a tenth of it wins in the end
        fast, slow = curve_for(trial(seed, LR="9e-3")), curve_for(trial(seed, LR="3e-5"))
        assert fast.loss_at(100) < slow.loss_at(100) and fast.loss_at(3000) > slow.loss_at(3000)


def test_curves_cross_sometimes_but_mostly_keep_their_order():
    """Of a random search's trials, a few pairs swap between an early rung and the end: early stopping
    can be wrong, but mostly is not."""
    rnd = random.Random(7)
    points = []
    for _ in range(120):
        curve = curve_for({"SLIPWAY_SIM_OPTIMUM": "LR=3e-4,BATCH=64,WARMUP=500", "LR": repr(10 ** rnd.uniform(-5, -1)),
                           "BATCH": str(rnd.choice([16, 32, 64, 128, 256])), "WARMUP": str(rnd.randint(0, 2000))})
        points.append((curve.loss_at(100), curve.loss_at(3000)))
    pairs = [(a, b) for i, a in enumerate(points) for b in points[i + 1:]]
    swapped = sum((a[0] - b[0]) * (a[1] - b[1]) < 0 for a, b in pairs) / len(pairs)
    assert 0.03 < swapped < 0.25


@pytest.mark.parametrize(("env", "distance"), [
    ({"SLIPWAY_SIM_OPTIMUM": "LR", "LR": "1"}, 0.0),  # no pair: the optimum's curve
    ({"SLIPWAY_SIM_OPTIMUM": "=3,,LR=3e-4,  ", "LR": "3e-3"}, 1.0),  # malformed pairs skipped
    ({"SLIPWAY_SIM_OPTIMUM": "LR=1,LR=3e-4", "LR": "3e-4"}, 0.0),  # the last pair of a name wins
    (trial(BATCH="64"), 0.0),  # LR missing: at its optimum
    (trial(LR="fast"), curves.MISMATCH),
    (trial(LR="nan"), curves.MISMATCH),
    (trial(LR="1e400"), curves.MISMATCH),
    (trial(LR="-1"), curves.MISMATCH),
    (trial(LR="0"), curves.MISMATCH),
    (trial(OPTIM="sgd"), curves.MISMATCH),
    ({"SLIPWAY_SIM_OPTIMUM": "WARMUP=0", "WARMUP": "0.0"}, 0.0),  # numbers equal, not positive
    ({"SLIPWAY_SIM_OPTIMUM": "WARMUP=0", "WARMUP": "500"}, curves.MISMATCH),
    ({"SLIPWAY_SIM_OPTIMUM": "LR=abc", "LR": "1e-3"}, curves.MISMATCH),
    ({"SLIPWAY_SIM_OPTIMUM": "LR=1e-300", "LR": "1e300"}, curves.MAX_DECADES**2),  # held to MAX_DECADES
])
def test_malformed_knobs_fall_back_and_never_raise(env, distance):
    curve = curve_for(env)
    assert curve is not None and curve.distance == pytest.approx(distance)
    assert all(math.isfinite(curve.loss_at(s)) for s in (-5, 0, 20, 10**9))


def test_a_seed_that_is_not_an_integer_is_zero():
    assert curve_for(trial(LR="1e-3") | {"SLIPWAY_SIM_CURVE_SEED": "many"}) == curve_for(trial(0, LR="1e-3"))
    assert curve_for({k: v for k, v in trial(LR="1e-3").items() if k != "SLIPWAY_SIM_CURVE_SEED"}) == curve_for(
        trial(0, LR="1e-3"))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["SLIPWAY_SIM_OPTIMUM", "SLIPWAY_SIM_CURVE_SEED", "LR", "BATCH", "X"]),
                       st.text(max_size=40)), STEPS)
def test_any_env_gives_a_curve_or_none_and_finite_losses(env, steps):
    curve = curve_for(env)
    assert (curve is None) == (not env.get("SLIPWAY_SIM_OPTIMUM", "").strip())
    assert (knob_env(env) is None) == (curve is None)
    if curve is not None:
        assert curve_for(knob_env(env)) == curve  # what a plan keeps draws the same curve
        assert all(0 < curve.loss_at(s) <= INITIAL * (1 + STEP_NOISE) for s in steps)


def test_the_plan_keeps_the_knobs_and_the_parameters_they_name():
    env = trial(3, LR="1e-3", BATCH="32", OTHER="x", SLIPWAY_SIM_DURATION="5m")
    kept = sim_settings(env, workload="w", kind="Job").curve
    assert kept == {"SLIPWAY_SIM_OPTIMUM": OPTIMUM, "SLIPWAY_SIM_CURVE_SEED": "3", "LR": "1e-3", "BATCH": "32"}
    assert sim_settings(env, workload="w", kind="Deployment").curve is None  # servers print no loss


def _losses(lines: list[str]) -> dict[int, float]:
    return {p.step: p.value for p in parse_lines(lines).points if p.name == "loss"}


def test_a_run_with_the_knob_prints_its_curves_loss_and_its_learning_rate():
    env = trial(5, LR="1e-3", BATCH="128", OPTIM="adamw")
    curve = curve_for(env)
    lines = training_log("trial-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=300),
                         outcome="succeed", finished=True, workers=1, tail=10_000, planned=300, curve=knob_env(env))
    losses = _losses(lines)
    assert sorted(losses) == list(range(20, 601, 20))
    assert all(value == round(curve.loss_at(step), 4) for step, value in losses.items())
    assert "2026-11-22T10:00:00Z INFO  optimizer AdamW, learning rate 0.001 (LR)" in lines
    assert all(" lr=1.0e-03 " in line for line in lines if " loss=" in line)
    # Arguments naming a learning rate win; a knob without an LR parameter keeps the default.
    with_args = training_log("trial-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=30),
                             outcome="succeed", finished=False, workers=1, tail=100, args=("--lr", "5e-5"),
                             curve=knob_env(env))
    assert all(" lr=5.0e-05 " in line for line in with_args if " loss=" in line)
    no_lr = knob_env({"SLIPWAY_SIM_OPTIMUM": "BATCH=64", "BATCH": "64"})
    assert "learning rate 0.0003 (default)" in training_log(
        "trial-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=30), outcome="succeed",
        finished=False, workers=1, tail=100, curve=no_lr)[3]


def test_a_resumed_attempt_goes_on_along_the_curve_from_its_step():
    env = trial(1, LR="2e-4")
    curve = curve_for(env)
    ckpt = Checkpointing(every=60, resume=400)  # 400 steps of earlier attempts: 200 s at a line every 10 s
    lines = training_log("trial-2-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=100),
                         outcome="succeed", finished=False, workers=1, tail=10_000, ckpt=ckpt, curve=knob_env(env))
    losses = _losses(lines)
    assert sorted(losses) == list(range(420, 601, 20))
    assert all(value == round(curve.loss_at(step), 4) for step, value in losses.items())
    # The same steps as an attempt that never stopped: the curve does not restart.
    whole = _losses(training_log("trial-2-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=300),
                                 outcome="succeed", finished=False, workers=1, tail=10_000, curve=knob_env(env)))
    assert all(whole[step] == value for step, value in losses.items())


def test_a_pure_function_of_optimum_values_and_seed():
    optimum = curves.parse_optimum(" LR = 3e-4 , BATCH=64 ")
    assert optimum == {"LR": "3e-4", "BATCH": "64"}
    env = {"SLIPWAY_SIM_OPTIMUM": "LR=3e-4,BATCH=64", "LR": "3e-4", "BATCH": "64", "SLIPWAY_SIM_CURVE_SEED": "4"}
    assert curve_of(optimum, {"LR": "3e-4", "BATCH": "64"}, 4) == curve_for(env)
    assert curve_of(optimum, {"LR": "3e-4"}, 0).distance == 0
