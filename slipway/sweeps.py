"""``slipway sweep``: hyperparameter search whose trials are the team's runs (docs/sweeps.md) — create (``--dry-run``:
its shape and cost range first), ls, watch, best, continue (a pruned trial), stop, delete.

A sweep file is read as a run's spec file is (:func:`slipway.specs.load_spec`: YAML or JSON with the API's fields),
and a field the API refuses is said with its line in the file (``run.image``, ``parameters.lr``).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.text import Text

from slipway import polling
from slipway.client import SWEEP_FINAL_STATES, BadRequest, Client
from slipway.config import api_call
from slipway.failures import EXIT_FAILED, Failure, creating, idempotency_key
from slipway.output import console, dump, fields, grid, money, per_hour, table, unit_price
from slipway.specs import load_spec, refused_spec

#: Seconds between two polls of a watched sweep: its driver acts every few seconds (SLIPWAY_SWEEP_SECONDS).
WATCH_INTERVAL = 5.0

TRIAL_COLUMNS = ["#", "NAME", "STATE", "PARAMS", "STEP", "OBJECTIVE", "BEST", "COST"]


def number(value: Any) -> str | None:
    """A parameter's or an objective's value, compactly: ``0.0003142``, ``64``, ``adamw`` (None stays None)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return None if value is None else str(value)


def compact(params: dict) -> str:
    """``lr=0.0003142 batch=64``: a trial's parameters on one line."""
    return " ".join(f"{name}={number(value)}" for name, value in params.items())


# -- what a sweep's answers say ---------------------------------------------------------------------


def counts_words(counts: dict[str, int]) -> str:
    """``3 active, 4 completed, 5 pruned`` (the states it has trials in), or ``no trials yet``."""
    said = [f"{n} {state}" for state, n in counts.items() if n]
    return ", ".join(said) or "no trials yet"


def best_words(sweep: dict) -> str:
    best = sweep.get("best_trial")
    if not best:
        return "no best trial yet"
    return f"best {best['name']} {sweep['objective']['metric']} {number(best['value'])}"


def spend_words(sweep: dict) -> str:
    """``spent 12.40 USD + committed 8.00 USD of a 40.00 USD cap`` (and the GPU-hours' cap when it has one)."""
    spend = sweep["spend"]
    currency = spend.get("currency", "")
    words = f"spent {money(spend['spent'], currency)} + committed {money(spend['committed'], currency)}"
    words += f" of a {money(sweep['max_cost'], currency)} cap" if sweep.get("max_cost") is not None else ", no cap"
    if sweep.get("max_gpu_hours") is not None:
        words += (f"; {spend['gpu_hours']} + {spend['committed_gpu_hours']} of a {sweep['max_gpu_hours']} "
                  "GPU-hour cap")
    return words


def header(sweep: dict) -> list[str]:
    """The watch's header: its state, trials by state, best so far, spend against the cap; why, when it says."""
    lines = [f"sweep {sweep['id']} {sweep['name']}: {sweep['state']}; {counts_words(sweep['trials'])}; "
             f"{best_words(sweep)}; {spend_words(sweep)}"]
    if sweep.get("reason"):
        lines.append(sweep["reason"])
    return lines


def trial_rows(trials: list[dict], currency: str) -> list[list[Any]]:
    rows = []
    for trial in trials:
        state = trial["state"]
        if state == "active" and trial.get("run_state"):
            state = f"active ({trial['run_state']})"  # queued, running…: its run's state, in the run's words
        rows.append([trial["number"], trial["name"], state, compact(trial["params"]), trial.get("step"),
                     number(trial.get("objective")), number(trial.get("best")), money(trial["cost"], currency)])
    return rows


