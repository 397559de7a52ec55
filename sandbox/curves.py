"""Learning curves for simulated sweep trials: a seeded parametric family whose final loss depends on
the trial's hyperparameters (docs/metrics.md "Learning curves of sweep trials").

A sweep's trial is a run whose env carries its parameters (``LR=0.00031``, ``BATCH=64``,
``OPTIM=adamw``). Told where the optimum is, the sandbox gives each trial a curve: its final loss
is lowest at the optimum and grows with the distance from it (a bowl in log space, with a few
percent of noise), and how fast it gets there depends on the parameters too, so some curves cross
and early stopping can be wrong. Everything is a pure function of the env: no clock, no randomness
at run time (the noise is drawn from a hash of the parameters and the seed), and no Django, so a
benchmark can use the family without the sandbox (:func:`curve_for`, :meth:`Curve.loss_at`).

Knobs, from the first container's env:

* ``SLIPWAY_SIM_OPTIMUM`` — comma-separated ``NAME=VALUE`` pairs: each parameter's env var and its
  optimum in the user's units, e.g. ``LR=3e-4,BATCH=64,OPTIM=adamw``. The trial's values are read
  from the env vars of those names. Without it (or with it empty) a run keeps the sandbox's usual
  curve (:func:`curve_for` returns None).
* ``SLIPWAY_SIM_CURVE_SEED`` — an integer (default 0) that seeds the noise: another seed, another
  draw of the same family.

The family. For each parameter, a penalty:

* a positive number against a positive optimum is measured in decades,
  ``(log10(value / optimum)) ** 2`` (held to :data:`MAX_DECADES` decades either way);
* anything else (zero, negative, a word, ``nan``) is compared for equality with the optimum —
  numerically when both are numbers, else as words, case and surrounding blanks aside — and costs
  :data:`MISMATCH` when it differs, nothing when it matches.

The distance ``d`` is the sum of the penalties. The final loss is
``FLOOR + SPAN * (1 - exp(-SLOPE * d / SPAN))`` — ``FLOOR + SLOPE * d`` near the optimum, saturating
towards the initial loss for far-off settings (a run that diverges learns nothing) — times
``1 ± FINAL_NOISE`` drawn per (parameters, seed). The loss starts at :data:`INITIAL` and decays to
the final one as a power law in steps, ``final + (INITIAL - final) * (1 + step / tau) ** -ALPHA``,
with ``tau = TAU * 2 ** (-SPEED * lean) * (1 + SLOW * d)``: ``lean`` sums the signed decades of the
numeric parameters (held to ±2), so values above their optimum (a larger learning rate, a larger
batch) converge faster early but to a worse loss, and values below it slower — that is what makes
curves cross — while the distance slows every far-off curve, so curves stay mostly ranked by their
final loss (a bad setting is mostly bad from the start). On top, a per-step noise of
``± STEP_NOISE`` (relative), drawn from the step and the curve.

What that gives a sweep of ``LR`` log-uniform in 1e-5..1e-1, ``BATCH`` in 16..256 and ``WARMUP``
in 0..2000 (optimum ``LR=3e-4,BATCH=64,WARMUP=500``) over 3,000 steps: about one pair of curves in
eight swaps order between step 100 and the end, and Optuna's successive halving (minimum resource
100 steps, reduction factor 3) keeps a trial within 1 % of the best final loss of all 200 in about
96 studies of 100 using an eighth of the steps; in about one study in ten it prunes the best one.

Malformed knobs never raise (a bad knob must not break the sandbox):

* a pair without ``=`` or with an empty name in ``SLIPWAY_SIM_OPTIMUM`` is skipped (the last pair
  of a name wins); a knob naming no parameter at all gives the optimum's curve (``d = 0``);
* a parameter whose env var is missing counts as at its optimum (an unset hyperparameter is the
  script's default, taken to be the optimum);
* a value that is not a number where the optimum is one (``LR=fast``), or not finite, is a mismatch;
* a ``SLIPWAY_SIM_CURVE_SEED`` that is not an integer is 0.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

OPTIMUM_KNOB = "SLIPWAY_SIM_OPTIMUM"
SEED_KNOB = "SLIPWAY_SIM_CURVE_SEED"

#: The loss every curve starts at (the sandbox's usual curve starts there too: 0.35 + 2.4).
INITIAL = 2.75
#: The final loss at the optimum, before noise.
FLOOR = 0.35
#: How far above the floor the final loss can go (to the initial loss: no learning at all).
SPAN = INITIAL - FLOOR
#: Final loss per unit of distance near the optimum (one decade off in one parameter: +0.3).
SLOPE = 0.3
#: The distance a non-numeric (or non-positive) parameter adds when it is not the optimum's.
MISMATCH = 1.0
#: Decades either way a numeric parameter's penalty and lean are held to (a typo's 1e40 stays finite).
MAX_DECADES = 6.0
#: Steps the optimum's curve takes to halve its way down (the power law's scale), and its exponent.
TAU, ALPHA = 300.0, 1.0
#: How much the lean changes the pace: each decade above the optimum makes ``tau`` 2 ** SPEED times shorter.
SPEED = 0.5
#: How much the distance slows the pace: ``tau`` grows by this fraction per unit of distance.
SLOW = 0.6
#: The lean's bound, in decades either way.
MAX_LEAN = 2.0
#: Relative noise of the final loss (per parameters and seed) and of each step's loss (per step).
FINAL_NOISE, STEP_NOISE = 0.03, 0.005
#: Parameter names (case aside) whose value a training line prints as its ``lr=``.
LR_NAMES = ("LR", "LEARNING_RATE")


@dataclass(frozen=True)
class Curve:
    """One trial's learning curve: ``loss_at(step)`` for any step (a resumed attempt goes on from its step)."""

    final: float  # the loss it converges to (the noise of its parameters included)
    tau: float  # steps: its pace (shorter: faster early)
    distance: float  # from the optimum (0: at it)
    key: int  # seeds its per-step noise
    initial: float = INITIAL
    alpha: float = ALPHA

    def loss_at(self, step: int) -> float:
        """The loss it prints at ``step`` (steps below 0 count as 0)."""
        step = max(int(step), 0)
        clean = self.final + (self.initial - self.final) * (1.0 + step / self.tau) ** -self.alpha
        return clean * (1.0 + STEP_NOISE * _unit(self.key, step))


