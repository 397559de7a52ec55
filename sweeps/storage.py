"""Optuna's storage over the portal's own tables (:class:`sweeps.models.Study` and :class:`StudyTrial`).

A sweep's study lives in the portal's database, in Django's transactions, PostgreSQL in production and
SQLite locally. Not Optuna's ``RDBStorage`` (SQLAlchemy), because:

- it opens connections of its own, outside Django's transactions: a trial asked for and the run created
  for it could not commit or roll back together, and pytest-django's per-test rollback would not see
  its rows;
- its tables would live outside Django's migrations;
- on SQLite its connections take the database's locks beside Django's, and each side waits on the other.

Transactions. Every write runs in ``transaction.atomic()``: inside a caller's transaction it is a
savepoint of it (the sweep driver asks for a trial and creates the run for it in one transaction), and a
refused write (an unknown id, a finished trial, an incompatible distribution) rolls back to that savepoint
and leaves the caller's transaction usable. A read is a single statement (a trial list with none in it
adds one to tell an empty study from a missing one) and runs on the connection as it finds it, in the
caller's transaction when there is one, without ``atomic()``: on SQLite ``atomic()`` begins an IMMEDIATE
transaction, the whole database's write lock, and samplers read a study's trials several times per ask.

Locks. A trial's number is the study's highest plus one, counted under the study row's lock, so
concurrent asks on PostgreSQL take turns and never share a number; the (study, number) unique constraint
is the backstop. Every update of a trial first locks the trial's row, so two workers moving a WAITING
trial to RUNNING see each other and the second gets False (Optuna's contract). The locks are ``FOR NO KEY
UPDATE`` (``select_for_update(no_key=True)``): they exclude each other and every update of the row, yet
let other transactions insert rows that reference it. On SQLite ``select_for_update`` does nothing; its
IMMEDIATE transactions serialize the writers instead.

Encoding. JSON has no NaN or ±inf, which Optuna allows in objective and intermediate values, parameters
and attributes (and PostgreSQL's jsonb refuses Python's ``NaN``): a float column holds finite floats as
numbers and the others as the strings ``"inf"``, ``"-inf"`` and ``"nan"``; an attribute is kept as its
own JSON text (any value, NaN nested anywhere included), a distribution as Optuna's JSON text. Optuna's
datetimes are naive local time (it compares them with ``datetime.now()``): the columns hold the instant,
and reads give it back as naive local time again.

Every read builds new ``FrozenTrial`` objects from the rows, so nothing returned is shared with the
storage or with another read: ``get_all_trials``' ``deepcopy`` has nothing left to copy.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Container, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from optuna.distributions import (
    BaseDistribution,
    check_distribution_compatibility,
    distribution_to_json,
    json_to_distribution,
)
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy  # not exported by optuna.study; BaseStorage names it so
from optuna.trial import FrozenTrial, TrialState

from sweeps.models import Study, StudyTrial

#: The longest study name the table holds (Study.name's max_length).
NAME_LENGTH = Study._meta.get_field("name").max_length


class DjangoStorage(BaseStorage):
    """Optuna's storage in the portal's database: ``optuna.create_study(storage=DjangoStorage(), ...)``.

    Holds no state of its own (each thread uses its own Django connection), so one instance may be shared
    between threads, pickled, or made afresh to load a study again.
    """

    # -- Studies --

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        if study_name is None:
            study_name = DEFAULT_STUDY_NAME_PREFIX + str(uuid.uuid4())
        if len(study_name) > NAME_LENGTH:  # PostgreSQL would refuse it, SQLite keep it whole
            raise ValueError(f"a study name is at most {NAME_LENGTH} characters, not {len(study_name)}")
        try:
            with transaction.atomic():
                study = Study.objects.create(name=study_name, directions=[StudyDirection(d).name for d in directions])
        except IntegrityError as exc:  # the one unique column: a study of that name exists
            raise DuplicatedStudyError(f"a study named {study_name!r} already exists") from exc
        return study.pk

    def delete_study(self, study_id: int) -> None:
        with transaction.atomic():
            deleted, _ = Study.objects.filter(pk=study_id).delete()
        if not deleted:
            raise KeyError(f"no study {study_id}")

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._set_study_attr(study_id, "user_attrs", key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._set_study_attr(study_id, "system_attrs", key, value)

    def _set_study_attr(self, study_id: int, field: str, key: str, value: Any) -> None:
        text = _attr_to_json(value)
        with transaction.atomic():
            # Locked: two writers of different keys would otherwise each save the dict without the other's.
            study = _locked_study(study_id, field)
            getattr(study, field)[key] = text
            study.save(update_fields=[field])

    def get_study_id_from_name(self, study_name: str) -> int:
        study_id = Study.objects.filter(name=study_name).values_list("pk", flat=True).first()
        if study_id is None:
            raise KeyError(f"no study named {study_name!r}")
        return study_id

    def get_study_name_from_id(self, study_id: int) -> str:
        return _study_column(study_id, "name")

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return [StudyDirection[name] for name in _study_column(study_id, "directions")]

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return _attrs_from_json(_study_column(study_id, "user_attrs"))

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return _attrs_from_json(_study_column(study_id, "system_attrs"))

    def get_all_studies(self) -> list[FrozenStudy]:
        return [
            FrozenStudy(
                study_name=study.name,
                direction=None,
                directions=[StudyDirection[name] for name in study.directions],
                user_attrs=_attrs_from_json(study.user_attrs),
                system_attrs=_attrs_from_json(study.system_attrs),
                study_id=study.pk,
            )
            for study in Study.objects.order_by("pk").defer("param_distributions", "created_at")
        ]

    # -- Trials --

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        """A new trial numbered after the study's last; RUNNING from now, or a copy of ``template_trial``
        (its number and id aside), which is how Optuna adds finished trials and enqueues WAITING ones."""
        with transaction.atomic():
            study = _locked_study(study_id, "param_distributions")  # numbers are allocated one at a time
            last = StudyTrial.objects.filter(study_id=study_id).aggregate(last=Max("number"))["last"]
            trial = StudyTrial(study_id=study_id, number=0 if last is None else last + 1)
            if template_trial is None:
                trial.state = TrialState.RUNNING
                trial.datetime_start = timezone.now()
            else:
                _copy_template(template_trial, trial)
                # Parameters seen here first are the study's from now on (checked against nothing, as
                # Optuna's own storages take a template's parameters as they come).
                new = {name: entry["distribution"] for name, entry in _by_name(trial.params).items()
                       if name not in study.param_distributions}
                if new:
                    study.param_distributions.update(new)
                    study.save(update_fields=["param_distributions"])
            trial.save(force_insert=True)
        return trial.pk

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: BaseDistribution
    ) -> None:
        with transaction.atomic():
            trial = _updatable_trial(trial_id)
            _check_distribution(trial.study_id, param_name, distribution)
            entry = {"name": param_name, "value": _float_to_json(param_value_internal),
                     "distribution": distribution_to_json(distribution)}
            params = _by_name(trial.params)
            params[param_name] = entry  # a parameter set again keeps its place
            trial.params = list(params.values())
            trial.save(update_fields=["params"])

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        """Move the trial to ``state``; False, and nothing changed, when asked to run a trial that already
        runs: two workers that both saw it WAITING, the second of which must leave it to the first."""
        with transaction.atomic():
            trial = _updatable_trial(trial_id)
            if state == TrialState.RUNNING and trial.state == TrialState.RUNNING:
                return False
            trial.state = state
            if values is not None:
                trial.values = [_float_to_json(value) for value in values]
            if state == TrialState.RUNNING:
                trial.datetime_start = timezone.now()
            if state.is_finished():
                trial.datetime_complete = timezone.now()
            trial.save(update_fields=["state", "values", "datetime_start", "datetime_complete"])
        return True

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        """Record the value at ``step``, replacing one recorded there before (the storage's contract;
        ``Trial.report`` itself ignores a second report of a step before it gets here)."""
        with transaction.atomic():
            trial = _updatable_trial(trial_id)
            trial.intermediate_values[str(step)] = _float_to_json(intermediate_value)
            trial.save(update_fields=["intermediate_values"])

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._set_trial_attr(trial_id, "user_attrs", key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._set_trial_attr(trial_id, "system_attrs", key, value)

    def _set_trial_attr(self, trial_id: int, field: str, key: str, value: Any) -> None:
        text = _attr_to_json(value)
        with transaction.atomic():
            trial = _updatable_trial(trial_id)
            getattr(trial, field)[key] = text
            trial.save(update_fields=[field])

    def get_trial(self, trial_id: int) -> FrozenTrial:
        trial = StudyTrial.objects.filter(pk=trial_id).first()
        if trial is None:
            raise KeyError(f"no trial {trial_id}")
        return _frozen_trial(trial)

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        """The study's trials by trial id, one query; ``deepcopy`` is moot (see the module's docstring)."""
        trials = StudyTrial.objects.filter(study_id=study_id)
        if states is not None:
            trials = trials.filter(state__in=[state for state in TrialState if state in states])
        found = [_frozen_trial(trial) for trial in trials.order_by("pk")]
        if not found:
            _study_column(study_id, "pk")  # an empty study's, or no study at all (KeyError)
        return found

    # -- Shortcuts: one query instead of the base class's reading of every trial --

    def get_n_trials(self, study_id: int, state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        trials = StudyTrial.objects.filter(study_id=study_id)
        if state is not None:
            trials = trials.filter(state__in=[state] if isinstance(state, TrialState) else list(state))
        count = trials.count()
        if not count:
            _study_column(study_id, "pk")
        return count

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        trial_id = (StudyTrial.objects.filter(study_id=study_id, number=trial_number)
                    .values_list("pk", flat=True).first())
        if trial_id is None:
            raise KeyError(f"no trial number {trial_number} in study {study_id}")
        return trial_id


# -- Rows --


def _study_column(study_id: int, column: str) -> Any:
    """One column of the study's row; KeyError without the row."""
    rows = Study.objects.filter(pk=study_id).values_list(column, flat=True)[:1]
    if not rows:
        raise KeyError(f"no study {study_id}")
    return rows[0]


