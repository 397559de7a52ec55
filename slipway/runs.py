"""The run verbs: ``run`` (submit, ``--watch``), ``ps``, ``describe``, ``logs``, ``checkpoint``, ``cancel``.

Each is one command, found under the ``runs`` group (``slipway runs ps``), as the endpoint
verbs are under ``endpoint``, and also as a top-level verb (``slipway ps``), as it always was
(:mod:`slipway.cli` registers it twice).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

import click

from slipway import polling
from slipway.client import BadRequest, Client, NotSignedIn
from slipway.config import api_call, signed_in
from slipway.failures import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_SIGNED_IN,
    Failure,
    creating,
    idempotency_key,
    refusals,
)
from slipway.insight import progress_words, span_words
from slipway.output import console, dump, fields, money, per_hour, table, unit_price
from slipway.specs import load_spec, refused_spec, show_preview

#: The one way a run ends well (the API's run states); which states are final the API says (``is_final``).
RUN_SUCCEEDED = "succeeded"


@click.group()
def runs() -> None:
    """Training runs: run, ps, describe, logs, metrics, checkpoint, cancel.

    Each is also a top-level verb, as it always was: `slipway ps` is `slipway runs ps`."""


@runs.command()
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The run's spec: YAML or JSON with the API's fields (team, name, image, command, flavor, …).")
@click.option("--team", help="Team slug (overrides the spec's `team`).")
@click.option("--dry-run", is_flag=True, help="Only show the admission decision, cost estimate and estimated start.")
@click.option("--watch", is_flag=True, help="Follow the run's state until it ends: exit 0 on success, 1 otherwise "
                                           "(130 when Ctrl-C stops the watch; the run goes on).")
@click.option("--idempotency-key", "given_key",
              help="Reuse the key of an earlier attempt: the same key never creates a second run.")
@click.option("--reservation", type=click.IntRange(min=1), metavar="ID",
              help="The team's reservation the run is for (overrides the spec's `for_reservation`): it goes into "
                   "that booking's window and waits for it (`slipway reserve ls` shows the ids).")
@api_call
def run(client: Client, spec_file: Path, team: str | None, dry_run: bool, watch: bool,
        given_key: str | None, reservation: int | None) -> None:
    """Submit a training run from a spec file."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    if reservation is not None:
        spec["for_reservation"] = reservation
    key = idempotency_key(given_key)
    try:
        if dry_run:
            sys.exit(show_preview(client.dry_run(spec)))
        # A submission is not resent by itself; the same key makes resending it safe.
        with creating("run", key):
            created = client.submit_run(spec, idempotency_key=key)
    except BadRequest as exc:
        raise refused_spec(spec_file, exc) from exc
    click.echo(f"run {created['id']} {created['name']}: {created['state']}"
               + (f" ({created['reason']})" if created.get("reason") else ""))
    if watch:
        try:
            code = watch_run(client, created["id"])
        except KeyboardInterrupt:
            # Not the watched run's failure (exit 1): the watch stopped, the run goes on.
            raise Failure(f"stopped watching run {created['id']}; it goes on (`slipway describe {created['id']}`, "
                          f"`slipway cancel {created['id']}`)", EXIT_INTERRUPTED) from None
        sys.exit(code)


def watch_run(client: Client, run_id: int, interval: float = polling.FOLLOW_INTERVAL) -> int:
    """Follow a run's state (a live line on a terminal, a line per change otherwise) until it ends."""
    out = console()
    last = None
    with out.status("") if out.is_terminal else contextlib.nullcontext() as status:
        for current in client.watch_run(run_id, interval=interval, wait=polling.pause):
            line = f"run {run_id}: {current['state']}" + (f" — {current['reason']}" if current.get("reason") else "")
            if status is not None and not current["is_final"]:
                status.update(line)
            elif line != last:
                click.echo(line)
            last = line
    # The last poll is the one that found it ended.
    return 0 if current["state"] == RUN_SUCCEEDED else EXIT_FAILED


RUN_COLUMNS = ["ID", "TEAM", "NAME", "STATE", "FLAVOR", "GPUS", "CREATED"]