def show_shape(shape: dict) -> None:
    """A dry run's answer: the sweep's shape, one trial's price and cost, the cost range, the cap."""
    trial, cost, hours = shape["trial"], shape["cost"], shape["gpu_hours"]
    currency = cost.get("currency") or trial.get("currency", "")
    low_words = {"asha": "as ASHA's rungs stop trials", "median": "as median stopping stops trials"}.get(
        shape["pruner"], "no pruning: every trial to its limit")
    cap = None
    if shape.get("max_cost") is not None or shape.get("max_gpu_hours") is not None:
        caps = [money(shape["max_cost"], currency) if shape.get("max_cost") is not None else None,
                f"{shape['max_gpu_hours']} GPU-hours" if shape.get("max_gpu_hours") is not None else None]
        within = shape.get("trials_within_cap")
        cap = " and ".join(c for c in caps if c) + (
            f": {within} of {shape['trials']} whole trials within it" if within is not None
            else f": all {shape['trials']} trials within it")
    head = [("Trials", shape["trials"]), ("Parallel", f"{shape['parallel']} at a time"),
            ("Sampler", shape["sampler"]), ("Pruner", shape["pruner"])]
    tail = [
        ("First trial", f"{trial['outcome']} ({trial['message']})" if trial.get("message") else trial["outcome"]),
        ("Estimated start", trial.get("start") or ("now" if trial["outcome"] == "admit" else None)),
        ("Price", unit_price(trial)), ("Cost/hour", per_hour(trial.get("cost_per_hour"), trial.get("currency", ""))),
        ("Whole trial", f"{money(trial['cost'], currency)}, {trial['gpu_hours']} GPU-hours (to its runtime limit)"),
        ("Cost", f"{money(cost['low'], '')}\u2013{money(cost['high'], currency)} (low: {low_words}; "
                 f"high: every trial to its runtime limit{', within the cap' if cap else ''})"),
        ("GPU-hours", f"{hours['low']}\u2013{hours['high']}"),
        ("Cap", cap or "none (the file sets no max_cost or max_gpu_hours)"),
    ]
    # One column of labels across both blocks: a label with no value is not printed but counts for the width.
    fields(head + [(label, None) for label, _ in tail])
    if shape.get("rungs"):
        click.echo("Rungs:")
        out = console()
        with out.capture() as captured:
            out.print(grid(["STEPS", "TRIALS REACHING IT"],
                            [[f"{r['steps']:,}", r["trials"]] for r in shape["rungs"]]))
        click.echo("\n".join(f"  {line}".rstrip() for line in captured.get().splitlines()))
    fields([(label, None) for label, _ in head] + tail)
    for warning in trial.get("warnings") or []:
        click.echo(f"Warning: {warning}")


# -- the verbs --------------------------------------------------------------------------------------


@click.group()
def sweep() -> None:
    """Hyperparameter search on the queue: create, ls, watch, best, continue, stop, delete.

    Each trial is an ordinary run of the team, named <sweep>-t001, admitted like any. See what a sweep
    would cost first with `slipway sweep create -f FILE --dry-run`. `slipway sweeps` is the same group."""


@sweep.command("create")
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The sweep file: YAML or JSON with the API's fields (team, name, run, parameters, objective, "
                   "sampler, pruner, parallel, max_trials, max_cost, …; docs/sweeps.md).")
@click.option("--team", help="Team slug (overrides the file's `team`).")
@click.option("--dry-run", is_flag=True,
              help="Only show its shape and cost range (trials, ASHA's rungs, a trial's price, the cap); nothing is "
                   "created.")
@click.option("--idempotency-key", "given_key",
              help="Reuse the key of an earlier attempt: the same key never creates a second sweep.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True,
              help="json/yaml: the API's answer (the sweep, or the dry run's shape).")
@api_call
def sweep_create(client: Client, spec_file: Path, team: str | None, dry_run: bool, given_key: str | None,
                 output: str) -> None:
    """Create a sweep from its file: its first trials launch at once."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    key = idempotency_key(given_key)
    try:
        if dry_run:
            answer = client.dry_run_sweep(spec)
        else:
            with creating("sweep", key):
                answer = client.create_sweep(spec, idempotency_key=key)
    except BadRequest as exc:  # field errors, each with its line in the file; exit 2
        raise refused_spec(spec_file, exc) from exc
    if output != "text":
        dump(answer, output)
    elif dry_run:
        show_shape(answer)
    else:
        click.echo(f"sweep {answer['id']} {answer['name']}: {answer['state']}, {answer['max_trials']} trials, "
                   f"{answer['parallel']} at a time")
        click.echo(f"Watch it: slipway sweep watch {answer['id']}")


@sweep.command("ls")
@click.option("--team", help="Only this team's sweeps.")
@click.option("--state", type=click.Choice(["running", "stopping", "completed", "stopped"]))
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table",
              show_default=True, help="wide: also when it finished and why it stopped; json/yaml: the API's fields.")
@api_call
def sweep_ls(client: Client, team: str | None, state: str | None, output: str) -> None:
    """Your teams' sweeps, newest first."""
    rows = list(client.sweeps(team=team, state=state))
    if output in ("json", "yaml"):
        dump(rows, output)
        return
    wide = output == "wide"
    table(["ID", "TEAM", "NAME", "STATE", "OBJECTIVE", "TRIALS", "BY", "CREATED"] + (["FINISHED", "REASON"] if wide else []),
          [[s["id"], s["team"], s["name"], s["state"], f"{s['goal']} {s['metric']}", s["max_trials"], s["created_by"],
            s["created_at"][:16]] + ([(s.get("finished_at") or "")[:16], s.get("reason")] if wide else [])
           for s in rows])


