"""Benchmark: how fast training metrics go in (issue 38, "bench/telemetry.py"), on PostgreSQL.

Run ``.venv/bin/python bench/telemetry.py [--points 50000] [--batch 500] [--quick]``. A scratch
database (``<DATABASE_URL's name>_bench_telemetry``) holds one team and one running run with the
checkpoint contract (so it has a run token). Two ways in, each timed over ``--points`` new points:

* **API**: ``POST /api/v1/runs/{id}/metrics/`` through Django's whole stack in this process
  (middleware, the run token's authentication, JSON parsing, validation, the upsert, the
  progress fold), DEBUG off, batches of ``--batch`` points (5 metric names a step) with a
  progress report each; then the same batches sent again (idempotent: nothing new is stored),
  which is timed apart.
* **stdout**: Katib-style lines (``2026-…Z INFO  step=20 loss=… accuracy=… lr=… grad_norm=…``,
  4 points a line, and a ``SLIPWAY_PROGRESS`` line every 10) parsed by
  :func:`jobs.metric_lines.parse_lines` and recorded by :func:`jobs.metrics.record` in chunks of
  ``SLIPWAY_RUN_METRICS_READ_LINES`` lines — what the stdout reader does with each log read. The log
  read itself (one HTTP call to the cluster per run and cycle) is not in it: its cost is bounded
  per cycle (docs/metrics.md) and is the cluster's, not Slipway's.

Printed: points per second of each, against the target of ≥ 2,000 points/s.

Then the **chart query** of GPU telemetry (docs/metrics.md "GPU telemetry"): a run whose stored
series is ``--series-points`` points long (100,000: 10-minute slots over 694 days, one GPU, in day
rows as the beat task folds them, and its last hour minute by minute) read through
``GET /api/v1/runs/{id}/telemetry/`` — its five series downsampled by LTTB to the chart's width —
against the *raw* query: the same rows read and every point answered, undownsampled. Each round
times both, in turns (the first of a round alternates); printed: the chart query's median and p95
against the target (p95 < 50 ms) and the raw query's median beside it; and what a week-long run on 8
GPUs stores (rows, bytes) and how fast its chart answers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, recreate_database, scratch_dir  # noqa: E402

REDIS = os.environ.get("SLIPWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
TARGET = 2000.0  # points per second, each way in
CHART_TARGET_MS = 50.0  # the chart query's p95
NAMES = ("loss", "accuracy", "lr", "grad_norm", "tokens_per_sec")


def seed() -> tuple[object, str]:
    """One team, one running run with the checkpoint contract; the run and its token."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs.constants import RunState
    from jobs.models import TrainingRun
    from jobs.services import submit_run
    from quotas.demo import seed_flavors, seed_team_quotas
    from teams.models import Membership, Role, Team
    from workloads import crypto
    from workloads.models import SecretEnv

    seed_flavors()
    team = Team.objects.create(slug="bench", name="Bench", namespace="team-bench")
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("1000000"))
    user = get_user_model().objects.create_user("bench")
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    run = submit_run(user, team, {"name": "curve", "image": "registry.example.com/ml/t:1", "command": ["python", "t.py"],
                                  "flavor": "a100-80gb", "checkpoint": {}})
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, started_at=timezone.now())
    run.refresh_from_db()
    # The token as its pods get it (sealed with the run's secret env, never shown anywhere).
    return run, crypto.unseal(SecretEnv.objects.get(ref=run.ref).sealed)["SLIPWAY_RUN_TOKEN"]


def batches(points: int, size: int, first_step: int) -> list[dict]:
    """Bodies of ``size`` points, :data:`NAMES` at each step, steps from ``first_step`` on."""
    per_step = len(NAMES)
    steps = math.ceil(points / per_step)
    bodies, body = [], []
    for n in range(steps):
        step = first_step + n
        body += [{"step": step, "name": name, "value": 1.0 / (1 + step) + i} for i, name in enumerate(NAMES)]
        if len(body) >= size or n == steps - 1:
            bodies.append({"points": body, "progress": {"step": step, "total": 10 * (first_step + steps)}})
            body = []
    return bodies


