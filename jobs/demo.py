"""Demo training runs for ``manage.py seed_demo``: a lively mix that progresses on its own.

The sandbox reads ``SLIPWAY_SIM_DURATION`` / ``SLIPWAY_SIM_OUTCOME`` from a run's env, so
the demo shows every path a real cluster takes: quick successes, an out-of-memory failure,
a bad image, a run that fails once and recovers on its retry, a long distributed run, a
MIG-slice run, work queued behind quota, and a reclaim: ML Research borrows the H100s its
cohort partner NLP Platform leaves idle, and two minutes later NLP submits work of its own
(:data:`DEMO_LATER`) and takes them back. Each has a runtime limit a little above its
running time, as a team on a budget sets them (a run without one counts against the budget
until the month's end), except the forgotten notebook, which is the point of its story. Runs go
through :func:`jobs.services.submit_run` like any other, so admission and the queue are real.
Idempotent: a team that already has runs gets no more. Three runs of the history have training
metrics to chart and compare (:data:`DEMO_METRICS`); the live ones print theirs as they train, and their
GPUs' telemetry (the sandbox's simulated exporter) charts their phases, an idle stretch and a memory leak.

"Later" is a :class:`jobs.models.LaterDemoRun` row with its due time, which
:func:`submit_due_demo_runs` (a beat task, :mod:`jobs.tasks`) submits once due.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from billing.pricing import PriceBook
from billing.segments import bill_past
from fleet.models import GpuFlavor
from fleet.services import clusters as fleet_clusters
from jobs import metrics
from jobs.constants import RunState
from jobs.metric_lines import Point, ProgressMark
from jobs.models import LaterDemoRun, TrainingRun
from jobs.services import submit_run
from teams.models import Team
from workloads.models import ReasonCode

logger = logging.getLogger(__name__)

IMAGE = "registry.example.com/ml/trainer:2.4"

#: (team, user, run fields)
DEMO_RUNS: tuple[tuple[str, str, dict], ...] = (
    ("ml-research", "alice", {"name": "bert-finetune", "max_runtime_minutes": 5, "flavor": "a100-80gb", "gpus_per_worker": 2,
                              "env": {"SLIPWAY_SIM_DURATION": "90s"}}),
    # Its GPU telemetry shows a run's phases (docs/metrics.md): loading, training with three evaluations,
    # and idle for its last five minutes — stuck after its training loop, its 8 GPUs held.
    ("ml-research", "alice", {"name": "llama-pretrain", "max_runtime_minutes": 20, "flavor": "h100-80gb", "gpus_per_worker": 4, "workers": 2,
                              "priority": "high", "shm_gb": 64,
                              "env": {"SLIPWAY_SIM_DURATION": "15m", "SLIPWAY_SIM_IDLE_AFTER": "10m"}}),
    ("ml-research", "alice", {"name": "resnet-oom", "max_runtime_minutes": 5, "flavor": "a100-80gb", "gpus_per_worker": 1, "max_retries": 0,
                              "env": {"SLIPWAY_SIM_DURATION": "40s", "SLIPWAY_SIM_OUTCOME": "oom"}}),
    ("ml-research", "bob", {"name": "sweep-lr-3e-4", "max_runtime_minutes": 5, "flavor": "a100-80gb", "gpus_per_worker": 4,
                            "env": {"SLIPWAY_SIM_DURATION": "3m"}}),
    # Needs 4 while 7 of 8 A100s are held: waits in the queue until bert-finetune finishes.
    ("ml-research", "bob", {"name": "sweep-lr-1e-4", "max_runtime_minutes": 5, "flavor": "a100-80gb", "gpus_per_worker": 4,
                            "env": {"SLIPWAY_SIM_DURATION": "2m"}}),
    ("ml-research", "alice", {"name": "tokenizer-eval", "max_runtime_minutes": 5, "flavor": "a100-1g.10gb", "gpus_per_worker": 1,
                              "env": {"SLIPWAY_SIM_DURATION": "2m"}}),
    # A memory leak: its GPUs' memory climbs from 30 GiB until it fills them (the memory chart, OOM risk).
    # Over 95 % (76 GiB) after about 4 minutes, it runs on full long enough for the OOM-risk alert's
    # 5 minutes (SLIPWAY_ALERT_MEMORY_MINUTES): the alert opens about 9 minutes in, before it ends at 12.
    ("vision", "dave", {"name": "yolo-train", "max_runtime_minutes": 15, "flavor": "a100-80gb", "gpus_per_worker": 4,
                        "env": {"SLIPWAY_SIM_DURATION": "12m", "SLIPWAY_SIM_GPU_MEMORY_GB": "30",
                                "SLIPWAY_SIM_GPU_MEMORY_LEAK": "12"}}),
    # Spot capacity exists only among the L4 nodes of the sandbox's inventory.
    ("vision", "dave", {"name": "clip-eval-spot", "max_runtime_minutes": 5, "flavor": "l4", "gpus_per_worker": 1, "spot": True,
                        "env": {"SLIPWAY_SIM_DURATION": "3m"}}),
    ("vision", "dave", {"name": "vit-typo-image", "max_runtime_minutes": 10, "flavor": "l4", "gpus_per_worker": 1,
                        # A tag the sandbox's registry does not hold (sandbox/inventory.yaml): the
                        # kubelet's ErrImagePull, then ImagePullBackOff, and it fails within a minute.
                        "image": "registry.example.com/vision/vit:does-not-exist"}),
    # Its first attempt dies (a flaky data loader) and the retry succeeds: the run page says
    # "attempt 2 of 3; attempt 1 ended: Error (exit 1)" and keeps attempt 1's log in the picker.
    ("nlp", "erin", {"name": "t5-flaky-loader", "max_runtime_minutes": 10, "flavor": "h100-80gb", "gpus_per_worker": 2,
                     "env": {"SLIPWAY_SIM_DURATION": "90s", "SLIPWAY_SIM_OUTCOME": "fail",
                             "SLIPWAY_SIM_FAILED_ATTEMPTS": "1"}}),
    # A forgotten interactive run: its GPU barely works, so its time shows as idle-GPU waste.
    ("vision", "dave", {"name": "notebook-forgotten", "flavor": "l4", "gpus_per_worker": 1,
                        "env": {"SLIPWAY_SIM_DURATION": "8h", "SLIPWAY_SIM_GPU_UTIL": "2"}}),
    # Borrowed: llama-pretrain holds ML Research's 8 H100s and t5-flaky-loader 2 of NLP's 8, so
    # these 6 are NLP's idle ones, lent by the "research" cohort (seed_demo). Preemptible: when
    # t5-distill (DEMO_LATER) queues, NLP reclaims them, and this run goes back to the queue. It
    # has the checkpoint contract: it checkpoints every 30 s and on the notice, so its next
    # attempt resumes where it stopped ("resuming from step k" in its log).
    ("ml-research", "alice", {"name": "llama-ablation", "max_runtime_minutes": 30, "flavor": "h100-80gb",
                              "gpus_per_worker": 2, "workers": 3, "checkpoint": {"grace_seconds": 30},
                              "env": {"SLIPWAY_SIM_DURATION": "20m", "SLIPWAY_SIM_CHECKPOINT_EVERY": "30s",
                                      "SLIPWAY_SIM_HONOUR_NOTICE": "1"}}),
)

#: Runs submitted a while after seeding: (team, user, seconds after seeding, run fields).
DEMO_LATER: tuple[tuple[str, str, int, dict], ...] = (
    # NLP, under its nominal quota, wants 4 of its H100s back: none is free (llama-ablation
    # borrowed them), so it queues and the cohort's reclaim preempts the borrowed run for it.
    ("nlp", "erin", 120, {"name": "t5-distill", "max_runtime_minutes": 10, "flavor": "h100-80gb", "gpus_per_worker": 4,
                          "env": {"SLIPWAY_SIM_DURATION": "4m"}}),
)

#: Finished runs of the past two weeks, so the Usage page's charts have a history:
#: (team, user, name, flavor, GPUs, days ago, hours run, of which idle at the end).
DEMO_HISTORY: tuple[tuple[str, str, str, str, int, int, float, float], ...] = (
    ("ml-research", "alice", "bert-base-sweep", "a100-80gb", 4, 13, 6.0, 0.0),
    ("ml-research", "bob", "llama-sft-v1", "h100-80gb", 8, 11, 9.5, 0.5),
    ("ml-research", "alice", "eval-harness", "a100-1g.10gb", 1, 10, 3.0, 1.5),
    ("ml-research", "bob", "llama-sft-v2", "h100-80gb", 8, 8, 11.0, 0.0),
    ("ml-research", "alice", "dpo-ablation", "a100-80gb", 2, 6, 5.0, 2.0),
    ("ml-research", "alice", "bert-distill", "a100-80gb", 4, 3, 4.0, 0.0),
    ("ml-research", "bob", "reward-model", "h100-80gb", 4, 2, 7.0, 1.0),
    ("vision", "dave", "yolo-baseline", "a100-80gb", 4, 12, 5.0, 0.0),
    ("vision", "dave", "seg-notebook", "l4", 1, 9, 8.0, 6.0),
    ("vision", "dave", "clip-finetune", "a100-80gb", 2, 5, 6.5, 0.5),
    ("vision", "dave", "detector-export", "l4", 2, 1, 2.0, 0.0),
    ("nlp", "erin", "t5-pretrain", "h100-80gb", 8, 10, 12.0, 0.0),
    ("nlp", "erin", "tokenizer-train", "h100-80gb", 1, 7, 3.0, 2.5),
    ("nlp", "erin", "t5-long-context", "h100-80gb", 8, 4, 10.0, 1.0),
)


#: Finished demo runs with a training history to chart and compare (docs/metrics.md): name → (steps,
#: the loss it starts at, the loss it ends near). Every demo run that trains now prints its metrics too.
DEMO_METRICS: dict[str, tuple[int, float, float]] = {
    "bert-base-sweep": (2000, 2.6, 0.42),
    "bert-distill": (2000, 2.4, 0.55),
    "dpo-ablation": (1200, 1.9, 0.61),
}


def demo_metrics(run: TrainingRun) -> int:
    """Record ``run``'s demo training history (:data:`DEMO_METRICS`): loss and accuracy every 10 steps,
    as its log would have printed them, and its progress to its last step. Returns the points stored."""
    steps, start, end = DEMO_METRICS[run.name]
    began, took = run.started_at, run.finished_at - run.started_at
    points, marks = [], []
    for step in range(0, steps + 1, 10):
        fraction = step / steps
        at = began + took * fraction
        wobble = 0.015 * math.sin(step / 37.0)
        loss = end + (start - end) * math.exp(-4.0 * fraction) + wobble
        points += [Point(step, "loss", round(loss, 4), at), Point(step, "accuracy", round(0.5 + 0.45 * (1 - math.exp(
            -3.0 * fraction)) - wobble, 4), at)]
        if step % 100 == 0:
            marks.append(ProgressMark(step, steps, at))
    return metrics.record(run, points, marks, run.finished_at)


def seed_demo_runs(slugs: Collection[str] | None = None, now: datetime | None = None) -> list[TrainingRun]:
    """Submit the demo runs of every demo team (of those ``slugs``) that has no runs yet, and
    schedule its :data:`DEMO_LATER` runs (from ``now``)."""
    now = now or timezone.now()
    names = {u for _, u, _ in DEMO_RUNS} | {u for _, u, _, _ in DEMO_LATER}
    users = {u.username: u for u in get_user_model().objects.filter(username__in=names)}
    wanted = {t for t, _, _ in DEMO_RUNS + tuple((t, u, f) for t, u, _, f in DEMO_LATER)
              if slugs is None or t in slugs}
    teams = {t.slug: t for t in Team.objects.filter(slug__in=wanted)}
    fresh = {slug for slug, team in teams.items() if not TrainingRun.objects.filter(team=team).exists()}
    LaterDemoRun.objects.bulk_create([
        LaterDemoRun(team=teams[slug], created_by=users[username], spec=fields, due_at=now + timedelta(seconds=delay))
        for slug, username, delay, fields in DEMO_LATER if slug in fresh and username in users])
    created = []
    for slug, username, fields in DEMO_RUNS:
        if slug not in fresh or username not in users:
            continue
        data = {"image": IMAGE, "command": ["python", "train.py"], "args": ["--config", "configs/demo.yaml"],
                **fields}
        try:
            created.append(submit_run(users[username], teams[slug], data))
        except ValidationError as exc:  # e.g. an admin lowered the demo quota: skip, say why
            logger.warning("demo run %s/%s not submitted: %s", slug, fields["name"], exc.messages)
    return created


#: How far ahead :func:`hold_later_demo_runs` puts the later runs: out of beat's reach until the clock starts.
HELD_FOR = timedelta(days=1)


def hold_later_demo_runs(now: datetime | None = None) -> int:
    """Keep the :class:`LaterDemoRun` rows not submitted yet from coming due (``manage.py demo_clock hold``).

    ``scripts/run.sh`` holds them before it starts the services and starts the clock
    (:func:`start_later_demo_runs`) once the portal answers: the demo's reclaim is told in minutes
    from then (README "Watch a reclaim"), however long a cold start took since seeding.
    """
    now = now or timezone.now()
    return LaterDemoRun.objects.filter(submitted_at__isnull=True).update(due_at=now + HELD_FOR)


def start_later_demo_runs(now: datetime | None = None) -> list[LaterDemoRun]:
    """Make each :class:`LaterDemoRun` not submitted yet due its delay (:data:`DEMO_LATER`) from ``now``
    (``manage.py demo_clock start``); a row the demo does not define keeps its time. Returns the rows, earliest first."""
    now = now or timezone.now()
    delays = {(slug, fields["name"]): delay for slug, _user, delay, fields in DEMO_LATER}
    rows = list(LaterDemoRun.objects.filter(submitted_at__isnull=True).select_related("team"))
    for row in rows:
        delay = delays.get((row.team.slug, row.spec.get("name")))
        if delay is not None:
            LaterDemoRun.objects.filter(pk=row.pk, submitted_at__isnull=True).update(due_at=now + timedelta(seconds=delay))
            row.due_at = now + timedelta(seconds=delay)
    return sorted(rows, key=lambda row: row.due_at)


def later_demo_run_line(row: LaterDemoRun) -> str:
    """"NLP Platform submits t5-distill at 14:02:10": when the demo's later run comes."""
    return f"{row.team.name} submits {row.spec.get('name')} at {timezone.localtime(row.due_at):%H:%M:%S}"