def run_row(run: dict, wide: bool) -> list:
    gpus = run["gpus_per_worker"] * run["workers"]
    row = [run["id"], run["team"], run["name"], run["state"], run["flavor"], gpus, run["created_at"][:16]]
    if wide:
        row += [run.get("queue_position"), money(run["cost_to_date"], run.get("currency", "")), run["created_by"],
                run.get("reason")]
    return row


@runs.command()
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table", show_default=True,
              help="wide: also queue position, cost, author and reason; json/yaml: the API's fields.")
@click.option("--team", help="Only this team's runs.")
@click.option("--state", help="Only runs in this state (queued, running, failed, …) or set of states (active, "
                              "holding, unfinished).")
@click.option("--limit", type=click.IntRange(min=0), default=50, show_default=True, help="At most this many (0: all).")
@click.option("--all-teams", is_flag=True, help="Every team's runs, not only your teams' (platform staff only).")
@api_call
def ps(client: Client, output: str, team: str | None, state: str | None, limit: int, all_teams: bool) -> None:
    """List the runs of your teams, newest first."""
    runs = []
    for item in client.runs(team=team, state=state, all_teams=all_teams):
        runs.append(item)
        if limit and len(runs) >= limit:
            break
    if output in ("json", "yaml"):
        dump(runs, output)
        return
    wide = output == "wide"
    table(RUN_COLUMNS + (["QUEUE", "COST", "BY", "REASON"] if wide else []), [run_row(r, wide) for r in runs])


@runs.command()
@click.argument("run_ref", metavar="RUN")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
@api_call
def describe(client: Client, run_ref: str, output: str) -> None:
    """Show one run (its id, or its name in your teams): state and reason, queue, attempts, checkpoint.

    Also its estimated start, preemptions, last checkpoint, cost and the cluster's events. A name several of
    your runs carry means the one not ended; if that is not one run, the runs are listed to pick an id."""
    run_id = client.workload_id("runs/", run_ref, "run")
    run = client.run(run_id)
    if output != "text":
        dump(run, output)
        return
    checkpoint = run.get("last_checkpoint")
    fields([
        ("Run", f"{run['id']} {run['name']}"), ("Team", run["team"]), ("State", run["state"]),
        ("Reason", run.get("reason")), ("Queue position", run.get("queue_position")),
        # The server's words for it (its range and bound: docs/api.md "Start estimates"), as the page says it.
        ("Estimated start", run.get("start_estimate") or run.get("estimated_start_at")), ("Created", f"{run['created_at']} by {run['created_by']}"),
        ("Started", run.get("started_at")), ("Finished", run.get("finished_at")),
        ("Image", run["image"]), ("Command", " ".join(run["command"] + (run.get("args") or []))),
        ("Flavor", f"{run['flavor']} × {run['gpus_per_worker']} per worker, {run['workers']} worker(s)"),
        ("Runs as", f"{run.get('resource_kind')} ({run.get('framework')})"),
        ("Progress", progress_words(run.get("progress"))),
        ("Attempt", f"{run['attempt']} (up to {run['max_retries']} retries)"),
        ("Runtime limit", runtime_limit_words(run)),
        ("Last checkpoint", f"step {checkpoint['step']} at {checkpoint['at']}: {checkpoint['path']}" if checkpoint
         else ("none reported yet" if run.get("checkpoint") else None)),
        ("Cost to date", money(run["cost_to_date"], run.get("currency", ""))),
        ("Cost/hour", per_hour(run.get("estimated_cost_per_hour"), run.get("currency", ""))), ("Price", unit_price(run)),
        ("Kubernetes", run.get("object_name")),
        ("Borrowed", f"{run['borrowed_units']} units, preemptible" if run.get("borrowed_units") else None),
        ("Preemptions", f"{run['preemptions']}, last at {run['last_preempted_at']}" if run.get("preemptions") else None),
    ])
    if run.get("preemptions"):
        click.echo("Preemptions:")
        for row in client.preemptions(run_id):
            # The reason says who took what ("preempted: team vision reclaimed …"): nothing before it repeats it.
            click.echo(f"  {row['at']} {row['reason']}")
    events = client.events(run_id)
    if events:
        click.echo("Events:")
        for event in events:
            click.echo(f"  {event.get('time') or ''} {event.get('type', '')} {event.get('reason', '')}: "
                       f"{event.get('message', '')}")