def _locked_study(study_id: int, *fields: str) -> Study:
    """The study's row (``fields`` of it), locked until the transaction ends; KeyError without it."""
    study = Study.objects.select_for_update(no_key=True).only(*fields).filter(pk=study_id).first()
    if study is None:
        raise KeyError(f"no study {study_id}")
    return study


def _updatable_trial(trial_id: int) -> StudyTrial:
    """The trial's row, locked until the transaction ends: KeyError without it, UpdateFinishedTrialError
    when it has finished (only RUNNING and WAITING trials change)."""
    trial = StudyTrial.objects.select_for_update(no_key=True).filter(pk=trial_id).first()
    if trial is None:
        raise KeyError(f"no trial {trial_id}")
    if TrialState(trial.state).is_finished():
        raise UpdateFinishedTrialError(
            f"trial {trial.number} of study {trial.study_id} is {TrialState(trial.state).name}: "
            "a finished trial cannot change")
    return trial


def _check_distribution(study_id: int, name: str, distribution: BaseDistribution) -> None:
    """Refuse (ValueError) a distribution for ``name`` that is incompatible with the study's; the first
    one seen becomes the study's, under the study's lock so that two first trials cannot disagree."""
    known = Study.objects.filter(pk=study_id).values_list("param_distributions", flat=True).get().get(name)
    if known is None:
        study = _locked_study(study_id, "param_distributions")
        known = study.param_distributions.get(name)
        if known is None:
            study.param_distributions[name] = distribution_to_json(distribution)
            study.save(update_fields=["param_distributions"])
            return
    check_distribution_compatibility(json_to_distribution(known), distribution)