def _unit(*parts: object) -> float:
    """A stable draw in [-1, 1] from ``parts`` (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / float(2**64 - 1) * 2.0 - 1.0


def _number(raw: str) -> float | None:
    """A finite number in ``raw``, None when there is none."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_optimum(raw: str) -> dict[str, str]:
    """``LR=3e-4,BATCH=64`` as ``{"LR": "3e-4", "BATCH": "64"}``: blanks trimmed, pairs without ``=`` or a name skipped."""
    optimum: dict[str, str] = {}
    for pair in raw.split(","):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            optimum[name.strip()] = value.strip()
    return optimum


def parse_seed(raw: str) -> int:
    """``SLIPWAY_SIM_CURVE_SEED`` as an integer, 0 when it is not one."""
    try:
        return int(raw.strip())
    except ValueError:
        return 0


def penalty(optimum: str, value: str | None) -> tuple[float, float]:
    """One parameter's ``(distance, lean)``: squared decades from a positive optimum and the signed
    decades (both 0 at the optimum or when the value is missing); a mismatch of anything else costs
    :data:`MISMATCH` and leans neither way."""
    if value is None:
        return 0.0, 0.0
    best, given = _number(optimum), _number(value)
    if best is not None and given is not None and best > 0 and given > 0:
        decades = max(-MAX_DECADES, min(MAX_DECADES, math.log10(given / best)))
        return decades * decades, decades
    numbers = best is not None and given is not None
    same = best == given if numbers else optimum.strip().lower() == value.strip().lower()
    return (0.0 if same else MISMATCH), 0.0


def final_loss(distance: float) -> float:
    """The final loss at ``distance`` from the optimum, before noise: ``FLOOR + SLOPE * d`` near it,
    saturating towards :data:`INITIAL`."""
    return FLOOR + SPAN * (1.0 - math.exp(-SLOPE * max(distance, 0.0) / SPAN))


def curve_of(optimum: Mapping[str, str], values: Mapping[str, str], seed: int = 0) -> Curve:
    """The curve of a trial whose parameters are ``values`` (env var → value; those not in
    ``optimum`` ignored, those missing at their optimum), given the ``optimum`` (env var → value) and ``seed``."""
    distance = lean = 0.0
    given: list[str] = []
    for name in sorted(optimum):
        value = values.get(name)
        d, s = penalty(optimum[name], value)
        distance, lean = distance + d, lean + s
        number = None if value is None else _number(value)
        # The noise's key: the values as numbers where they are (3e-4 and 0.0003 are one trial).
        given.append(f"{name}={'' if value is None else repr(number) if number is not None else value.strip().lower()}")
    key = hashlib.blake2b(f"{seed}|{'|'.join(given)}".encode(), digest_size=8).digest()
    key_int = int.from_bytes(key, "big")
    final = min(final_loss(distance) * (1.0 + FINAL_NOISE * _unit(key_int, "final")), INITIAL)
    lean = max(-MAX_LEAN, min(MAX_LEAN, lean))
    return Curve(final=final, tau=TAU * 2.0 ** (-SPEED * lean) * (1.0 + SLOW * distance), distance=distance, key=key_int)


def knob_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The entries of ``env`` the family reads (the knobs and the parameters they name), None
    without ``SLIPWAY_SIM_OPTIMUM``: what a run's plan keeps to draw its curve later."""
    raw = env.get(OPTIMUM_KNOB, "")
    if not raw.strip():
        return None
    kept = {OPTIMUM_KNOB: raw}
    if SEED_KNOB in env:
        kept[SEED_KNOB] = env[SEED_KNOB]
    kept.update((name, env[name]) for name in parse_optimum(raw) if name in env)
    return kept


def curve_for(env: Mapping[str, str]) -> Curve | None:
    """The curve of the run whose env is ``env``; None without ``SLIPWAY_SIM_OPTIMUM`` (the usual curve)."""
    raw = env.get(OPTIMUM_KNOB, "")
    if not raw.strip():
        return None
    return curve_of(parse_optimum(raw), env, parse_seed(env.get(SEED_KNOB, "")))


def learning_rate(env: Mapping[str, str]) -> tuple[str, float] | None:
    """The learning-rate parameter a run with the knob trains with: the first parameter of
    ``SLIPWAY_SIM_OPTIMUM`` named ``LR`` or ``LEARNING_RATE`` (case aside) whose value is a positive
    number, as ``(name, value)``; None when there is none."""
    for name in parse_optimum(env.get(OPTIMUM_KNOB, "")):
        if name.upper() in LR_NAMES:
            value = _number(env.get(name, ""))
            if value is not None and value > 0:
                return name, value
    return None
