"""bench/sweeps.py (issue 50): its replay of what the driver told a study on a pure Optuna study, its recorders on the
real storage, and its sweep files — the bench's own logic, not its figures (tests/test_benchmarks.py runs it whole).

The replay's sequences here come from :func:`drive`: a driver's acts on a pure study — trials of the sandbox's curve
family, a few at a time and out of step, each act reporting every active trial's new values, then asking the
pruner, a pruned trial reporting on through its grace before it is told ``PRUNED`` — so the answers recorded are
the pruner's own, and a replay of them must agree with every one.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.curves import curve_of

ROOT = Path(__file__).resolve().parent.parent.parent
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _load():
    spec = importlib.util.spec_from_file_location("bench_sweeps", ROOT / "bench" / "sweeps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


bench = _load()
Event = bench.Event
PRUNERS = {"asha": bench.pruner_field("asha", 600), "median": bench.pruner_field("median", 600)}


def drive(pruner: dict, seed: int, trials: int = 15, parallel: int = 3, steps: int = 600,
          per_act: int = 60) -> list[Event]:
    """The sequence a driver tells a pure study (module docstring), with the pruner's answers as it gave them."""
    rng = random.Random(seed)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), pruner=bench.pure_pruner(pruner),
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    optimum = {"LR": "3e-4", "BATCH": "64"}
    events: list[Event] = []
    active: dict[int, dict] = {}  # number → its handle, curve, progress, and the acts of grace left once pruned
    launched = 0
    while launched < trials or active:
        while launched < trials and len(active) < parallel:
            handle = study.ask()
            values = {"LR": f"{10 ** rng.uniform(-5, -1):.3g}", "BATCH": str(rng.choice([16, 32, 64, 128, 256]))}
            # Out of step: each starts a little into the act, as trials admitted and started at different times.
            active[handle.number] = {"handle": handle, "curve": curve_of(optimum, values, seed),
                                     "at": -rng.randrange(0, per_act, 20), "last": 0, "grace": None}
            events.append(Event("ask", handle.number))
            launched += 1
        for number, trial in list(active.items()):
            handle, told = trial["handle"], []
            trial["at"] = min(trial["at"] + per_act, steps)
            for step in range(trial["last"] + 20, trial["at"] + 1, 20):
                value = trial["curve"].loss_at(step)
                handle.report(value, step)
                events.append(Event("report", number, step=step, value=value))
                told.append(step)
                trial["last"] = step
            done = trial["at"] >= steps
            if trial["grace"] is not None:  # pruned: it reports on until its pods are gone
                trial["grace"] -= 1
                if trial["grace"] < 0 or done:
                    study.tell(handle, state=optuna.trial.TrialState.PRUNED)
                    events.append(Event("tell", number, state="PRUNED",
                                        value=study.trials[number].value))
                    del active[number]
            elif done:
                value = trial["curve"].loss_at(trial["last"])
                study.tell(handle, value)
                events.append(Event("tell", number, state="COMPLETE", value=value))
                del active[number]
            elif told:
                pruned = handle.should_prune()
                events.append(Event("judge", number, step=told[-1], pruned=pruned))
                if pruned:
                    trial["grace"] = 1
    return events


def flipped(events: list[Event], index: int) -> list[Event]:
    """``events`` with the ``index``-th judge's answer the other way (a planted disagreement)."""
    judges = [i for i, event in enumerate(events) if event.kind == "judge"]
    at = judges[index % len(judges)]
    changed = list(events)
    changed[at] = Event("judge", events[at].trial, step=events[at].step, pruned=not events[at].pruned)
    return changed


@pytest.mark.parametrize("mode", ["asha", "median"])
def test_the_sequence_a_pruner_answered_replays_with_no_disagreement(mode):
    events = drive(PRUNERS[mode], seed=3)
    replay = bench.replay(events, PRUNERS[mode])
    stops = bench.first_stops(events)
    assert any(step is not None for step in stops.values()), "not vacuous: some trials were told to stop"
    assert any(step is None for step in stops.values())
    assert replay.disagreements == [] and replay.differing_answers == 0 and replay.ends_differing == []
    assert replay.decisions == sum(event.kind == "judge" for event in events)
    assert replay.driver == replay.pure == stops


def test_a_planted_disagreement_is_counted_on_its_trial():
    events = drive(PRUNERS["asha"], seed=3)
    first_stop = next(i for i, event in enumerate(events) if event.kind == "judge" and event.pruned)
    index = [i for i, event in enumerate(events) if event.kind == "judge"].index(first_stop)
    trial = events[first_stop].trial
    replay = bench.replay(flipped(events, index), PRUNERS["asha"])
    # The driver "went on" where the pruner said stop: that trial, and only it, disagrees.
    assert replay.disagreements == [trial] and replay.differing_answers == 1
    assert replay.pure[trial] == events[first_stop].step and replay.driver[trial] != events[first_stop].step


def test_a_pruner_other_than_the_sweeps_disagrees():
    """The pure study's pruner is built from the sweep's field: told another rung, the replay sees the difference."""
    events = drive(PRUNERS["asha"], seed=3)
    other = {**PRUNERS["asha"], "min_resource": PRUNERS["asha"]["min_resource"] * 3}
    assert bench.replay(events, other).disagreements


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), mode=st.sampled_from(["asha", "median"]), parallel=st.integers(1, 5),
       per_act=st.sampled_from([20, 40, 100]), flip=st.integers(0, 10**6))
