"""``slipway reserve``: book GPU time by the calendar (docs/reservations.md) — create, ls, cancel, availability.

Times are as people say them: ``--start 2026-12-03T09:00`` is a wall-clock time in ``--tz`` (default: the team's
time zone), and the server keeps a recurring booking at that wall-clock time across daylight-saving changes.
"""

from __future__ import annotations

from datetime import datetime
from itertools import groupby
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from slipway.client import BadRequest, Client
from slipway.config import api_call
from slipway.failures import EXIT_USAGE, Failure, creating, idempotency_key
from slipway.output import dump, money, table

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _days(value: str) -> list[str]:
    days = [day.strip().lower()[:3] for day in value.split(",") if day.strip()]
    wrong = [day for day in days if day not in DAYS]
    if wrong or not days:
        raise click.BadParameter(f"days as mon,tue,…,sun (not {', '.join(wrong) or 'nothing'})", param_hint="--weekly")
    return days


def recurrence(daily: bool, weekly: str | None, until: str | None, count: int | None) -> dict | None:
    """The API's ``recurrence`` from the options (None: one window)."""
    if daily and weekly:
        raise click.UsageError("give --daily or --weekly DAYS, not both")
    if not (daily or weekly):
        if until or count:
            raise click.UsageError("--until and --count repeat a booking: give --daily or --weekly DAYS too")
        return None
    if bool(until) == bool(count):
        raise click.UsageError("a repeated booking ends: give --until DATE or --count N")
    rule = {"frequency": "daily" if daily else "weekly", "until": until, "count": count}
    if weekly:
        rule["days"] = _days(weekly)
    return rule


