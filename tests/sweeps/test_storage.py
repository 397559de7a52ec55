"""sweeps.storage.DjangoStorage: Optuna's own storage conformance tests, a real study end to end, what JSON
cannot hold, the caller's transaction, and (on PostgreSQL) concurrent asks and starts."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import optuna
import pytest
from django.db import connection, transaction
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.pruners import MedianPruner
from optuna.samplers import TPESampler
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.testing.pytest_storages import StorageTestCase
from optuna.trial import TrialState, create_trial

from sweeps.models import StudyTrial, StudyTrialState
from sweeps.storage import DjangoStorage

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.django_db
class TestOptunaConformance(StorageTestCase):
    """Every test of Optuna's storage test case (optuna.testing.pytest_storages), on this storage."""

    @pytest.fixture
    def storage(self) -> DjangoStorage:
        return DjangoStorage()


def test_the_state_column_has_optunas_numbers():
    assert {state.name: state.value for state in StudyTrialState} == {s.name: s.value for s in TrialState}


# -- A real study --


def objective(trial: optuna.Trial) -> float:
    """A quadratic with its minimum 0 at x = 2, "trained" over 5 steps that report their loss."""
    x = trial.suggest_float("x", -10, 10)
    kind = trial.suggest_categorical("kind", ["plain", "shifted"])
    loss = (x - 2) ** 2 + (0.0 if kind == "plain" else 1.0)
    for step in range(5):
        trial.report(loss + (5 - step), step)
        if trial.should_prune():
            raise optuna.TrialPruned
    return loss


def run_study(storage) -> optuna.Study:
    study = optuna.create_study(storage=storage, sampler=TPESampler(seed=9, n_startup_trials=5),
                                pruner=MedianPruner(n_startup_trials=3, n_warmup_steps=1))
    study.optimize(objective, n_trials=15)
    return study


@pytest.mark.django_db
def test_a_study_optimizes_a_quadratic_end_to_end_as_it_does_in_memory():
    study = run_study(DjangoStorage())

    assert len(study.trials) == 15
    assert [t.number for t in study.trials] == list(range(15))
    assert study.best_value < 0.1 and study.best_params["kind"] == "plain"  # 1e-4 with this seed
    assert abs(study.best_params["x"] - 2) < 0.3
    states = {t.state for t in study.trials}
    assert states == {TrialState.COMPLETE, TrialState.PRUNED}, "the pruner pruned some, not all"
    pruned = next(t for t in study.trials if t.state == TrialState.PRUNED)
    last_step = max(pruned.intermediate_values)
    assert pruned.value == pruned.intermediate_values[last_step]  # Optuna keeps a pruned trial's last report
    assert pruned.datetime_complete is not None
    # The same seeded sampler and pruner over Optuna's in-memory storage decide the same trials: the
    # storage gives them the same history to decide on.
    in_memory = run_study(InMemoryStorage())
    assert [(t.params, t.state, t.values, t.intermediate_values) for t in study.trials] == [
        (t.params, t.state, t.values, t.intermediate_values) for t in in_memory.trials]


@pytest.mark.django_db
def test_a_fresh_storage_loads_the_study_with_its_trials():
    study = optuna.create_study(study_name="lr-search", storage=DjangoStorage(), direction="maximize")
    study.set_user_attr("team", "vision")
    study.optimize(lambda trial: -trial.suggest_float("lr", 1e-5, 1e-1, log=True), n_trials=3)

    loaded = optuna.load_study(study_name="lr-search", storage=DjangoStorage())
    assert loaded.trials == study.trials
    assert loaded.direction == StudyDirection.MAXIMIZE
    assert loaded.user_attrs == {"team": "vision"}
    assert loaded.best_trial == study.best_trial


@pytest.mark.django_db
def test_nan_and_infinities_round_trip():
    storage = DjangoStorage()
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"limit": float("inf")})  # a WAITING trial, its parameters in a system attribute
    trial = study.ask()
    trial.suggest_categorical("limit", [float("inf"), 1.0, float("nan")])
    trial.report(float("nan"), 0)
    trial.report(float("-inf"), 1)
    trial.set_user_attr("curve", {"points": [1.5, float("-inf"), float("nan")], "note": "inf"})
    study.tell(trial, float("inf"))
    pair = optuna.create_study(storage=storage, directions=["minimize", "maximize"])
    both = pair.ask()
    pair.tell(both, [float("-inf"), float("inf")])

    got = storage.get_trial(trial._trial_id)
    assert got.value == math.inf
    assert math.isnan(got.intermediate_values[0]) and got.intermediate_values[1] == -math.inf
    assert got.params["limit"] == math.inf
    points = got.user_attrs["curve"]["points"]
    assert points[:2] == [1.5, -math.inf] and math.isnan(points[2])
    assert got.user_attrs["curve"]["note"] == "inf"  # a string stays a string
    assert storage.get_trial(both._trial_id).values == [-math.inf, math.inf]
    row = StudyTrial.objects.get(pk=trial._trial_id)
    assert row.values == ["inf"] and row.intermediate_values == {"0": "nan", "1": "-inf"}


