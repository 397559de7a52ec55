"""The run token and checkpoint reports of the checkpoint contract (docs/api.md "The checkpoint contract (runs)").

A run submitted with the contract gets a **run token**: 256 random bits behind the prefix
``slr_``, made at submission. Only its SHA-256 is kept on the run (``run_token_hash``), as for
personal tokens; the token itself is sealed with the run's secret env (:mod:`workloads.secrets`,
a key the user does not see) so the apply task can put it in the run's env Secret, which the pods
read as ``SLIPWAY_RUN_TOKEN``. It is never in a manifest, a page or an API answer.

What it can do: report the checkpoints of its own run (``POST /runs/{id}/checkpoints/``), and
nothing else. Every other endpoint reads it as an unknown personal token (401), and it dies
with the run: a run in a final state has no token (its sealed value is dropped then too,
:func:`workloads.lifecycle.release_holdings`).

Reports: the newest report wins, whatever its step. A run resumed from an older checkpoint (or
restarted from scratch) counts its steps again, and the checkpoint it wrote last is the one its
next attempt must resume from; a "highest step" rule would point it at a path that may be gone.

Resuming another run's checkpoint (a sweep's continued trial, docs/sweeps.md "Continue a pruned trial"): a new
run that goes on from where a pruned run stopped mounts that run's claim on that run's cluster and starts from
its last checkpoint (:func:`resume_refusal` says when it cannot, :func:`resumed_fields` what it is created with).
"""

from __future__ import annotations

import posixpath
import re
import secrets as random
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from cluster.status import parse_time
from fleet.constants import State as ClusterState
from jobs import constants as c
from jobs.checkpoint_contract import CHECKPOINT_DIR, provided_claim_name
from jobs.models import TrainingRun
from teams.models import hash_token
from workloads.validation import Collector

#: Tells a run token from a personal one (``slp_``) at a glance, in logs and leak scanners.
RUN_TOKEN_PREFIX = "slr_"
#: Largest step a report may give (a bigint column).
MAX_STEP = 2**63 - 1


def new_run_token() -> tuple[str, str]:
    """``(token, its hash)``: the token for the run's Secret, the hash for its row."""
    token = RUN_TOKEN_PREFIX + random.token_urlsafe(32)
    return token, hash_token(token)


def is_run_token(raw: str) -> bool:
    return raw.startswith(RUN_TOKEN_PREFIX)


def run_for_token(raw: str) -> TrainingRun | None:
    """The live run whose token ``raw`` is, or None (unknown, or the run has ended: the token died with it)."""
    if not is_run_token(raw):
        return None
    return (TrainingRun.objects.exclude(state__in=TrainingRun.FINAL_STATES).exclude(run_token_hash="")
            .filter(run_token_hash=hash_token(raw)).select_related("team").first())


def parse_report(data: Any) -> tuple[int, str]:
    """``{"step": int >= 0, "path": str}`` → ``(step, path)``; ``ValidationError`` with field errors."""
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    col = Collector(data)
    unknown = sorted(str(key) for key in data if key not in ("step", "path"))
    if unknown:
        col.add("non_field_errors", f"Unknown field(s): {', '.join(unknown)[:200]}.")
    if not col.present("step"):
        col.add("step", "This field is required.")
    elif isinstance(data["step"], str):  # JSON types, as every other number of the API (review 5 #9e)
        col.add("step", "Must be a whole number (a JSON integer, not a string).")
    step = col.integer("step", None, 0, MAX_STEP)
    path = col.string("path", max_length=c.MAX_CHECKPOINT_PATH)
    if path and any(ch < " " or ch == "\x7f" for ch in path):
        col.add("path", "Must not contain control characters.")
    elif path:
        contained = contained_path(path)
        if contained is None:
            col.add("path", f"Use a path under the checkpoint directory {CHECKPOINT_DIR} (no '..' out of it).")
        elif len(contained) > c.MAX_CHECKPOINT_PATH:  # a relative path grows by the directory (review 5 #8)
            col.add("path", f"Must be at most {c.MAX_CHECKPOINT_PATH} characters as stored, under "
                            f"{CHECKPOINT_DIR}/ ({len(contained)} here): a relative path at most "
                            f"{c.MAX_CHECKPOINT_PATH - len(CHECKPOINT_DIR) - 1}.")
        path = contained or path
    if col.errors:
        raise ValidationError(col.errors)
    return int(step), path