def _local(value: str, zone: str) -> str:
    """An instant the API sent, as a wall-clock time of ``zone`` (the booking's)."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    try:
        return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M")
    except ZoneInfoNotFoundError:
        return moment.strftime("%Y-%m-%d %H:%M UTC")


def _span(start: str, end: str, zone: str) -> str:
    """A window as ``2026-12-03 09:00–17:00`` in ``zone`` (the end's date too when it is another day)."""
    start, end = _local(start, zone), _local(end, zone)
    return f"{start}–{end[11:] if end[:10] == start[:10] else end}"


def describe(r: dict) -> str:
    """``reservation 12 release-run: 8× a100-80gb on east, 2026-12-03 09:00–17:00 Europe/Berlin, 3 windows, booked``."""
    windows = len(r["windows"])
    return (f"reservation {r['id']} {r['name']}: {r['units']}\u00d7 {r['flavor']} on {r['cluster']}, "
            f"{_span(r['start'], r['end'], r['time_zone'])} {r['time_zone']}{f', {windows} windows' if windows != 1 else ''}, {r['state']}"
            f"{', targeted' if r.get('matching') == 'targeted' else ''}; "
            f"price {money(r['price'], r.get('currency', ''))}")


@click.group()
def reserve() -> None:
    """Book GPU time by the calendar: create, ls, cancel, availability.

    A booking holds N units of a flavor on a cluster for a window, once or repeated, within the policy
    platform staff set; see what is free first with `slipway reserve availability`."""


@reserve.command("create")
@click.option("--team", required=True, help="The team that books (you must be one of its members).")
@click.option("--flavor", required=True, help="The flavor, e.g. h100-80gb.")
@click.option("--units", type=int, required=True, help="How many units of the flavor.")
@click.option("--cluster", default="any", show_default=True, help="A cluster's name, or any: Slipway picks and says which.")
@click.option("--start", required=True, help="The first window's start, e.g. 2026-12-03T09:00 (in --tz).")
@click.option("--end", required=True, help="The first window's end, e.g. 2026-12-03T17:00.")
@click.option("--tz", "time_zone", help="IANA time zone of --start and --end, e.g. Europe/Berlin (default: the team's).")
@click.option("--daily", is_flag=True, help="Repeat every day.")
@click.option("--weekly", metavar="DAYS", help="Repeat every week on DAYS, e.g. mon,thu.")
@click.option("--until", metavar="DATE", help="The last date a repeated window may start on (YYYY-MM-DD).")
@click.option("--count", type=int, help="How many windows in all, the first included.")
@click.option("--name", required=True, help="What people see on the calendar.")
@click.option("--purpose", default="", help="Why (the approvers read it).")
@click.option("--matching", type=click.Choice(["open", "targeted"]), default="open", show_default=True,
              help="open: any of the team's work of the flavor goes in; targeted: only work that names it "
                   "(--reservation ID, or for_reservation in a spec).")
@click.option("--idempotency-key", "given_key",
              help="Reuse the key of an earlier attempt: the same key never books (and bills) a second time.")
@click.option("--dry-run", is_flag=True, help="Only check and price it: what booking would give now; nothing is booked.")
@api_call
def reserve_create(client: Client, team: str, flavor: str, units: int, cluster: str, start: str, end: str,
                   time_zone: str | None, daily: bool, weekly: str | None, until: str | None, count: int | None,
                   name: str, purpose: str, matching: str, given_key: str | None, dry_run: bool) -> None:
    """Book: refused with what to change when outside the policy, not free or past the budget."""
    spec = {"team": team, "flavor": flavor, "units": units, "cluster": cluster, "start": start, "end": end,
            "name": name, "purpose": purpose, "recurrence": recurrence(daily, weekly, until, count),
            "matching": matching}
    if time_zone:
        spec["time_zone"] = time_zone
    key = idempotency_key(given_key)
    try:
        if dry_run:
            click.echo(describe_preview(client.dry_run_reservation(spec)))
            return
        with creating("reservation", key):
            booked = client.create_reservation(spec, idempotency_key=key)
    except BadRequest as exc:  # the booking as asked is refused: a usage error (exit 2), with the fields' words
        raise Failure(str(exc), EXIT_USAGE) from exc
    click.echo(describe(booked))


def describe_preview(quote: dict) -> str:
    """``would book 4× a100-80gb on east, 2026-12-03 09:00–17:00 Europe/Berlin, 2 windows, 64 unit-hours, booked;
    price …``: a dry run's answer, its first window in the booking's zone."""
    first, zone = quote["windows"][0], quote["time_zone"]
    windows = len(quote["windows"])
    currency = quote.get("currency", "")
    return (f"would book {quote['units']}\u00d7 {quote['flavor']} on {quote['cluster']}, "
            f"{_span(first['start'], first['end'], zone)} {zone}"
            f"{f', {windows} windows' if windows != 1 else ''}, {quote['unit_hours']} unit-hours, {quote['state']}; "
            f"price {money(quote['price'], currency)} ({money(quote['price_per_unit_hour'], currency)} a unit-hour); "
            "nothing booked")


@reserve.command("ls")
@click.option("--team", help="Only this team.")
@click.option("--state", type=click.Choice(["pending", "booked", "declined", "cancelled"]))
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def reserve_ls(client: Client, team: str | None, state: str | None, output: str) -> None:
    """Your teams' reservations, soonest first."""
    rows = list(client.reservations(team=team, state=state))
    if output != "table":
        dump(rows, output)
        return
    table(["ID", "NAME", "TEAM", "UNITS", "FLAVOR", "CLUSTER", "FIRST WINDOW", "TIME ZONE", "WINDOWS", "STATE", "MATCHING",
           "PRICE"],
          [[r["id"], r["name"], r["team"], r["units"], r["flavor"], r["cluster"],
            f"{_local(r['start'], r['time_zone'])}–{_local(r['end'], r['time_zone'])[11:]}", r["time_zone"],
            len(r["windows"]), r["state"], r.get("matching", "open"), money(r["price"], r.get("currency", ""))] for r in rows])


@reserve.command("cancel")
@click.argument("reservation_id", type=int)
@api_call
def reserve_cancel(client: Client, reservation_id: int) -> None:
    """Cancel: windows not started are freed; one under way ends now (its past hours stay charged)."""
    client.cancel_reservation(reservation_id)
    click.echo(f"reservation {reservation_id} cancelled")


@reserve.command("availability")
@click.option("--flavor", required=True)
@click.option("--cluster", help="One cluster (default: each that offers the flavor).")
@click.option("--from", "since", help="From (ISO date-time; default now).")
@click.option("--to", "until", help="To (default: 14 days after --from).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def reserve_availability(client: Client, flavor: str, cluster: str | None, since: str | None, until: str | None,
                         output: str) -> None:
    """Free reservable units, as stretches of equal free units per cluster (UTC)."""
    slots = client.availability(flavor, cluster=cluster, since=since, until=until)
    if output != "table":
        dump(slots, output)
        return
    rows = []
    for (name, free), run in groupby(slots, key=lambda s: (s["cluster"], s["free_units"])):
        run = list(run)
        rows.append([name, _local(run[0]["start"], "UTC"), _local(run[-1]["end"], "UTC"), free])
    table(["CLUSTER", "FROM (UTC)", "TO (UTC)", "FREE UNITS"], rows)