def submit_due_demo_runs(now: datetime | None = None) -> list[TrainingRun]:
    """Submit the :class:`LaterDemoRun` rows due by ``now``, each once; returns the runs submitted.

    Safe to run twice and side by side (beat may fire while the last call still runs): a row
    is taken with ``SKIP LOCKED`` and marked in the transaction that submits its run. A run
    that cannot be submitted (an admin removed the quota, the name is taken) is marked with why.
    """
    now = now or timezone.now()
    submitted = []
    while True:
        with transaction.atomic():
            row = (LaterDemoRun.objects.select_for_update(skip_locked=True).select_related("team", "created_by")
                   .filter(submitted_at__isnull=True, due_at__lte=now).first())
            if row is None:
                return submitted
            data = {"image": IMAGE, "command": ["python", "train.py"], "args": ["--config", "configs/demo.yaml"],
                    **row.spec}
            try:
                with transaction.atomic():
                    run = submit_run(row.created_by, row.team, data)
            except (ValidationError, PermissionDenied, Http404) as exc:
                why = "; ".join(getattr(exc, "messages", None) or [str(exc) or type(exc).__name__])
                row.outcome = f"not submitted: {why}"[:300]
                logger.warning("later demo run %s/%s not submitted: %s", row.team.slug, row.spec.get("name"), why)
            else:
                row.outcome = f"submitted as run {run.pk} ({run.state})"
                submitted.append(run)
            row.submitted_at = now
            row.save(update_fields=["submitted_at", "outcome"])


