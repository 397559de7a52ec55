"""``slipway login``: sign in (in the browser by the device flow, or with a pasted token) and save a profile."""

from __future__ import annotations

import socket
import sys
import webbrowser

import click

from slipway import polling
from slipway.client import ApiError, Client, DeviceLoginFailed, NotFound, NotSignedIn
from slipway.config import write_profile
from slipway.failures import EXIT_NOT_SIGNED_IN, Failure


@click.command()
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
            return client.wait_for_device_token(grant, wait=polling.pause)["access_token"]
        except DeviceLoginFailed as exc:
            raise Failure(f"not signed in: {exc}", EXIT_NOT_SIGNED_IN) from exc
        except ApiError as exc:
            raise Failure(str(exc)) from exc