def test_any_answered_sequence_replays_exactly_and_any_planted_flip_is_one_disagreement(
        seed, mode, parallel, per_act, flip):
    events = drive(PRUNERS[mode], seed=seed, parallel=parallel, per_act=per_act)
    replay = bench.replay(events, PRUNERS[mode])
    assert replay.disagreements == [] and replay.differing_answers == 0 and replay.ends_differing == []
    judges = [event for event in events if event.kind == "judge"]
    if not judges:  # median before its startup trials completed: nothing judged
        return
    planted = flipped(events, flip)
    target = judges[flip % len(judges)].trial
    replay = bench.replay(planted, PRUNERS[mode])
    assert replay.disagreements == [target] and replay.differing_answers == 1


def test_the_recorders_events_are_one_studys_in_order():
    recorder = bench.Recorder([("ask", 11), ("ask", 99), ("report", 11, 20, 1.5), ("judge", 11, 20, True),
                               ("report", 99, 20, 2.0), ("tell", 11, "PRUNED", [1.5]), ("tell", 99, "FAIL", None)])
    assert recorder.events({11: 0}) == [Event("ask", 0), Event("report", 0, step=20, value=1.5),
                                        Event("judge", 0, step=20, pruned=True),
                                        Event("tell", 0, state="PRUNED", value=1.5)]
    assert recorder.events({99: 4})[-1] == Event("tell", 4, state="FAIL", value=None)


def test_the_three_sweeps_differ_in_their_pruner_alone():
    args = bench.parse(["--trials", "200", "--seed", "50"])
    files = {mode: bench.sweep_file("s", mode, args) for mode in bench.MODES}
    pruners = {mode: files[mode].pop("pruner") for mode in bench.MODES}
    assert files["asha"] == files["median"] == files["none"]
    assert files["none"]["sampler"] == "random" and files["none"]["seed"] == 50
    assert files["none"]["run"]["env"]["SLIPWAY_SIM_CURVE_SEED"] == "50"
    assert pruners["asha"] == {"type": "asha", "min_resource": 100, "reduction_factor": 3, "max_resource": 3000}
    assert pruners["median"] == {"type": "median"} and pruners["none"] == {"type": "none"}
    assert bench.min_resource(600) == 20 and bench.min_resource(10_000) == 300


def test_a_trials_value_is_its_curve_at_the_printed_precision():
    params = {"lr": 3e-4, "batch": 64, "warmup": 500}
    value = bench.curve_value(params, seed=50, step=3000)
    curve = curve_of({"LR": "3e-4", "BATCH": "64", "WARMUP": "500"}, {"LR": "0.0003", "BATCH": "64", "WARMUP": "500"}, 50)
    assert value == round(curve.loss_at(3000), 4)
    # At the optimum the curve ends near its floor (0.35 ± 3 %) plus what 3,000 steps leave of the power law: 2.4 / 11.
    assert value == pytest.approx(0.35 + 2.4 / 11, rel=0.04)


# -- on the database ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["asha", "median"])
def test_the_recorders_note_what_the_real_storage_and_pruner_did_and_it_replays(mode):
    """A study on the recording storage (``DjangoStorage``) driven as the driver drives one — a fresh
    ``Trial(study, id)`` handle each act — records every report, answer and end; the replay agrees with each."""
    recorder = bench.Recorder()
    storage, wrapper = bench.recording_classes(recorder)
    study = optuna.create_study(storage=storage(), pruner=wrapper(bench.pure_pruner(PRUNERS[mode])),
                                sampler=optuna.samplers.RandomSampler(seed=1))
    script = drive(PRUNERS[mode], seed=5, trials=10, parallel=3)
    answers = []
    ids: dict[int, int] = {}
    for event in script:  # the same values, on the real storage, each act's handle made afresh
        if event.kind == "ask":
            ids[event.trial] = study.ask()._trial_id
        elif event.kind == "report":
            optuna.trial.Trial(study, ids[event.trial]).report(event.value, event.step)
        elif event.kind == "judge":
            answers.append(optuna.trial.Trial(study, ids[event.trial]).should_prune())
        elif event.state == "COMPLETE":
            study.tell(event.trial, event.value)
        else:
            study.tell(event.trial, state=optuna.trial.TrialState[event.state])
    events = recorder.events({trial_id: number for number, trial_id in ids.items()})
    assert [event for event in events if event.kind != "judge"] == [e for e in script if e.kind != "judge"]
    assert [event.pruned for event in events if event.kind == "judge"] == answers
    replay = bench.replay(events, PRUNERS[mode])
    assert replay.disagreements == [] and replay.differing_answers == 0 and replay.ends_differing == []


@pytest.mark.django_db
def test_recording_wraps_the_studies_the_driver_loads_and_leaves_the_driver_as_it_was(flavors, member, team):
    from decimal import Decimal

    from quotas.demo import seed_team_quotas
    from sweeps import driver, services
    from sweeps.storage import DjangoStorage

    seed_team_quotas(team, {bench.FLAVOR: 16}, Decimal("100000"))
    body = bench.sweep_file("asha", "asha", bench.parse(["--trials", "12"]))
    shape = services.preview(member, team, body)  # the bench's file is a sweep the service takes
    assert [rung.steps for rung in shape.rungs] == [100, 300, 900, 2700, 3000]
    sweep = services.create(member, team, body)
    original = driver.load_study
    with bench.recording(bench.Recorder()):
        study = driver.load_study(sweep)
        assert type(study._storage).__name__ == "RecordingStorage" and isinstance(study._storage, DjangoStorage)
        assert isinstance(study.pruner.pruner, optuna.pruners.SuccessiveHalvingPruner)
    assert driver.load_study is original and driver.DjangoStorage is DjangoStorage
