"""A sweep's Optuna study: its sampler, its pruner, and the study itself over the portal's tables.

Optuna does the algorithms (docs/sweeps.md "What Optuna does"): ``GridSampler``, ``RandomSampler`` and
``TPESampler`` choose each trial's parameters; ``MedianPruner`` and ``SuccessiveHalvingPruner`` (ASHA) judge the
values a trial reports. Slipway only keeps the study (:class:`sweeps.storage.DjangoStorage`) and acts on what
Optuna says.

A sampler keeps its random state in memory, and the driver loads the study afresh each time it acts (a worker
may die between two acts), so one sampler seeded once would draw the same parameters again. Each trial's draw
is seeded instead from the sweep's seed and the trial's number (:func:`sampler_for`): the same sweep asks the
same questions in the same order, whichever worker asks, however often it was restarted.
"""

from __future__ import annotations

import hashlib

from sweeps import constants as c
from sweeps.spec import Parameter, Pruner


def draw_seed(sweep_seed: int, number: int) -> int:
    """The seed of trial ``number``'s draw (0-based: Optuna's number), from the sweep's seed."""
    digest = hashlib.sha256(f"{sweep_seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def sampler_for(sampler: str, parameters: list[Parameter], sweep_seed: int, number: int):
    """Optuna's sampler for the draw of trial ``number`` (module docstring: why one per draw)."""
    import optuna

    seed = draw_seed(sweep_seed, number)
    if sampler == c.Sampler.GRID:
        return optuna.samplers.GridSampler({p.name: p.grid_values() for p in parameters}, seed=seed)
    if sampler == c.Sampler.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def pruner_for(pruner: Pruner):
    """Optuna's pruner for the sweep's ``pruner`` (``NopPruner`` without one)."""
    import optuna

    if pruner.type == c.PrunerType.MEDIAN:
        return optuna.pruners.MedianPruner(n_startup_trials=pruner.startup_trials, n_warmup_steps=pruner.warmup_steps)
    if pruner.type == c.PrunerType.ASHA:
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=pruner.min_resource,
                                                      reduction_factor=pruner.reduction_factor)
    return optuna.pruners.NopPruner()


def direction(goal: str):
    import optuna

    return optuna.study.StudyDirection.MAXIMIZE if goal == c.Goal.MAXIMIZE else optuna.study.StudyDirection.MINIMIZE
