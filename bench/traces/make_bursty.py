"""Write bench/traces/bursty.csv: three teams sharing one GPU flavor in bursts (seeded, deterministic).

Run ``.venv/bin/python bench/traces/make_bursty.py [--days 28] [--seed 23] [--out FILE]``; the
bundled trace is its output with the defaults, so re-running it reproduces the file byte for byte.

Why this shape: a cohort pays when teams are busy at different times. Each team works in
bursts (a sweep of short runs, a batch of trainings) submitted within minutes, then goes
quiet; the teams sit in different hours of the day (two research teams eight hours apart and a
training team at any hour), so one team's queue often meets another's idle quota, and
sometimes two bursts collide and the team under its nominal quota takes it back. Across the
trace the cohort is loaded about three quarters full, the typical case of a shared pool
sized for the peaks of each team — not a saturated one, where sharing has nothing to lend.
Four weeks: a month's bill, and several half-lives of the fair share's memory of borrowing
(7 days by default), so the replay shows that memory in its steady state rather than at its
start; on a few days, a handful of bursts decides the figures (BENCHMARKS.md has both).

* ``team-a`` and ``team-b`` (nominal 4 each): hyper-parameter sweeps, 10–24 runs of 1–2 GPUs
  (a few of 4), 20–90 minutes each, checkpointing every 10–15 minutes; team-a's bursts start
  in 07–17 h, team-b's in 15–01 h. Most runs are ``normal``, a quarter ``low`` (exploratory),
  a few ``high``.
* ``team-c`` (nominal 8): fine-tuning and training, 5–14 runs of 1–4 GPUs, 1–4 hours each,
  checkpointing every 15–30 minutes, bursts at any hour. No run takes 8 GPUs: half of a
  16-GPU pool in one piece is a job for a larger pool (BENCHMARKS.md shows what it costs here).
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAVOR = "a100-80gb"
COLUMNS = ("submit_s", "team", "flavor", "units", "duration_s", "priority", "checkpoint_every_s")

#: team → (bursts a day, window of burst starts in hours of the day (start, length),
#:         runs per burst (lo, hi), units to draw from, minutes (lo, hi), checkpoint seconds (lo, hi))
PROFILES = {
    "team-a": (3, (7, 10), (10, 24), (1, 1, 1, 2, 2, 2, 4), (20, 90), (600, 900)),
    "team-b": (3, (15, 10), (10, 24), (1, 1, 1, 2, 2, 2, 4), (20, 90), (600, 900)),
    "team-c": (2, (0, 24), (5, 14), (1, 2, 2, 4), (60, 240), (900, 1800)),
}
#: Submissions of one burst spread over this many seconds (a script looping over a sweep).
BURST_SPREAD_S = 600


def priority(rng: random.Random) -> str:
    draw = rng.random()
    return "low" if draw < 0.25 else "high" if draw > 0.95 else "normal"


def generate(days: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for team, (per_day, (window_start, window_len), runs, units, minutes, checkpoint) in PROFILES.items():
        for day in range(days):
            for _ in range(per_day):
                start = day * 86_400 + int((window_start + rng.uniform(0, window_len)) * 3600)
                for _ in range(rng.randint(*runs)):
                    submit = start + rng.randint(0, BURST_SPREAD_S)
                    rows.append((submit, team, FLAVOR, rng.choice(units), rng.randint(*minutes) * 60,
                                 priority(rng), rng.randint(*checkpoint) // 60 * 60))
    rows.sort()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", type=Path, default=HERE / "bursty.csv")
    args = parser.parse_args()
    rows = generate(args.days, args.seed)
    with args.out.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    gpu_hours = sum(row[3] * row[4] for row in rows) / 3600
    print(f"{len(rows)} runs, {gpu_hours:.0f} GPU-hours over {args.days} days -> {args.out}")


if __name__ == "__main__":
    main()
