"""Inside running work from the terminal: ``slipway metrics RUN [--follow]`` and ``slipway top``.

``metrics`` prints a run's training metrics as the lines it printed them in (Katib's
``step=20 loss=0.42 …``, one line per step) and its progress with the ETA the API computes
(docs/metrics.md); ``--follow`` keeps printing new steps until the run ends. ``top`` lists a
team's running work — runs and endpoints — with what the API knows of each: GPU utilization and
memory used of the size from their GPU telemetry (``gpu_utilization``, ``gpu_memory_used_gb``,
``gpu_memory_total_gb``), else whether its GPUs are idle; progress and ETA; cost so far.
"""

from __future__ import annotations

import click

from slipway import polling
from slipway.client import Client
from slipway.config import api_call
from slipway.output import dump, money, table


def progress_words(progress: dict | None) -> str:
    """"step 200 of 1,200 (16.7 %), ETA 2026-11-22T10:20:00Z (in 8 min)", or "" without progress. A TrainJob's
    trainer may be the source (docs/training.md "Status, logs and progress"): "40.0 % (the trainer's status), ETA
    …", and its latest metrics close the line ("; trainer: loss 1.25")."""
    if not progress:
        return ""
    metrics = progress.get("trainer_metrics") or {}
    trainer = "; trainer: " + ", ".join(f"{name} {value}" for name, value in sorted(metrics.items())) if metrics else ""
    return _progress_words(progress) + trainer


def _progress_words(progress: dict) -> str:
    if progress.get("source") == "trainer":
        words = f"{progress['percent']} % (the trainer's status)"
    else:
        words = f"step {progress['step']:,} of {progress['total']:,} ({progress['percent']} %)"
    if progress.get("last_attempt"):  # queued again, or a new attempt that has not reported: no ETA
        return f"last attempt reached {words}, no ETA until the new attempt reports"
    if progress.get("done"):
        return words + ", done"
    if progress.get("eta") is None:
        return words + ", ETA unknown (no rate yet)"
    seconds = progress.get("eta_seconds") or 0
    when = "any moment now" if seconds <= 0 else f"in {span_words(seconds)}"
    words += f", ETA {progress['eta']} ({when})"
    return words + (" — no report for 15 min, it may not hold" if progress.get("stale") else "")


def span_words(seconds: int) -> str:
    """"45 s", "12 min", "2 h 05 min": a span of time as the CLI says it."""
    minutes = round(seconds / 60)
    if minutes < 1:
        return f"{seconds} s"
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"


def _rows(series: dict[str, list[list[float]]], after: int | None) -> list[tuple[int, dict[str, float]]]:
    """The points of ``series`` by step (after ``after``), each step's metrics by name."""
    steps: dict[int, dict[str, float]] = {}
    for name, points in series.items():
        for step, value in points:
            if after is None or step > after:
                steps.setdefault(int(step), {})[name] = value
    return sorted(steps.items())


def _line(step: int, values: dict[str, float]) -> str:
    return " ".join([f"step={step}", *(f"{name}={values[name]:.6g}" for name in sorted(values))])


@click.command()
@click.argument("run_id", type=int)
@click.option("--name", "names", multiple=True, help="Only this metric (repeat it); default: every one.")
@click.option("--last", type=click.IntRange(min=0), default=20, show_default=True,
              help="Steps to show first (0: all of them).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new steps until the run ends.")
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True,
              help="json/yaml: the API's answer (every point), without --follow.")