def katib_lines(points: int, first_step: int) -> list[str]:
    """Log lines of 4 points each (and a progress line every 10), one step a line, stamped a second apart."""
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)
    lines = []
    for n in range(math.ceil(points / 4)):
        step = first_step + n
        stamp = (t0 + timedelta(seconds=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"{stamp} INFO  step={step} loss={2.5 / (1 + n / 500):.4f} accuracy={0.5 + n / (8 * points):.4f} "
                     f"lr=3.0e-04 grad_norm={1.0 + (n % 7) / 10:.2f}")
        if n % 10 == 9:
            lines.append(f"{stamp} INFO  SLIPWAY_PROGRESS step={step} total={first_step + 10 * points}")
    return lines


def bench_api(client, run, token: str, points: int, size: int) -> tuple[float, float, int]:
    """(new points/s, re-sent points/s, points stored) through the whole API stack."""
    from jobs.models import RunMetric

    bodies = [json.dumps(body) for body in batches(points, size, first_step=0)]
    path = f"/api/v1/runs/{run.pk}/metrics/"
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_X_FORWARDED_PROTO": "https"}
    # Warm: first-request imports and caches are not the steady state (a batch of its own steps).
    warm = json.dumps(batches(size, size, first_step=10**9)[0])
    assert client.post(path, warm, content_type="application/json", **headers).status_code == 200
    sent = 0
    began = time.perf_counter()
    for body in bodies:
        response = client.post(path, body, content_type="application/json", **headers)
        assert response.status_code == 200, response.content
        sent += response.json()["points"]
    fresh = time.perf_counter() - began
    began = time.perf_counter()
    for body in bodies:
        assert client.post(path, body, content_type="application/json", **headers).status_code == 200
    again = time.perf_counter() - began
    stored = RunMetric.objects.filter(run=run, step__lt=10**9).count()
    return sent / fresh, sent / again, stored


def bench_stdout(run, points: int, chunk: int) -> tuple[float, int]:
    """(points/s, points stored): parse and record as the stdout reader does, ``chunk`` lines a read."""
    from django.utils import timezone

    from jobs import metric_lines, metrics
    from jobs.models import RunMetric

    lines = katib_lines(points, first_step=2 * 10**8)
    metrics.record(run, metric_lines.parse_lines(katib_lines(400, first_step=3 * 10**8)).points, [], timezone.now())
    stored = 0
    began = time.perf_counter()
    for start in range(0, len(lines), chunk):
        parsed = metric_lines.parse_lines(lines[start:start + chunk])
        stored += metrics.record(run, parsed.points, parsed.progress, timezone.now())
    elapsed = time.perf_counter() - began
    assert RunMetric.objects.filter(run=run, step__gte=2 * 10**8, step__lt=3 * 10**8).count() == stored
    return stored / elapsed, stored


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1)]


def seed_run(run):
    """Another running run of the same team (the week-long one)."""
    from django.utils import timezone

    from jobs.constants import RunState
    from jobs.models import TrainingRun
    from jobs.services import submit_run

    other = submit_run(run.created_by, run.team, {"name": "week", "image": "registry.example.com/ml/t:1",
                                                  "command": ["python", "t.py"], "flavor": "a100-80gb",
                                                  "gpus_per_worker": 8})
    TrainingRun.objects.filter(pk=other.pk).update(state=RunState.RUNNING, started_at=timezone.now())
    other.refresh_from_db()
    return other


def store_series(run, slots: int, gpus: int) -> None:
    """``slots`` 10-minute slots of ``gpus`` GPUs in day rows ending an hour ago, then the last hour minute by
    minute (through :func:`workloads.telemetry.readings.record`, as the cycle writes it)."""
    from datetime import timedelta

    import numpy as np
    from django.utils import timezone

    from cluster.backends.base import GpuReading, WorkloadTelemetry
    from workloads.models import GpuTelemetry
    from workloads.telemetry import readings as telemetry

    step = telemetry.bucket_seconds()
    per_day = int(telemetry.DAY.total_seconds()) // step
    now = timezone.now()
    first_day = telemetry.floor_to(now - timedelta(hours=1) - timedelta(seconds=slots * step), 86400)
    ids = [f"GPU-{run.pk:04d}-{g}" for g in range(gpus)]
    rng = np.random.default_rng(run.pk)
    rows, made, day = [], 0, first_day
    while made < slots:
        n = min(per_day, slots - made)
        values = np.full((len(telemetry.SERIES), gpus, per_day), np.nan, dtype="<f4")
        t = np.arange(made, made + n)
        for g in range(gpus):
            values[telemetry.UTIL, g, :n] = 60 + 30 * np.sin(t / 50 + g) + rng.random(n) * 8
            values[telemetry.FB_USED, g, :n] = 40000 + (t % 500) * 20
            values[telemetry.FB_FREE, g, :n] = 81920 - values[telemetry.FB_USED, g, :n]
            values[telemetry.TEMP, g, :n] = 50 + values[telemetry.UTIL, g, :n] / 4
            values[telemetry.POWER, g, :n] = 100 + values[telemetry.UTIL, g, :n] * 3
        rows.append(GpuTelemetry(team_id=run.team_id, ref=run.ref, start=day, step=step, slots=per_day, gpus=ids,
                                 values=telemetry.pack(values)))
        made += n
        day += telemetry.DAY
    GpuTelemetry.objects.bulk_create(rows, batch_size=200)
    for minute in range(60):
        reading = WorkloadTelemetry(tuple(GpuReading(gpu, 80.0, 40000.0, 41920.0, 70.0, 300.0) for gpu in ids))
        telemetry.record(None, {run.identity: reading}, now - timedelta(minutes=59 - minute))


