"""Spec files, shared by ``run``, ``endpoint create`` and ``sweep create``: read one (a bad file names its line),
say where in it each field the API refused is, and show a dry run's answer.
"""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from slipway.client import BadRequest
from slipway.failures import EXIT_USAGE, Failure
from slipway.output import fields, money, per_hour, unit_price
from slipway.specfile import SpecError, read_fields


def load_spec(path: Path) -> dict:
    """A spec file's fields (JSON, or YAML restricted to JSON's values: :mod:`slipway.specfile`); a bad file is
    refused with its name and line (exit 2), never a traceback."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Failure(f"{path}: {exc.strerror}", EXIT_USAGE) from exc
    except UnicodeDecodeError as exc:
        raise Failure(f"{path}: not UTF-8 text (byte {exc.start + 1} cannot be read)", EXIT_USAGE) from exc
    try:
        return read_fields(text)
    except SpecError as exc:
        raise Failure(f"{path}{exc.where}: {exc.message}", EXIT_USAGE) from exc


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


def total_words(preview: dict) -> str:
    """A dry run's total: at most its ``estimated_total_cost`` when it has a known end; without one, what the
    budget counts to the month's end (``committed_cost``) — all an endpoint or a workspace ever has."""
    currency = preview.get("currency", "")
    total = money(preview.get("estimated_total_cost"), currency)
    if total:
        return f"at most {total}"
    month = money(preview.get("committed_cost"), currency)
    return f"no end: {month} to the month's end" if month else "unknown (no runtime limit)"


def show_preview(preview: dict) -> int:
    """Print a dry run's answer; 0 when it would be admitted or queued, 2 (usage) when the spec is refused."""
    admitted_now = preview["outcome"] == "admit"
    fields([
        ("Decision", preview["outcome"]), ("Message", preview.get("message")),
        ("Cost/hour", per_hour(preview.get("cost_per_hour"), preview.get("currency", ""))), ("Price", unit_price(preview)),
        ("Estimated total", total_words(preview)),
        ("Share of budget left", preview.get("share_of_budget_left")),
        ("Queue position", preview.get("queue_position")), ("Estimated start", preview.get("start") or ("now" if admitted_now else "unknown")),
        ("Burst", preview.get("burst")),
        ("Borrows", f"{preview['borrows']} from the cohort, preemptible" if preview.get("borrows") else None),
    ])
    # Advice the choice contradicts (a model larger than a unit's memory, training on a time-sliced GPU):
    # said, never refused; `slipway flavors` lists what each flavor suits.
    for warning in preview.get("warnings") or []:
        click.echo(f"Warning: {warning}")
    return 0 if preview["outcome"] in ("admit", "queue") else EXIT_USAGE