@pytest.mark.django_db
def test_get_all_trials_is_one_query(django_assert_num_queries):
    storage = DjangoStorage()
    study = optuna.create_study(storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=4)
    with django_assert_num_queries(1):
        assert len(storage.get_all_trials(study._study_id)) == 4
    with django_assert_num_queries(2):  # none in that state: is it an empty study or none at all?
        assert storage.get_all_trials(study._study_id, states=(TrialState.WAITING,)) == []


@pytest.mark.django_db
def test_a_study_name_longer_than_the_column_is_refused():
    with pytest.raises(ValueError, match="at most 300 characters"):
        DjangoStorage().create_new_study([StudyDirection.MINIMIZE], "x" * 301)


# -- The caller's transaction --


class Abandoned(Exception):
    pass


@pytest.mark.django_db
def test_a_trial_asked_for_in_a_rolled_back_transaction_leaves_no_trial():
    study = optuna.create_study(storage=DjangoStorage())
    with pytest.raises(Abandoned), transaction.atomic():
        trial = study.ask({"x": FloatDistribution(0, 1)})
        assert trial.number == 0
        raise Abandoned  # as the run created for it failing would
    assert study.trials == []
    assert StudyTrial.objects.count() == 0
    assert study.ask().number == 0  # its number was never taken


@pytest.mark.django_db
def test_a_refused_write_leaves_the_callers_transaction_usable():
    storage = DjangoStorage()
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])
    with transaction.atomic():
        trial_id = storage.create_new_trial(study_id)
        storage.set_trial_param(trial_id, "opt", 0, CategoricalDistribution(["adam", "sgd"]))
        with pytest.raises(ValueError):
            storage.set_trial_param(trial_id, "opt", 0.5, FloatDistribution(0, 1))
        storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.0])
        with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
            storage.set_trial_user_attr(trial_id, "late", True)
        with pytest.raises(KeyError):
            storage.set_trial_user_attr(trial_id + 1, "nobody", True)
        with pytest.raises(optuna.exceptions.DuplicatedStudyError):
            storage.create_new_study([StudyDirection.MINIMIZE], storage.get_study_name_from_id(study_id))
        storage.set_study_user_attr(study_id, "after", "the refusals")
    trial = storage.get_trial(trial_id)
    assert trial.state == TrialState.COMPLETE and trial.params == {"opt": "adam"} and trial.user_attrs == {}
    assert storage.get_study_user_attrs(study_id) == {"after": "the refusals"}


# -- Concurrency on PostgreSQL: each thread on its own connection, released together by a barrier --

THREADS = 16


def race(action, threads: int = THREADS) -> list:
    """Run ``action()`` in ``threads`` threads at once; their results."""
    barrier = threading.Barrier(threads)

    def one(_: int):
        try:
            barrier.wait()
            return action()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, range(threads)))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_16_concurrent_asks_get_16_distinct_numbers():
    storage = DjangoStorage()
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])

    trial_ids = race(lambda: storage.create_new_trial(study_id))

    assert len(set(trial_ids)) == THREADS
    assert sorted(storage.get_trial(trial_id).number for trial_id in trial_ids) == list(range(THREADS))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_workers_starting_one_waiting_trial_at_once_exactly_one_starts_it():
    storage = DjangoStorage()
    study_id = storage.create_new_study([StudyDirection.MINIMIZE])
    trial_id = storage.create_new_trial(study_id, create_trial(state=TrialState.WAITING))

    started = race(lambda: storage.set_trial_state_values(trial_id, TrialState.RUNNING), threads=8)

    assert sorted(started) == [False] * 7 + [True]
    trial = storage.get_trial(trial_id)
    assert trial.state == TrialState.RUNNING and trial.datetime_start is not None
