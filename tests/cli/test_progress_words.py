"""The command line's words for a run's progress (``slipway describe``, ``slipway metrics``, ``slipway top``):
its own steps, or — a TrainJob whose run reports nothing fresh — its trainer's percentage and metrics
(docs/training.md "Status, logs and progress"). The answers are the API's ``progress`` objects."""

from __future__ import annotations

from slipway.insight import progress_words

OWN = {"source": "run", "step": 200, "total": 1200, "percent": 16.7, "eta": "2026-11-22T10:20:00Z",
       "eta_seconds": 480, "done": False, "stale": False, "last_attempt": False, "trainer_metrics": {}}
TRAINER = {**OWN, "source": "trainer", "step": None, "total": None, "percent": 40.0, "eta_seconds": 1800,
           "trainer_metrics": {"loss": "1.25", "eval_accuracy": "0.82"}}


def test_a_runs_own_progress_reads_in_steps():
    assert progress_words(OWN) == "step 200 of 1,200 (16.7 %), ETA 2026-11-22T10:20:00Z (in 8 min)"


def test_a_trainers_progress_reads_as_its_percentage_with_its_metrics_last():
    assert progress_words(TRAINER) == ("40.0 % (the trainer's status), ETA 2026-11-22T10:20:00Z (in 30 min); "
                                       "trainer: eval_accuracy 0.82, loss 1.25")
    assert progress_words({**TRAINER, "done": True, "trainer_metrics": {}}) == "40.0 % (the trainer's status), done"
    assert progress_words(None) == ""