def week_long_run(run, gpus: int) -> tuple[int, int]:
    """A week of 10-minute slots on ``gpus`` GPUs, stored; (rows, bytes of values) it takes."""
    from django.db.models import Sum
    from django.db.models.functions import Length

    from workloads.models import GpuTelemetry

    store_series(run, 7 * 144 - 6, gpus)  # a week: its last hour minute by minute
    stored = GpuTelemetry.objects.filter(ref=run.ref)
    return stored.count(), stored.aggregate(size=Sum(Length("values")))["size"]


def bench_chart(client, run, rounds: int) -> tuple[list[float], list[float]]:
    """(chart query ms per round, raw query ms per round) of ``run``'s stored telemetry."""
    from django.core.serializers.json import DjangoJSONEncoder

    from workloads.telemetry import series as telemetry_series

    path = f"/api/v1/runs/{run.pk}/telemetry/"

    def chart() -> float:
        began = time.perf_counter()
        response = client.get(path, HTTP_X_FORWARDED_PROTO="https")
        assert response.status_code == 200 and response.json()["series"]["util_pct"], response.content[:200]
        return (time.perf_counter() - began) * 1000

    def raw() -> float:
        began = time.perf_counter()
        times, ids, values = telemetry_series._stored(run.team_id, run.ref, None)
        body = {"gpus": ids, "t": times.astype(int).tolist(),
                "series": {name: [[None if v != v else v for v in row.tolist()] for row in values[i]]
                           for i, name in enumerate(telemetry_series.telemetry.SERIES)}}
        json.dumps(body, cls=DjangoJSONEncoder)
        return (time.perf_counter() - began) * 1000

    chart(), raw()  # warm
    charts, raws = [], []
    for i in range(rounds):  # rotating order: neither always goes first
        for which in ((chart, raw) if i % 2 == 0 else (raw, chart)):
            (charts if which is chart else raws).append(which())
    return charts, raws


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=50_000, help="new points through each way in")
    parser.add_argument("--batch", type=int, default=500, help="points per API call (at most 1000)")
    parser.add_argument("--series-points", type=int, default=100_000, help="points of the charted series")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of the chart query against the raw one")
    parser.add_argument("--quick", action="store_true", help="a short run (tests/test_benchmarks.py)")
    args = parser.parse_args(argv)
    points = 2_000 if args.quick else args.points
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_URL
    name = f"{base_url.rsplit('/', 1)[-1] or 'postgres'}_bench_telemetry"
    url = f"{base_url.rsplit('/', 1)[0]}/{name}"
    recreate_database(base_url, name)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "false",
                       "SECRET_KEY": "bench-only-not-a-secret-" + "x" * 40, "ALLOWED_HOSTS": "testserver",
                       "SLIPWAY_SECRET_KEYS": "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQta2V5LTAwMDA=",
                       "SLIPWAY_VAR_DIR": str(scratch_dir("slipway-bench-telemetry-")), "REDIS_URL": REDIS})
    import django

    try:
        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        run, token = seed()
        print(f"Metric ingestion, in-process, DEBUG off, PostgreSQL; {points:,} new points each way:")
        fresh, again, stored = bench_api(Client(), run, token, points, args.batch)
        print(f"  API (POST /runs/{{id}}/metrics/, {args.batch} points a call): {fresh:,.0f} points/s new, "
              f"{again:,.0f} points/s sent again (idempotent: {stored:,} stored, not {2 * stored:,})")
        lines = settings.SLIPWAY_RUN_METRICS_READ_LINES
        rate, _stored = bench_stdout(run, points, lines)
        print(f"  stdout (Katib lines parsed and recorded, {lines:,} lines a read): {rate:,.0f} points/s")
        met = fresh >= TARGET and rate >= TARGET
        print(f"targets: ≥ {TARGET:,.0f} points/s through the API and through stdout — "
              f"{'met' if met else 'NOT met'} (API {fresh:,.0f}, stdout {rate:,.0f})")
        series_points = 10_000 if args.quick else args.series_points
        rounds = 5 if args.quick else args.rounds
        client = Client()
        client.force_login(run.created_by)
        store_series(run, series_points - 60, gpus=1)  # and its last hour: 60 minute rows
        chart, raw = bench_chart(client, run, rounds)
        p95 = percentile(chart, 95)
        from workloads.telemetry.series import CHART_POINTS

        print(f"GPU telemetry chart query, {series_points:,}-point series (5 series, 1 GPU), {rounds} rounds:")
        print(f"  chart (GET /runs/{{id}}/telemetry/, LTTB to {CHART_POINTS} points): median "
              f"{statistics.median(chart):.1f} ms, p95 {p95:.1f} ms; raw (every point, undownsampled): median "
              f"{statistics.median(raw):.1f} ms")
        week = seed_run(run)
        rows, size = week_long_run(week, gpus=8)
        week_chart, _raw = bench_chart(client, week, rounds)
        print(f"  a week-long run on 8 GPUs: {rows} rows, {size / 1024:,.0f} KiB stored; its chart median "
              f"{statistics.median(week_chart):.1f} ms")
        print(f"target: chart query p95 < {CHART_TARGET_MS:.0f} ms — {'met' if p95 < CHART_TARGET_MS else 'NOT met'} "
              f"({p95:.1f} ms)")
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