@api_call
def metrics(client: Client, run_id: int, names: tuple[str, ...], last: int, follow: bool, output: str) -> None:
    """Print a run's training metrics (one line per step) and its progress and ETA."""
    answer = client.all_metrics(run_id, names=list(names) or None)
    if output != "text":
        if follow:
            raise click.UsageError("--follow prints text; json and yaml are one answer")
        dump(answer, output)
        return
    rows = _rows(answer["series"], None)
    if not rows and not answer.get("progress"):
        click.echo(f"run {run_id}: no metrics reported yet" + (f" (its metrics: {', '.join(answer['names'])})"
                                                               if answer.get("names") else ""))
    for step, values in rows[-last:] if last else rows:
        click.echo(_line(step, values))
    shown = progress_words(answer.get("progress"))
    if shown:
        click.echo(f"progress: {shown}")
    after = rows[-1][0] if rows else None
    ended = not follow
    while not ended:
        ended = client.run(run_id)["is_final"]
        if not ended:
            polling.pause(polling.FOLLOW_INTERVAL)
        answer = client.all_metrics(run_id, names=list(names) or None, since_step=after)
        for step, values in _rows(answer["series"], after):
            click.echo(_line(step, values))
            after = step
        words = progress_words(answer.get("progress"))
        if words and words != shown:
            click.echo(f"progress: {words}")
            shown = words


def _gpu(workload: dict) -> tuple[str, str]:
    """(utilization, memory) as the API gives them from the GPUs' telemetry (the figure of its page's GPU telemetry
    card); without telemetry, whether its GPUs are idle."""
    util = workload.get("gpu_utilization")
    used, total = workload.get("gpu_memory_used_gb"), workload.get("gpu_memory_total_gb")
    util_words = f"{util:g} %" if isinstance(util, int | float) else (
        f"idle since {workload['idle_since'][11:16]}" if workload.get("idle_since") else "-")
    if isinstance(used, int | float):
        memory_words = f"{used:g}/{total:g} GiB" if isinstance(total, int | float) else f"{used:g} GiB"
    else:
        memory_words = "-"
    return util_words, memory_words


@click.command()
@click.option("--team", help="Only this team's work (default: every team of yours).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def top(client: Client, team: str | None, output: str) -> None:
    """The work of your teams that holds GPUs (runs, endpoints, workspaces): GPUs, utilization, progress, ETA,
    cost so far."""
    # "holding": the API's set of states that hold quota (what costs), whichever states a kind has.
    runs = list(client.runs(team=team, state="holding"))
    endpoints = list(client.endpoints(team=team, state="holding"))
    workspaces = list(client.workspaces(team=team, state="holding"))
    if output != "table":
        dump({"runs": runs, "endpoints": endpoints, "workspaces": workspaces}, output)
        return
    rows = []
    for run in runs:
        progress = run.get("progress")
        util, memory = _gpu(run)
        rows.append(["run", run["id"], run["team"], run["name"], run["gpus_per_worker"] * run["workers"],
                     util, memory, _percent(progress),
                     _eta(progress), money(run["cost_to_date"], run.get("currency", ""))])
    for endpoint in endpoints:
        util, memory = _gpu(endpoint)
        rows.append(["endpoint", endpoint["id"], endpoint["team"], endpoint["name"],
                     endpoint["gpus_per_replica"] * (endpoint.get("replicas") or 0), util, memory, "-", "-",
                     money(endpoint["cost_to_date"], endpoint.get("currency", ""))])
    for workspace in workspaces:
        util, memory = _gpu(workspace)
        rows.append(["workspace", workspace["id"], workspace["team"], workspace["name"], workspace["gpus"], util, memory,
                     "-", "-", money(workspace["cost_to_date"], workspace.get("currency", ""))])
    if not rows:
        click.echo("Nothing holds GPUs" + (f" in {team}." if team else " in your teams."))
        return
    table(["KIND", "ID", "TEAM", "NAME", "GPUS", "GPU UTIL", "GPU MEM", "PROGRESS", "ETA", "COST"], rows)


def _percent(progress: dict | None) -> str:
    if not progress:
        return "-"
    return f"{progress['percent']} %" + (" (last attempt)" if progress.get("last_attempt") else "")


def _eta(progress: dict | None) -> str:
    if not progress:
        return "-"
    if progress.get("done"):
        return "done"
    if progress.get("last_attempt"):
        return "-"
    if progress.get("eta") is None:
        return "unknown"
    seconds = progress.get("eta_seconds") or 0
    return ("now" if seconds <= 0 else f"in {span_words(seconds)}") + (" (stale)" if progress.get("stale") else "")
