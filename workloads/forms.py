"""Form pieces every kind's portal form shares: the flavor picker and text → API-shape conversions.

People type text, the API takes JSON: these turn a command line into an argv list (split as
a POSIX shell splits words, :func:`split_argv`, and never run through one) or ``KEY=VALUE``
lines into an env object. Validation itself stays in each kind's service
(:mod:`workloads.validation`), so the portal and the API cannot disagree.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from billing.pricing import PriceBook
from fleet.models import GpuFlavor
from quotas.facts import ClusterWaits
from quotas.policy import traits
from workloads.validation import ENV_NAME


class FlavorSelect(forms.Select):
    """A select whose options can be disabled (flavors the team has no quota for)."""

    def __init__(self, *args: Any, disabled_values: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.disabled_values = disabled_values or set()

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if str(value) in self.disabled_values:
            option["attrs"]["disabled"] = True
        return option


def flavor_label(flavor: GpuFlavor, row: dict | None, currency: str, book: PriceBook | None = None,
                 waits: ClusterWaits | None = None) -> str:
    """"t4-ts4 — 0.10 USD/h on east · Time-sliced ×4 · no isolation · 16 GB shared · 3 of 4 free" (or "no
    quota"): a unit-hour's one price now (:mod:`billing.pricing`; the preview prices the work as shaped, spot
    included), then how the unit shares its GPU (:func:`quotas.policy.traits`, as the "Which flavor?" page says).

    Units of the quota are free for new work only where a cluster takes it: when every cluster offering the
    flavor is draining (or degraded, lost), new work would wait, so the label says why, in admission's words
    (``waits``: :class:`quotas.facts.ClusterWaits`, one read of the clusters per form) — "l4 · new work waits:
    l4 is only offered by east, which is draining" — rather than "2 of 2 free"."""
    price = (book or PriceBook()).quote(flavor).words(currency)
    head = f"{flavor.name} — {price} · {traits(flavor)}"
    if row is None or row["limit"] == 0:
        return f"{head} · no quota for your team"
    no_cluster = (waits or ClusterWaits())(flavor, False)
    if no_cluster:
        return f"{head} · new work waits: {no_cluster}"
    return f"{head} · {row['free']} of {row['limit']} free"


class SecretEnvTextarea(forms.Textarea):
    """``KEY=VALUE`` lines shown back as ``KEY=`` only: a secret's value never goes into a page.

    A form with errors therefore asks for the values again, and "Run again" prefills the
    names with their values left to type.
    """

    def format_value(self, value: Any) -> str | None:
        text = super().format_value(value) or ""
        # Only what reads as a variable name before its "=": a malformed line may be a bare value.
        names = [key.strip() for key, sep, _value in (line.partition("=") for line in lines(text))
                 if sep and ENV_NAME.fullmatch(key.strip())]
        return "\n".join(f"{name}=" for name in names) or None


def lines(text: str) -> list[str]:
    """Non-blank lines, each kept verbatim (an argument may contain spaces) minus the newline."""
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


def parse_env(text: str, *, quote_lines: bool = True) -> dict[str, str]:
    """``KEY=VALUE`` lines into a dict; raises ValidationError naming the bad line.

    ``quote_lines=False`` for secret env: the message gives the line's number, not its text
    (which may be a value).
    """
    env: dict[str, str] = {}
    for number, line in enumerate(lines(text), start=1):
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            got = f", got {line.strip()!r}" if quote_lines else ""
            raise ValidationError(f"Line {number}: expected KEY=VALUE{got}.")
        if key in env:
            raise ValidationError(f"Line {number}: {key} is set twice.")
        env[key] = value
    return env


