"""The example sweep: what the New sweep page starts with, and the sweep file docs/sweeps.md shows ("Command line").

One copy: the page prefills its form with :data:`NAME` and :data:`SPEC`, and ``tests/sweeps/test_new_page.py`` holds
the file the docs show (``cat sweep.yaml``, which the docs walk creates on the demo from the command line) to
:func:`sweep_file`. Its trials are single MIG slices of the demo's ML Research, ten minutes at most each, judged by
ASHA and capped at 5 in money: a sweep a reader may try as it is.
"""

from __future__ import annotations

#: The example's name.
NAME = "lr-batch"

#: The rest of its file (no team, no name: the page's own fields), YAML as a reader would write it.
SPEC = """\
run:
  image: ghcr.io/acme/bert-trainer:2.1
  command: [python, train.py]
  args: ["--lr={lr}", "--batch-size={batch}"]
  flavor: a100-3g.40gb
  gpus_per_worker: 1
  max_runtime_minutes: 10
  checkpoint: {grace_seconds: 30}
parameters:
  lr: {type: float, min: 0.00001, max: 0.1, log: true}
  batch: {type: categorical, choices: [16, 32, 64, 128, 256]}
objective: {metric: loss, goal: minimize}
pruner: {type: asha, min_resource: 120, reduction_factor: 3, max_resource: 2400}
parallel: 3
max_trials: 27
max_cost: 5
"""


def sweep_file(team: str) -> str:
    """The whole file for ``team``, as ``slipway sweep create -f`` takes it."""
    return f"team: {team}\nname: {NAME}\n{SPEC}"
