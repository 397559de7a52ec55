"""The ``slipway`` command: run, watch, follow and cancel work from the terminal (API.md "Sign-in
and the command line"). Every verb is a few calls of :class:`slipway.client.Client`.

Where it connects: ``SLIPWAY_URL`` / ``SLIPWAY_TOKEN`` when set (CI), else the profile that
``slipway login`` saved in ``$XDG_CONFIG_HOME/slipway/config.toml`` (``~/.config/…``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import socket
import sys
import time
import tomllib
import uuid
import webbrowser
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from slipway.client import (
    ApiError,
    BadRequest,
    Client,
    ConnectionFailed,
    DeviceLoginFailed,
    Forbidden,
    NotFound,
    NotSignedIn,
)

# Exit codes (API.md): 0 ok; 1 a watched workload failed (and what no other code names: another
# refusal of the API, an unreachable server); 2 a usage error — Click's own, a spec file that
# cannot be read, a spec the API refuses (400, or a dry run's "reject") —, so a script tells "my
# spec was wrong" from "my run failed"; 3 not signed in; 4 not found or forbidden.
EXIT_FAILED, EXIT_USAGE, EXIT_NOT_SIGNED_IN, EXIT_NOT_FOUND = 1, 2, 3, 4

RUN_FINAL = {"succeeded": 0, "failed": EXIT_FAILED, "cancelled": EXIT_FAILED}
FOLLOW_INTERVAL = 2.0

#: Waiting between polls (``--watch``, ``logs -f``, ``login``); one name, so a test can drive the cluster between polls.
pause = time.sleep


class Failure(click.ClickException):
    """A refusal or failure shown as one clean message (never a traceback) with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- configuration ---------------------------------------------------------------------------


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "slipway" / "config.toml"


def read_config() -> dict:
    path = config_path()
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise Failure(f"{path}: {exc}") from exc


def write_profile(name: str, url: str, token: str) -> Path:
    """Save ``name`` among the profiles; the file holds tokens, so only its owner may read it (0600)."""
    config = read_config()
    config.setdefault("profiles", {})[name] = {"url": url, "token": token}
    lines = []
    for profile, values in config["profiles"].items():
        lines.append(f"[profiles.{json.dumps(profile)}]")
        lines += [f"{key} = {json.dumps(str(value))}" for key, value in values.items()]
        lines.append("")
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(lines))
    path.chmod(0o600)  # a file that existed before keeps its old mode through os.open
    return path


def connection(profile: str) -> tuple[str, str | None]:
    """URL and token: the environment's first, then the profile's."""
    saved = read_config().get("profiles", {}).get(profile, {})
    url = os.environ.get("SLIPWAY_URL") or saved.get("url")
    token = os.environ.get("SLIPWAY_TOKEN") or saved.get("token")
    if not url:
        raise Failure("not signed in: run `slipway login` (or set SLIPWAY_URL and SLIPWAY_TOKEN)", EXIT_NOT_SIGNED_IN)
    return url, token


# -- output ----------------------------------------------------------------------------------


def console() -> Console:
    """Rich output on today's stdout; wide when it is not a terminal (a pipe should not fold tables)."""
    out = Console(highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=200, soft_wrap=False)
    return out