def contained_path(path: str) -> str | None:
    """``path`` normalised (``a/./b``, ``a//b``, ``a/x/../b`` → ``a/b``) when it names something under the
    checkpoint directory, the only place a next attempt can resume from; None when it leaves it or is it.
    A relative path is taken relative to that directory, as a script started there would mean it."""
    absolute = posixpath.normpath(posixpath.join(CHECKPOINT_DIR, path))
    return absolute if absolute.startswith(CHECKPOINT_DIR + "/") else None


#: The line a run may print instead of POSTing a report (docs/api.md): ``SLIPWAY_CHECKPOINT step=<int> path=<path>``,
#: anywhere in the line (a logger's prefix before it is fine).
#: A line's leading time stamp, e.g. ``2026-11-24T07:21:56Z`` (fractions and offsets allowed).
LOG_STAMP = re.compile(r"\s*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\s")
LOG_LINE = re.compile(r"SLIPWAY_CHECKPOINT step=(\d{1,18}) path=(\S{1,%s})" % str(c.MAX_CHECKPOINT_PATH))  # noqa: UP031 - a regex's braces


def last_in_log(lines: list[str]) -> tuple[int, str, datetime | None] | None:
    """The last checkpoint line among ``lines`` as ``(step, path, when)``, or None.

    ``when``: the line's leading RFC 3339 time stamp when it has one (a logger's, or the cluster's
    with timestamped logs), so lost work counts from when the checkpoint was written, not when the
    portal read it; None without one."""
    for line in reversed(lines):
        found = LOG_LINE.search(line)
        if found:
            path = contained_path(found.group(2))
            if path is None or len(path) > c.MAX_CHECKPOINT_PATH:
                continue  # out of the checkpoint directory, or longer than its column once under it
            stamp = LOG_STAMP.match(line)
            return int(found.group(1)), path, parse_time(stamp.group(1)) if stamp else None
    return None


def resume_refusal(run: TrainingRun, now: datetime) -> str:
    """Why a new run cannot go on from ``run``'s checkpoint, in words ("" when it can).

    It can while ``run`` is pruned (its claim kept ``SLIPWAY_PRUNED_CHECKPOINT_DAYS`` after it ended:
    :func:`workloads.cycle.leftovers.delete_kept`), reported a checkpoint, and its cluster, where the claim
    is, is not lost; and only once (the claim becomes the new run's).
    """
    if run.state != c.RunState.PRUNED:
        return f"run {run.pk} is {run.state}, not pruned: only a pruned run's checkpoint is kept to go on from"
    if run.checkpoint is None:
        return f"run {run.pk} had no checkpoint contract: it saved nothing to go on from"
    if not run.last_checkpoint_path:
        return f"run {run.pk} reported no checkpoint before it was pruned: there is nothing to go on from"
    kept_until = (run.finished_at or now) + timedelta(days=settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS)
    if kept_until < now:
        return (f"run {run.pk}'s checkpoint was kept {settings.SLIPWAY_PRUNED_CHECKPOINT_DAYS} days after it was "
                f"pruned, until {timezone.localtime(kept_until):%Y-%m-%d %H:%M}: it is gone")
    if run.cluster is None or run.cluster.state == ClusterState.LOST:
        where = f"cluster {run.cluster.name}" if run.cluster is not None else "a cluster no longer known"
        return f"run {run.pk}'s checkpoint is on {where}, which is lost"
    taken = TrainingRun.objects.filter(resumes=run).values_list("pk", flat=True).first()
    if taken is not None:
        return f"run {run.pk}'s checkpoint was taken over by run {taken}"
    return ""


def resumed_fields(run: TrainingRun) -> dict[str, Any]:
    """The fields a new run that goes on from ``run``'s checkpoint is created with, beyond its request: placed on
    ``run``'s cluster (the claim is one cluster's), mounting ``run``'s claim (the same size and class: a claim's
    spec cannot change) and resuming from ``run``'s last checkpoint at its first attempt.

    Not ``placed_at``: it may wait in its team's queue first, and that wait is no wait for the cluster's capacity
    (the placement timeout counts from ``placed_at``); its apply stamps it, as any run's
    (:func:`workloads.cycle.placement.place_workload`)."""
    volume = (run.checkpoint or {}).get("volume")
    return {
        "resumes": run,
        "checkpoint_claim": "" if volume else (run.checkpoint_claim or provided_claim_name(run.object_name)),
        "checkpoint_storage": run.checkpoint_storage,
        "checkpoint_storage_class": run.checkpoint_storage_class,
        "last_checkpoint_at": run.last_checkpoint_at,
        "last_checkpoint_step": run.last_checkpoint_step,
        "last_checkpoint_path": run.last_checkpoint_path,
        "cluster": run.cluster,
        "placement_reason": f"on {run.cluster.name}, where run {run.pk}'s checkpoint is",
    }
