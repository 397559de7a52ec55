"""What an endpoint serves, from the terminal: ``slipway endpoint traffic`` (requests, errors, latency, tokens per
point, as the endpoint page's Traffic card) and ``slipway endpoint cold-starts`` (its newest timelines and each
stage's p50/p95, as the page's Cold starts card). Both read the API (docs/api.md); the figures are its own."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from slipway.client import Client
from slipway.config import api_call
from slipway.output import dump, table
from slipway.times import back


def _number(value, unit: str = "", digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}{unit}"


def _percent(rate) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def _clock(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


def traffic_rows(answer: dict) -> list[list[str]]:
    """One row per point of the answer's figures (its revisions together, or the one asked for)."""
    figures = answer["total"]
    return [[_clock(t), _number(figures["requests_per_second"][i], digits=2), _percent(figures["error_rate"][i]),
             _number(figures["latency_p50_ms"][i], " ms"), _number(figures["latency_p95_ms"][i], " ms"),
             _number(figures["latency_p99_ms"][i], " ms"), _number(figures["ttft_p50_ms"][i], " ms"),
             _number(figures["tokens_per_second"][i], digits=1), figures["in_flight"][i]]
            for i, t in enumerate(answer["t"])]


@click.command("traffic")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@click.option("--since", default="15m", show_default=True,
              help="From this long ago (15m, 2h, 1d), or an ISO date-time or Unix seconds.")
@click.option("--step", type=int, help="Seconds a point, a multiple of 10 (default 60).")
@click.option("--revision", type=int, help="Only this revision's requests.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def traffic(client: Client, endpoint_ref: str, since: str, step: int | None, revision: int | None,
            output: str) -> None:
    """An endpoint's traffic through the gateway: requests a second, 5xx share, latency p50/p95/p99, time to the
    first token of streams, output tokens a second and the most requests in flight, per point."""
    e_id = client.workload_id("endpoints/", endpoint_ref, "endpoint")
    answer = client.traffic(e_id, since=back(since), step=step, revision=revision)
    if output != "table":
        dump(answer, output)
        return
    which = f"revision {answer['revision']}" if answer.get("revision") else "all revisions"
    click.echo(f"endpoint {e_id}, {which}: {answer['since']} to {answer['until']}, {answer['step']} s a point (UTC)")
    table(["AT", "REQ/S", "5XX", "P50", "P95", "P99", "TTFT P50", "TOK/S", "IN FLIGHT"], traffic_rows(answer))


def _seconds(value) -> str:
    return "—" if value is None else f"{value:.1f} s"


@click.command("cold-starts")
@click.argument("endpoint_ref", metavar="ENDPOINT")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many of the newest timelines.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@api_call
def cold_starts(client: Client, endpoint_ref: str, limit: int, output: str) -> None:
    """An endpoint's cold starts: each new replica's time to ready (and from zero, to its first answer byte), the
    share of it named stages explain, and each stage's p50/p95 over every timeline kept."""
    e_id = client.workload_id("endpoints/", endpoint_ref, "endpoint")
    answer = client.cold_starts(e_id, limit=limit)
    if output != "table":
        dump(answer, output)
        return
    kept = answer["kept"]
    click.echo(f"endpoint {e_id}: {kept} timeline{'' if kept == 1 else 's'} kept, {answer['complete']} complete")
    table(["ID", "POD", "REV", "FROM ZERO", "COMPLETE", "ELAPSED", "EXPLAINED", "SLOWEST STAGE"],
          [[t["id"], t["pod"], t["revision"], "yes" if t["from_zero"] else "no", "yes" if t["complete"] else "no",
            _seconds(t["elapsed_seconds"]), f"{t['attributed_share'] * 100:.0f}%", _slowest(t["durations"])]
           for t in answer["timelines"]])
    click.echo("")
    table(["STAGE", "P50", "P95", "SAMPLES"],
          [[f["stage"], _seconds(f["p50_seconds"]), _seconds(f["p95_seconds"]), f["samples"]]
           for f in [*answer["stages"], answer["to_ready"], answer["to_first_byte"]]])


def _slowest(durations: dict) -> str:
    if not durations:
        return "—"
    stage = max(durations, key=durations.get)
    return f"{stage} {durations[stage]:.1f} s"