def dump(data: Any, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


def table(columns: list[str], rows: list[list[Any]]) -> None:
    grid = Table(box=None, header_style="bold", pad_edge=False)
    for column in columns:
        grid.add_column(column)
    for row in rows:
        grid.add_row(*["" if cell is None else str(cell) for cell in row])
    out = console()
    with out.capture() as captured:
        out.print(grid)
    # Rich pads the last column to its width: no trailing blanks in a terminal or a pipe.
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def fields(pairs: list[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        if value not in (None, "", [], {}):
            click.echo(f"{label + ':':<{width + 1}} {value}")


def money(amount: Any, currency: str = "") -> str:
    """An amount as the API sends it (a decimal string, to the cent) with its currency."""
    return f"{Decimal(str(amount)):,.2f} {currency}".strip()


# -- the group and error handling ------------------------------------------------------------


@contextlib.contextmanager
def refusals():
    """The API's refusals as clean messages with their exit codes (API.md)."""
    try:
        yield
    except NotSignedIn as exc:
        raise Failure(str(exc), EXIT_NOT_SIGNED_IN) from exc
    except (NotFound, Forbidden) as exc:
        raise Failure(str(exc), EXIT_NOT_FOUND) from exc
    except ApiError as exc:
        raise Failure(str(exc)) from exc


def api_call(command):
    """Run a verb with a client of the chosen profile; the API's refusals become clean messages."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        url, token = connection(ctx.obj["profile"])
        with refusals(), Client(url, token) as client:
            return command(client, *args, **kwargs)

    return wrapper


HELP = """Slipway from the terminal: submit, watch, follow and cancel GPU work.

\b
Sign in once with `slipway login` (in your browser), or set SLIPWAY_URL and
SLIPWAY_TOKEN (CI). Every verb has --help; a spec file is YAML or JSON with
the API's fields (see `slipway run --help`).

\b
Exit codes:
  0  ok
  1  a watched run failed (or another refusal, an unreachable server)
  2  usage error, a bad spec file, or a spec the API refuses
  3  not signed in
  4  not found or forbidden
"""


@click.group(help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--profile", default="default", envvar="SLIPWAY_PROFILE", show_default=True, show_envvar=True,
              help="Profile of the config file to use.")
@click.pass_context
def cli(ctx: click.Context, profile: str) -> None:
    ctx.ensure_object(dict)["profile"] = profile


def main() -> None:
    """The console script (pyproject's ``slipway``)."""
    cli()


# -- login -----------------------------------------------------------------------------------


@cli.command()
@click.option("--url", prompt="Slipway URL", envvar="SLIPWAY_URL", show_envvar=True,
              help="The portal's address, e.g. https://slipway.example.com.")
@click.option("--token", is_flag=False, flag_value="", default=None,
              help="Sign in with a pasted API token (the portal's \"API tokens\" page) instead of the browser; "
                   "asked for when given without a value.")
@click.option("--no-browser", is_flag=True, help="Only print the link to open; do not start a browser.")
@click.pass_context
def login(ctx: click.Context, url: str, token: str | None, no_browser: bool) -> None:
    """Sign in and save the token as a profile.

    By default in your browser: open the link it prints, check that the page shows the same
    code, and approve; the command receives an API token named "slipway CLI on <this host>"
    (listed and revocable on the portal's "API tokens" page). Without a browser, paste a token
    instead: `slipway login --token`. Either way the token is checked with one request, then
    saved (readable by you only) in ~/.config/slipway/config.toml ($XDG_CONFIG_HOME is honoured).
    """
    url = url.rstrip("/")
    if token is None:
        token = browser_login(url, open_browser=not no_browser)
    elif not token:
        token = click.prompt("API token", hide_input=True)
    token = token.strip()
    try:
        with Client(url, token) as client:
            teams = client.teams()
    except NotSignedIn as exc:
        raise Failure("that token was refused: create a new one on the portal's \"API tokens\" page",
                      EXIT_NOT_SIGNED_IN) from exc
    except ApiError as exc:
        raise Failure(str(exc)) from exc
    path = write_profile(ctx.obj["profile"], url, token)
    names = ", ".join(team["slug"] for team in teams) or "no team yet"
    click.echo(f"Signed in to {url} (teams: {names}); profile {ctx.obj['profile']!r} saved in {path}")


def browser_login(url: str, *, open_browser: bool) -> str:
    """The device flow (RFC 8628) against the portal: print the link and code, wait for approval, the token."""
    with Client(url, None) as client:
        try:
            grant = client.start_device_login(socket.gethostname())
        except NotFound as exc:
            raise Failure(f"{url} offers no sign-in in the browser: run `slipway login --token` with a token "
                          "from its \"API tokens\" page", EXIT_NOT_SIGNED_IN) from exc
        except ApiError as exc:
            raise Failure(str(exc)) from exc
        click.echo(f"Open {grant['verification_uri_complete']}\n"
                   f"and check that the page shows the code {grant['user_code']}, then approve.")
        if open_browser and sys.stdin.isatty() and sys.stdout.isatty():
            webbrowser.open(grant["verification_uri_complete"])
        minutes = max(1, round(grant["expires_in"] / 60))
        click.echo(f"Waiting for approval (the code expires in {minutes} minutes; Ctrl-C stops)…")
        try:
            return client.wait_for_device_token(grant, wait=pause)["access_token"]
        except DeviceLoginFailed as exc:
            raise Failure(f"not signed in: {exc}", EXIT_NOT_SIGNED_IN) from exc
        except ApiError as exc:
            raise Failure(str(exc)) from exc


# -- spec files ------------------------------------------------------------------------------


def load_spec(path: Path) -> dict:
    """A spec file's fields (YAML, or JSON, which YAML reads too); a bad file names its line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror}", EXIT_USAGE) from exc
    try:
        spec = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise Failure(f"{path}{where}: {exc.problem or exc.context}", EXIT_USAGE) from exc
    except yaml.YAMLError as exc:
        raise Failure(f"{path}: {exc}", EXIT_USAGE) from exc
    if not isinstance(spec, dict):
        raise Failure(f"{path}: expected the API's fields as a mapping (name: …, image: …), not {type(spec).__name__}",
                      EXIT_USAGE)
    return spec


def field_lines(text: str) -> dict[str, int]:
    """The line (1-based) of each field of a spec: ``name``, ``checkpoint.grace_seconds``, ``volumes.0.claim``."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    found: dict[str, int] = {}
    stack = [(root, "")]
    while stack:
        node, prefix = stack.pop()
        if isinstance(node, yaml.MappingNode):
            children = [(f"{prefix}{key.value}", key, value) for key, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            children = [(f"{prefix}{index}", item, item) for index, item in enumerate(node.value)]
        else:
            continue
        for name, marked, value in children:
            found.setdefault(name, marked.start_mark.line + 1)
            stack.append((value, f"{name}."))
    return found


def refused_spec(path: Path, exc: BadRequest) -> Failure:
    """The API's field errors, each with the line of its field in the spec file (the file's name alone for the rest)."""
    try:
        lines_of = field_lines(path.read_text())
    except OSError:
        lines_of = {}
    messages = []
    for field, message in flat_errors(exc.errors):
        where = f"{path}, line {lines_of[field]}" if field in lines_of else str(path)
        label = "" if field in ("detail", "non_field_errors") else f"{field}: "
        messages.append(f"{where}: {label}{message}")
    return Failure("\n".join(messages) or f"{path}: {exc}", EXIT_USAGE)


def flat_errors(errors: dict, prefix: str = "") -> list[tuple[str, str]]:
    """``{"checkpoint": {"grace_seconds": ["…"]}}`` → ``[("checkpoint.grace_seconds", "…")]``."""
    flat = []
    for field, value in errors.items():
        name = f"{prefix}{field}"
        if isinstance(value, dict):
            flat += flat_errors(value, f"{name}.")
        else:
            flat += [(name, str(message)) for message in (value if isinstance(value, list) else [value])]
    return flat


def unit_price(answer: dict) -> str | None:
    """"3.6000/h a unit on east": a workload's or a dry run's ``price_per_hour`` and its ``cluster``
    (the API's one price: placed, what it is charged; before, on the cluster it would go to now)."""
    if answer.get("price_per_hour") is None:
        return None
    where = f" on {answer['cluster']}" if answer.get("cluster") else ""
    return f"{answer['price_per_hour']}/h a unit{where}"


def show_forecast(forecast: dict) -> int:
    """Print a dry run's answer; 0 when it would be admitted or queued, 2 (usage) when the spec is refused."""
    admitted_now = forecast["outcome"] == "admit"
    fields([
        ("Decision", forecast["outcome"]), ("Message", forecast.get("message")),
        ("Cost/hour", forecast.get("cost_per_hour")), ("Price", unit_price(forecast)),
        ("Estimated total", forecast.get("estimated_total") or "unknown (no runtime limit)"),
        ("Share of budget left", forecast.get("share_of_budget_left")),
        ("Queue position", forecast.get("queue_position")), ("Estimated start", forecast.get("start") or ("now" if admitted_now else "unknown")),
        ("Burst", forecast.get("burst")),
        ("Borrows", f"{forecast['borrows']} from the cohort, preemptible" if forecast.get("borrows") else None),
    ])
    return 0 if forecast["outcome"] in ("admit", "queue") else EXIT_USAGE


# -- runs ------------------------------------------------------------------------------------


@cli.command()
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The run's spec: YAML or JSON with the API's fields (team, name, image, command, flavor, …).")
@click.option("--team", help="Team slug (overrides the spec's `team`).")
@click.option("--dry-run", is_flag=True, help="Only show the admission decision, cost estimate and estimated start.")
@click.option("--watch", is_flag=True, help="Follow the run's state until it ends: exit 0 on success, 1 otherwise.")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt: the same key never creates a second run.")
@api_call
def run(client: Client, spec_file: Path, team: str | None, dry_run: bool, watch: bool,
        idempotency_key: str | None) -> None:
    """Submit a training run from a spec file."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    key = idempotency_key or str(uuid.uuid4())
    try:
        if dry_run:
            sys.exit(show_forecast(client.dry_run(spec)))
        created = client.submit_run(spec, idempotency_key=key)
    except BadRequest as exc:
        raise refused_spec(spec_file, exc) from exc
    except ConnectionFailed as exc:
        # A submission is not resent by itself; the same key makes resending it safe.
        raise Failure(f"{exc}\nIt may have arrived: rerun with --idempotency-key {key} "
                      "to retry without starting a second run") from exc
    click.echo(f"run {created['id']} {created['name']}: {created['state']}"
               + (f" ({created['reason']})" if created.get("reason") else ""))
    if watch:
        sys.exit(watch_run(client, created["id"]))


def watch_run(client: Client, run_id: int, interval: float = FOLLOW_INTERVAL) -> int:
    """Follow a run's state (a live line on a terminal, a line per change otherwise) until it ends."""
    out = console()
    last = None
    with out.status("") if out.is_terminal else contextlib.nullcontext() as status:
        for current in client.watch_run(run_id, interval=interval, wait=pause):
            line = f"run {run_id}: {current['state']}" + (f" — {current['reason']}" if current.get("reason") else "")
            if status is not None and current["state"] not in RUN_FINAL:
                status.update(line)
            elif line != last:
                click.echo(line)
            last = line
    return RUN_FINAL[current["state"]]  # the last poll is the one that found it ended


RUN_COLUMNS = ["ID", "TEAM", "NAME", "STATE", "FLAVOR", "GPUS", "CREATED"]


def run_row(run: dict, wide: bool) -> list:
    gpus = run["gpus_per_worker"] * run["workers"]
    row = [run["id"], run["team"], run["name"], run["state"], run["flavor"], gpus, run["created_at"][:16]]
    if wide:
        row += [run.get("queue_position"), run["cost_to_date"], run["created_by"], run.get("reason")]
    return row


@cli.command()
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json", "yaml"]), default="table", show_default=True,
              help="wide: also queue position, cost, author and reason; json/yaml: the API's fields.")
@click.option("--team", help="Only this team's runs.")
@click.option("--state", help="Only runs in this state (queued, running, failed, …).")
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


@cli.command()
@click.argument("run_id", type=int)
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
@api_call
def describe(client: Client, run_id: int, output: str) -> None:
    """Show one run: state and reason, queue, attempts, checkpoint.

    Also its estimated start, preemptions, last checkpoint, cost and the cluster's events."""
    run = client.run(run_id)
    if output != "text":
        dump(run, output)
        return
    checkpoint = run.get("last_checkpoint")
    fields([
        ("Run", f"{run['id']} {run['name']}"), ("Team", run["team"]), ("State", run["state"]),
        ("Reason", run.get("reason")), ("Queue position", run.get("queue_position")),
        ("Estimated start", run.get("estimated_start_at")), ("Created", f"{run['created_at']} by {run['created_by']}"),
        ("Started", run.get("started_at")), ("Finished", run.get("finished_at")),
        ("Image", run["image"]), ("Command", " ".join(run["command"] + (run.get("args") or []))),
        ("Flavor", f"{run['flavor']} × {run['gpus_per_worker']} per worker, {run['workers']} worker(s)"),
        ("Attempt", f"{run['attempt']} (up to {run['max_retries']} retries)"),
        ("Last checkpoint", f"step {checkpoint['step']} at {checkpoint['at']}: {checkpoint['path']}" if checkpoint
         else ("none reported yet" if run.get("checkpoint") else None)),
        ("Cost to date", run["cost_to_date"]),
        ("Cost/hour", run.get("estimated_cost_per_hour")), ("Price", unit_price(run)),
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


@cli.command()
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
    for line in client.log_lines(run_id, tail=tail, pod=pod, follow=follow, interval=FOLLOW_INTERVAL, wait=pause,
                                 attempt=attempt):
        click.echo(line)


#: ``SLIPWAY_CHECKPOINT_URL`` as the portal sets it in a run's pods: the portal's address and the run's id.
CHECKPOINT_URL = re.compile(r"^(?P<base>https?://.+?)/api/v1/runs/(?P<run>\d+)/checkpoints/?$")


@cli.command()
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
        url, token = connection(ctx.obj["profile"])
        with refusals(), Client(url, token) as client:
            recorded = client.report_checkpoint(run_id, step, checkpoint_path)
    click.echo(f"run {run_id}: checkpoint at step {recorded['step']} recorded ({recorded['path']})")


@cli.command()
@click.argument("run_id", type=int)
@api_call
def cancel(client: Client, run_id: int) -> None:
    """Cancel a run: it ends `cancelled` and its quota is released."""
    run = client.cancel_run(run_id)
    click.echo(f"run {run['id']} {run['name']}: {run['state']}")


# -- endpoints -------------------------------------------------------------------------------


@cli.group()
def endpoint() -> None:
    """Inference endpoints: create, ls, describe, scale, delete."""


@endpoint.command("create")
@click.option("-f", "--file", "spec_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The endpoint's spec: YAML or JSON with the API's fields.")
@click.option("--team", help="Team slug (overrides the spec's `team`).")
@click.option("--dry-run", is_flag=True, help="Only show the admission decision, costs and burst now.")
@click.option("--idempotency-key", help="Reuse the key of an earlier attempt: never a second endpoint.")
@api_call
def endpoint_create(client: Client, spec_file: Path, team: str | None, dry_run: bool,
                    idempotency_key: str | None) -> None:
    """Create an inference endpoint from a spec file."""
    spec = load_spec(spec_file)
    if team:
        spec["team"] = team
    try:
        if dry_run:
            sys.exit(show_forecast(client.dry_run_endpoint(spec)))
        created = client.create_endpoint(spec, idempotency_key=idempotency_key)
    except BadRequest as exc:
        raise refused_spec(spec_file, exc) from exc
    click.echo(f"endpoint {created['id']} {created['name']}: {created['state']}")


@endpoint.command("ls")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--team", help="Only this team's endpoints.")
@click.option("--all-teams", is_flag=True, help="Every team's endpoints (platform staff only).")
@api_call
def endpoint_ls(client: Client, output: str, team: str | None, all_teams: bool) -> None:
    """List the endpoints of your teams."""
    items = list(client.endpoints(team=team, all_teams=all_teams))
    if output != "table":
        dump(items, output)
        return
    table(["ID", "TEAM", "NAME", "STATE", "REPLICAS", "FLAVOR", "URL"],
          [[e["id"], e["team"], e["name"], e["state"], f"{e['replicas']}/{e['min_replicas']}-{e['max_replicas']}",
            e["flavor"], e.get("url")] for e in items])


@endpoint.command("describe")
@click.argument("endpoint_id", type=int)
@click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text", show_default=True)
@api_call
def endpoint_describe(client: Client, endpoint_id: int, output: str) -> None:
    """Show one endpoint: state and why, replicas, cost."""
    e = client.endpoint(endpoint_id)
    if output != "text":
        dump(e, output)
        return
    fields([
        ("Endpoint", f"{e['id']} {e['name']}"), ("Team", e["team"]), ("State", e["state"]), ("Reason", e.get("reason")),
        ("Replicas", f"{e['replicas']} ready, {e['desired_replicas']} wanted, ceiling {e['replica_ceiling']}"
                     f" (min {e['min_replicas']}, max {e['max_replicas']})"),
        ("Image", e["image"]), ("Flavor", f"{e['flavor']} × {e['gpus_per_replica']} per replica"), ("URL", e.get("url")),
        ("Cost to date", e["cost_to_date"]), ("Cost/hour", e.get("estimated_cost_per_hour")), ("Price", unit_price(e)),
    ])


@endpoint.command("scale")
@click.argument("endpoint_id", type=int)
@click.option("--min", "min_replicas", type=click.IntRange(min=0), help="Guaranteed replicas (must fit the quota now).")
@click.option("--max", "max_replicas", type=click.IntRange(min=1), help="The most replicas.")
@api_call
def endpoint_scale(client: Client, endpoint_id: int, min_replicas: int | None, max_replicas: int | None) -> None:
    """Change an endpoint's minimum and maximum replicas."""
    if min_replicas is None and max_replicas is None:
        raise click.UsageError("give --min, --max or both")
    e = client.scale_endpoint(endpoint_id, min_replicas=min_replicas, max_replicas=max_replicas)
    click.echo(f"endpoint {e['id']} {e['name']}: min {e['min_replicas']}, max {e['max_replicas']}, "
               f"ceiling {e['replica_ceiling']}")


@endpoint.command("delete")
@click.argument("endpoint_id", type=int)
@api_call
def endpoint_delete(client: Client, endpoint_id: int) -> None:
    """Delete an endpoint: its quota is released and its objects removed."""
    e = client.delete_endpoint(endpoint_id)
    click.echo(f"endpoint {e['id']} {e['name']}: {e['state']}")


# -- money -----------------------------------------------------------------------------------


@cli.command()
@click.option("--team", help="Only this team (default: each of yours).")
@api_call
def quota(client: Client, team: str | None) -> None:
    """Your teams' quotas and budgets.

    GPUs in use and queued per flavor, and this month's spending against the budget."""
    for slug in [team] if team else [t["slug"] for t in client.teams()]:
        usage = client.team_usage(slug)
        click.echo(f"Team {slug}")
        table(["FLAVOR", "LIMIT", "IN USE", "QUEUED"],
              [[q["flavor"], q["limit"], q["in_use"], q["queued"]] for q in usage["quotas"]])
        budget = usage.get("budget")
        if budget:
            click.echo(f"Budget: {budget['spent_month']} of {budget['monthly_limit']} {budget['currency']} spent "
                       f"this month, {budget['committed']} committed; month end {budget['projected_month_end']}, "
                       f"runs out {budget.get('runs_out_at') or 'not this month'}")


def month_range(month: str) -> tuple[str, str]:
    try:
        first = date.fromisoformat(f"{month}-01")
    except ValueError as exc:
        raise click.BadParameter("expected YYYY-MM, e.g. 2026-11", param_hint="--month") from exc
    following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return first.isoformat(), following.isoformat()


@cli.command()
@click.option("--month", default=lambda: date.today().strftime("%Y-%m"), show_default="this month",
              help="The month to report, YYYY-MM.")
@click.option("--team", help="Only this team.")
@click.option("--by", "group_by", type=click.Choice(["day", "flavor", "user", "workload"]), default="workload",
              show_default=True)
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def cost(client: Client, month: str, team: str | None, group_by: str, output: str) -> None:
    """A month's GPU-hours and cost, by workload, day, flavor or user."""
    since, until = month_range(month)
    rows = client.usage_report(team=team, since=since, until=until, group_by=group_by)
    if output != "table":
        dump(rows, output)
        return
    if group_by == "workload":
        # Each row as people are told everywhere: "run bert (#12) of team nlp" (the API's ``label``).
        groups = [r.get("label") or r["group"] for r in rows]
    else:
        # Days, flavors and people sum the work of one or more teams: say which.
        groups = [r["group"] for r in rows]
        teams = [team] if team else sorted({
            r["team"] for r in client.usage_report(since=since, until=until, group_by="workload")})
        if teams:
            click.echo(f"{'Team' if len(teams) == 1 else 'Teams'} {', '.join(teams)}, {month}")
    table([group_by.upper(), "GPU-HOURS", "COST", "IDLE COST"],
          [[group, r["gpu_hours"], money(r["cost"], r["currency"]), money(r["idle_cost"], r["currency"])]
           for group, r in zip(groups, rows, strict=True)])
    total = sum((Decimal(r["cost"]) for r in rows), Decimal(0))
    click.echo(f"Total: {money(total, rows[0]['currency'] if rows else '')}")