@sweep.command("watch")
@click.argument("sweep_id", type=int)
@api_call
def sweep_watch(client: Client, sweep_id: int) -> None:
    """Follow a sweep's trials until it ends (completed or stopped).

    A header (its state, trials by state, best so far, spent and committed against the cap) over its trials
    (parameters, step, objective, best value, cost); refreshed in place on a terminal, printed again when it
    changes otherwise. Exit 0 when it ended with a best trial, 1 when none of its trials completed."""
    out = console()
    shown = None
    with Live(console=out, auto_refresh=False) if out.is_terminal else contextlib.nullcontext() as live:
        for current, trials in client.watch_sweep(sweep_id, interval=WATCH_INTERVAL, wait=polling.pause):
            lines = header(current)
            rows = trial_rows(trials, current["spend"].get("currency", ""))
            if live is not None:
                live.update(Group(*(Text(line) for line in lines), grid(TRIAL_COLUMNS, rows)), refresh=True)
            elif (lines, rows) != shown:
                if shown is not None:
                    click.echo()
                click.echo("\n".join(lines))
                table(TRIAL_COLUMNS, rows)
            shown = (lines, rows)
    # The last poll is the one that found it ended.
    sys.exit(0 if current.get("best_trial") else EXIT_FAILED)


@sweep.command("best")
@click.argument("sweep_id", type=int)
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True,
              help="json/yaml: the API's best_trial (number, name, value, params, run_id).")
@api_call
def sweep_best(client: Client, sweep_id: int, output: str) -> None:
    """The best trial so far: its value, its parameters (one a line) and its run.

    Exit 1 while none of its trials has completed with a value."""
    current = client.sweep(sweep_id)
    best, objective = current.get("best_trial"), current["objective"]
    if not best:
        raise Failure(f"sweep {current['id']} {current['name']} has no best trial yet: none of its trials completed "
                      f"with a value of {objective['metric']} ({counts_words(current['trials'])})", EXIT_FAILED)
    if output != "text":
        dump(best, output)
        return
    fields([("Trial", f"{best['number']} {best['name']}"),
            ("Value", f"{objective['metric']} {best['value']:.6g} ({objective['goal']})"),
            ("Run", f"{best['run_id']} (slipway describe {best['run_id']})" if best.get("run_id") is not None else None)])
    click.echo("Parameters:")
    for name, value in best["params"].items():
        click.echo(f"  {name}={value}")


@sweep.command("continue")
@click.argument("sweep_id", type=int)
@click.argument("number", type=int)
@api_call
def sweep_continue(client: Client, sweep_id: int, number: int) -> None:
    """Continue pruned trial NUMBER from its checkpoint: a new trial with its parameters goes on from where it
    stopped, on the cluster that holds its checkpoint, and the pruner leaves it alone.

    Refused with why (exit 1) when the trial is not pruned, was continued already, kept no checkpoint, or the
    sweep's cap does not allow a whole trial more. A finished sweep runs again until the new trial ends."""
    trial = client.continue_trial(sweep_id, number)
    click.echo(f"sweep {sweep_id}: trial {trial['continues']} continued as trial {trial['number']} {trial['name']}, "
               f"run {trial['run_id']} (slipway describe {trial['run_id']})")


@sweep.command("stop")
@click.argument("sweep_id", type=int)
@api_call
def sweep_stop(client: Client, sweep_id: int) -> None:
    """Stop it: no trial launches any more; queued trials end at once, running ones save a checkpoint and stop.

    It is `stopping` until they have, then `stopped`. A sweep that is not running is refused (exit 1)."""
    stopped = client.stop_sweep(sweep_id)
    click.echo(f"sweep {stopped['id']} {stopped['name']}: {stopped['state']}"
               + (f" ({stopped['reason']})" if stopped.get("reason") else "")
               + ("; its active trials save a checkpoint and stop" if stopped["state"] not in SWEEP_FINAL_STATES else ""))


@sweep.command("delete")
@click.argument("sweep_id", type=int)
@api_call
def sweep_delete(client: Client, sweep_id: int) -> None:
    """Delete a finished sweep and its study; its trials' runs stay the team's (a live one is refused: stop it
    first; exit 1)."""
    client.delete_sweep(sweep_id)
    click.echo(f"sweep {sweep_id} deleted; its trials' runs stay the team's")