def _copy_template(template: FrozenTrial, trial: StudyTrial) -> None:
    trial.state = template.state
    trial.values = None if template.values is None else [_float_to_json(v) for v in template.values]
    trial.datetime_start = _instant(template.datetime_start)
    trial.datetime_complete = _instant(template.datetime_complete)
    trial.params = [
        {"name": name, "value": _float_to_json(distribution.to_internal_repr(template.params[name])),
         "distribution": distribution_to_json(distribution)}
        for name, distribution in template.distributions.items()
    ]
    trial.intermediate_values = {str(step): _float_to_json(v) for step, v in template.intermediate_values.items()}
    trial.user_attrs = {key: _attr_to_json(value) for key, value in template.user_attrs.items()}
    trial.system_attrs = {key: _attr_to_json(value) for key, value in template.system_attrs.items()}


def _frozen_trial(trial: StudyTrial) -> FrozenTrial:
    distributions: dict[str, BaseDistribution] = {}
    params: dict[str, Any] = {}
    for name, entry in _by_name(trial.params).items():
        distributions[name] = distribution = json_to_distribution(entry["distribution"])
        params[name] = distribution.to_external_repr(_float_from_json(entry["value"]))
    steps = sorted(trial.intermediate_values.items(), key=lambda item: int(item[0]))
    return FrozenTrial(
        number=trial.number,
        state=TrialState(trial.state),
        value=None,
        values=None if trial.values is None else [_float_from_json(v) for v in trial.values],
        datetime_start=_local(trial.datetime_start),
        datetime_complete=_local(trial.datetime_complete),
        params=params,
        distributions=distributions,
        user_attrs=_attrs_from_json(trial.user_attrs),
        system_attrs=_attrs_from_json(trial.system_attrs),
        intermediate_values={int(step): _float_from_json(v) for step, v in steps},
        trial_id=trial.pk,
    )


def _by_name(params: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in params}


# -- Encoding: what JSON cannot hold, and Optuna's naive local times --


def _float_to_json(value: float) -> float | str:
    """A finite float as itself, NaN and ±inf as ``"nan"``, ``"inf"``, ``"-inf"`` (which ``float`` reads)."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _float_from_json(value: float | str) -> float:
    return float(value)


def _attr_to_json(value: Any) -> str:
    """An attribute as JSON text: Python's JSON writes NaN and ±inf (as ``NaN``, ``Infinity``) anywhere in
    the value and reads them back, and the column holds the text as a plain JSON string."""
    return json.dumps(value)


def _attrs_from_json(attrs: dict[str, str]) -> dict[str, Any]:
    return {key: json.loads(text) for key, text in attrs.items()}


def _instant(moment: datetime | None) -> datetime | None:
    """Optuna's naive local time as an aware instant (the process's local zone, as ``datetime.now()``;
    not Django's current zone, which a request may have switched)."""
    if moment is None or timezone.is_aware(moment):
        return moment
    return moment.astimezone()


def _local(moment: datetime | None) -> datetime | None:
    """An instant as Optuna's naive local time."""
    return None if moment is None else moment.astimezone().replace(tzinfo=None)