def runtime_limit_words(run: dict) -> str | None:
    """"30 min", or "30 min; its earlier attempts ran 12 min" (a limit counts every attempt: what they ran is
    not the current attempt's); None without a limit."""
    limit = run.get("max_runtime_minutes")
    if not limit:
        return None
    earlier = run.get("earlier_run_seconds") or 0
    return f"{limit} min" + (f"; its earlier attempts ran {span_words(earlier)}" if earlier else "")


@runs.command()
@click.argument("run_id", type=int)
@click.option("--tail", type=click.IntRange(1, 5000), default=200, show_default=True, help="Last lines to show.")
@click.option("--pod", help="Another pod of the run (a worker, an earlier attempt); see `describe`.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("--attempt", type=click.IntRange(min=1),
              help="An earlier attempt of a run queued again (preempted): its log as saved when its pods stopped.")
@api_call
def logs(client: Client, run_id: int, tail: int, pod: str | None, follow: bool, attempt: int | None) -> None:
    """Print a run's log (the Master's, or the newest pod's) of its current attempt, or of --attempt."""
    if follow and attempt is not None:
        raise click.UsageError("--follow reads the current attempt; an earlier attempt's saved log does not change")
    for line in client.log_lines(run_id, tail=tail, pod=pod, follow=follow, interval=polling.FOLLOW_INTERVAL,
                                 wait=polling.pause, attempt=attempt):
        click.echo(line)


#: ``SLIPWAY_CHECKPOINT_URL`` as the portal sets it in a run's pods: the portal's address and the run's id.
CHECKPOINT_URL = re.compile(r"^(?P<base>https?://.+?)/api/v1/runs/(?P<run>\d+)/checkpoints/?$")


@runs.command()
@click.argument("run_id", type=int, required=False)
@click.option("--step", type=click.IntRange(min=0), required=True, help="The training step it holds.")
@click.option("--path", "checkpoint_path", required=True,
              help="Where it is (under $SLIPWAY_CHECKPOINT_DIR): the next attempt's SLIPWAY_RESUME_FROM.")
@click.pass_context
def checkpoint(ctx: click.Context, run_id: int | None, step: int, checkpoint_path: str) -> None:
    """Report a run's checkpoint, from inside the run.

    A preempted or retried run resumes from the last checkpoint reported.

    Inside a run with the checkpoint contract it needs nothing else: it reports with the run's
    own token (SLIPWAY_RUN_TOKEN, to SLIPWAY_CHECKPOINT_URL), or, where the portal gave the run
    no URL, prints the SLIPWAY_CHECKPOINT line the portal reads from the log. Anywhere else,
    give the RUN_ID: it reports as you (a member of the run's team).
    """
    run_token = os.environ.get("SLIPWAY_RUN_TOKEN")
    if run_token and run_id is None:
        where = CHECKPOINT_URL.match(os.environ.get("SLIPWAY_CHECKPOINT_URL", ""))
        if where is None:
            click.echo(f"SLIPWAY_CHECKPOINT step={step} path={checkpoint_path}")
            click.echo("No SLIPWAY_CHECKPOINT_URL in this run: the line above reports the checkpoint through the "
                       "run's log.", err=True)
            return
        run_id = int(where["run"])
        with refusals(), Client(where["base"], run_token) as client:
            try:
                recorded = client.report_checkpoint(run_id, step, checkpoint_path)
            except NotSignedIn as exc:
                raise Failure("the run token was refused: has the run ended? (it works only in the run's own pods)",
                              EXIT_NOT_SIGNED_IN) from exc
    elif run_id is None:
        raise click.UsageError("give the RUN_ID (outside a run there is no SLIPWAY_RUN_TOKEN to tell which)")
    else:
        with signed_in(ctx.obj["profile"]) as client:
            recorded = client.report_checkpoint(run_id, step, checkpoint_path)
    click.echo(f"run {run_id}: checkpoint at step {recorded['step']} recorded ({recorded['path']})")


@runs.command()
@click.argument("run_id", type=int)
@api_call
def cancel(client: Client, run_id: int) -> None:
    """Cancel a run: it ends `cancelled` and its quota is released."""
    run = client.cancel_run(run_id)
    click.echo(f"run {run['id']} {run['name']}: {run['state']}")