#: Words a shell would treat as operators. Slipway runs argv without a shell, so they reach the
#: program as plain arguments: the argv echo says so before anyone submits ``a && b``.
SHELL_OPERATORS = frozenset({"|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "2>", "2>&1", "&>", "|&"})


def split_argv(text: str) -> list[str]:
    """One command line into argv, split as a POSIX shell splits words (quotes, backslashes).

    Nothing is expanded (no ``$VAR``, no globs, no ``~``) and no shell ever runs it: the list
    becomes the container's ``command``/``args`` as is. Raises ValidationError on unbalanced
    quotes or a trailing backslash, saying which.
    """
    try:
        # comments=False: a "#" is an ordinary character in an argument (URLs, "--tag=#3").
        return shlex.split(text, comments=False, posix=True)
    except ValueError as exc:
        if "quotation" in str(exc):
            raise ValidationError("A quote is not closed: every ' and \" needs its pair "
                                  "(quote a lone one with a backslash or the other kind of quote).") from exc
        raise ValidationError("The line ends with a lone backslash: nothing follows it to escape.") from exc


def argv_line(argv: list[str]) -> str:
    """The command line that :func:`split_argv` turns back into ``argv`` (for prefilling a form)."""
    return shlex.join(argv)


@dataclass(frozen=True)
class ArgvEcho:
    """What typed command lines become, shown back before submit: the argv, or why it cannot be split."""

    tokens: tuple[str, ...] = ()  #: each argument JSON-quoted, so spaces and quotes inside it show
    error: str = ""
    operators: tuple[str, ...] = ()  #: shell operators that will reach the program as plain arguments

    @property
    def empty(self) -> bool:
        return not self.tokens and not self.error


def argv_echo(lines_by_label: list[tuple[str, str]]) -> ArgvEcho:
    """The argv of command-line fields run one after the other (``[("Command", text), ("Arguments", text)]``).

    The container runs ``command`` followed by ``args``, so the echo is their concatenation;
    an error names the field whose line cannot be split.
    """
    argv: list[str] = []
    for label, text in lines_by_label:
        try:
            argv += split_argv(text)
        except ValidationError as exc:
            return ArgvEcho(error=f"{label}: {exc.messages[0]}")
    operators = tuple(dict.fromkeys(token for token in argv if token in SHELL_OPERATORS))
    return ArgvEcho(tuple(json.dumps(token, ensure_ascii=False) for token in argv), operators=operators)


def secret_env_lines(text: str) -> dict[str, str]:
    """Secret ``KEY=VALUE`` lines; a bad line is named by its number only (its text may hold a value)."""
    return parse_env(text, quote_lines=False)


def secret_env_field(*, placeholder: str) -> forms.CharField:
    """The "Secret environment" input of a create form (parse it with :func:`secret_env_lines`)."""
    return forms.CharField(
        required=False, label="Secret environment",
        widget=SecretEnvTextarea(attrs={"rows": 2, "placeholder": placeholder, "autocomplete": "off",
                                        "spellcheck": "false"}),
        help_text="KEY=VALUE, one per line: kept in a Kubernetes Secret of your team's namespace and shown as "
                  "•••••• everywhere, to you too. A form with errors asks for the values again.")


#: The argv fields of every kind's form (API names): each typed as one command line.
ARGV_FIELDS = ("command", "args")


def command_line_field(*, required: bool, label: str, placeholder: str, help_text: str) -> forms.CharField:
    """A one-line input split into argv by :func:`split_argv` (``command`` or ``args`` of a form)."""
    return forms.CharField(required=required, label=label, help_text=help_text,
                           widget=forms.TextInput(attrs={"placeholder": placeholder, "spellcheck": "false"}))


def put_argv(form: forms.Form, cleaned: dict[str, Any], data: dict[str, Any]) -> None:
    """Split the form's typed command lines into ``data`` (API shape); a line that cannot be split is a field error."""
    for name in ARGV_FIELDS:
        if cleaned.get(name):
            try:
                data[name] = split_argv(cleaned[name])
            except ValidationError as exc:
                form.add_error(name, exc)


def command_echo(form_data) -> ArgvEcho:
    """What a form's command and arguments lines will run as (argv tokens, or why they cannot split)."""
    return argv_echo([("Command", form_data.get("command") or ""), ("Arguments", form_data.get("args") or "")])