def seed_demo_history(slugs: Collection[str] | None = None) -> list[TrainingRun]:
    """Record the demo teams' (of those ``slugs``) finished runs of the past two weeks with their ledger time.

    History cannot be submitted (admission happens now), so these rows are written as the
    reconciler would have left them: final, with their running time billed to the ledger (the
    last ``idle`` hours as idle GPU time). A run whose flavor an admin deleted is skipped.
    """
    users = {u.username: u for u in get_user_model().objects.filter(username__in={h[1] for h in DEMO_HISTORY})}
    teams = {t.slug: t for t in Team.objects.filter(slug__in={h[0] for h in DEMO_HISTORY})}
    flavors = {f.name: f for f in GpuFlavor.objects.filter(name__in={h[3] for h in DEMO_HISTORY})}
    clusters, book = {c.name: c for c in fleet_clusters()}, PriceBook()
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    created = []
    with transaction.atomic():
        for slug, username, name, flavor, gpus, days_ago, hours, idle in DEMO_HISTORY:
            team, user, gpu = teams.get(slug), users.get(username), flavors.get(flavor)
            if (slugs is not None and slug not in slugs) or None in (team, user, gpu):
                continue
            started = midnight - timedelta(days=days_ago) + timedelta(hours=9)
            busy_until, finished = started + timedelta(hours=hours - idle), started + timedelta(hours=hours)
            run = TrainingRun(
                team=team, created_by=user, name=name, flavor=gpu, image=IMAGE, command=["python", "train.py"],
                gpus_per_worker=gpus, state=RunState.SUCCEEDED, reason="Completed", reason_code=ReasonCode.CLUSTER, admitted_at=started,
                started_at=started, finished_at=finished)
            # Placed where placement would place it, and billed by the live rule at that cluster's price
            # (billing.segments.bill_past): its page, the API and the ledger then say one price.
            quote = run.price_quote(book)
            run.cluster = clusters.get(quote.cluster) or next(  # none has room now: one charging the quote's price
                (c for c in clusters.values() if book.price_on(gpu, False, c.pk) == quote.price), None)
            run.placed_at = started if run.cluster else None
            run.save()
            bill_past(run, started, [(started, gpus, False)] + ([(busy_until, gpus, True)] if idle else []), finished)
            # Submitted a few minutes before it started, as the list's order (newest first) expects.
            TrainingRun.objects.filter(pk=run.pk).update(created_at=started - timedelta(minutes=4))
            if name in DEMO_METRICS:
                demo_metrics(run)
            created.append(run)
    return created
