"""The workspace verbs, the ``workspace`` group (also ``workspaces``): create, ls, open, pause, resume, delete."""

from __future__ import annotations

import webbrowser

import click

from slipway.client import BadRequest, Client
from slipway.config import api_call
from slipway.failures import creating, idempotency_key
from slipway.output import dump, money, table


@click.group()
def workspace() -> None:
    """GPU notebooks that pause when idle: create, ls, open, pause, resume, delete.

    `slipway workspaces` is the same group."""


@workspace.command("create")
@click.option("--team", required=True, help="Team slug.")
@click.option("--name", required=True, help="DNS-1035 label, unique among the team's workspaces.")
@click.option("--flavor", required=True, help="A whole GPU, a MIG slice or a shared GPU's unit (see `slipway flavors`).")
@click.option("--gpus", type=click.IntRange(min=1), help="Units of the flavor (default 1).")
@click.option("--home-gb", type=click.IntRange(min=1), help="Size of the home volume (default 20).")
@click.option("--idle-minutes", type=click.IntRange(min=1), help="Pause after this long idle (default 60).")
@click.option("--image", help="A JupyterLab image (default: the platform's).")
@click.option("--idempotency-key", "given_key", help="Reuse the key of an earlier attempt: never a second workspace.")
@api_call
def workspace_create(client: Client, team: str, name: str, flavor: str, gpus: int | None, home_gb: int | None,
                     idle_minutes: int | None, image: str | None, given_key: str | None) -> None:
    """Create a workspace: admitted against the team's quota like any work (or queued, saying why)."""
    spec = {k: v for k, v in {"team": team, "name": name, "flavor": flavor, "gpus": gpus, "home_gb": home_gb,
                              "idle_minutes": idle_minutes, "image": image}.items() if v is not None}
    key = idempotency_key(given_key)
    try:
        with creating("workspace", key):
            created = client.create_workspace(spec, idempotency_key=key)
    except BadRequest as exc:
        problems = "; ".join(f"{field}: {' '.join(words)}" for field, words in (exc.errors or {}).items())
        raise click.UsageError(f"the workspace was refused: {problems or exc}") from exc
    click.echo(f"workspace {created['id']} {created['name']}: {created['state']}"
               + (f" ({created['reason']})" if created.get("queue_position") else ""))


@workspace.command("ls")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--team", help="Only this team's workspaces.")
@click.option("--state", help="Only workspaces in this state (running, paused, …) or set of states (active, holding, "
                              "unfinished).")
@api_call
def workspace_ls(client: Client, output: str, team: str | None, state: str | None) -> None:
    """List the workspaces of your teams: state, flavor, cost so far, idle time."""
    items = list(client.workspaces(team=team, state=state))
    if output != "table":
        dump(items, output)
        return
    table(["ID", "TEAM", "NAME", "STATE", "FLAVOR", "COST SO FAR", "IDLE FOR", "HOME"],
          [[w["id"], w["team"], w["name"], w["state"], f"{w['gpus']}× {w['flavor']}", money(w["cost_to_date"], w.get("currency", "")),
            _minutes(w.get("idle_for_seconds")), f"{w['home_gb']} GB"] for w in items])


def _minutes(seconds: int | None) -> str:
    return "—" if seconds is None else f"{seconds // 60} min"


@workspace.command("open")
@click.argument("workspace_id", type=int)
@click.option("--browser", is_flag=True, help="Open it in the browser rather than print the address.")
@api_call
def workspace_open(client: Client, workspace_id: int, browser: bool) -> None:
    """Print (or open) the address of the workspace's Jupyter server: its owner's (and admins' it is shared with).

    The address carries a one-use ticket, good for a minute: open it soon (or ask again)."""
    url = client.open_workspace(workspace_id)
    if browser and webbrowser.open(url):
        click.echo("opened in your browser")
        return
    click.echo(url)


@workspace.command("pause")
@click.argument("workspace_id", type=int)
@api_call
def workspace_pause(client: Client, workspace_id: int) -> None:
    """Pause it: its pod stops, its units go back to the team, its home volume stays."""
    w = client.pause_workspace(workspace_id)
    click.echo(f"workspace {w['id']} {w['name']}: {w['state']} (home volume {w['home_gb']} GB kept)")


@workspace.command("resume")
@click.argument("workspace_id", type=int)
@api_call
def workspace_resume(client: Client, workspace_id: int) -> None:
    """Resume it through admission: started soon, or queued (the reason says why)."""
    w = client.resume_workspace(workspace_id)
    click.echo(f"workspace {w['id']} {w['name']}: {w['state']}" + (f" ({w['reason']})" if w.get("queue_position") else ""))


@workspace.command("delete")
@click.argument("workspace_id", type=int)
@click.option("--yes", is_flag=True, help="Do not ask (scripts).")
@api_call
def workspace_delete(client: Client, workspace_id: int, yes: bool) -> None:
    """Delete it with its home volume (asks first, naming the volume's size)."""
    w = client.workspace(workspace_id)
    if not yes:
        click.confirm(f"Delete workspace {w['id']} {w['name']} and its home volume of {w['home_gb']} GB "
                      "(every file in it is lost)?", abort=True)
    w = client.delete_workspace(workspace_id)
    click.echo(f"workspace {w['id']} {w['name']}: {w['state']}")
