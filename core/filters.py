"""A list's query filter that names one of a fixed set (a state, a set of states): one rule for every list of the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rest_framework.exceptions import ValidationError


def one_of(params: Mapping[str, str], name: str, choices: Sequence[str]) -> str | None:
    """``?name=`` of a list, checked against ``choices`` (what its OpenAPI parameter's enum lists): None when absent.

    Present and none of them is a 400 with the field named — the empty value too (``?state=``): the enum has no
    empty member, and a filter left blank by a client's bug must not read as "no filter" and answer every row.
    """
    value = params.get(name)
    if value is not None and value not in choices:
        raise ValidationError({name: [f"Must be one of: {', '.join(choices)}."]})
    return value


#: The words a yes/no query parameter takes (any case): true/false, 1/0, yes/no, on/off (an HTML checkbox's).
YES = ("1", "true", "yes", "on")
NO = ("0", "false", "no", "off")


def flag(params: Mapping[str, str], name: str) -> bool:
    """``?name=`` as a yes/no (its OpenAPI type is boolean): absent is no.

    Anything but :data:`YES` and :data:`NO` — an empty value too — is a 400 with the field named, never read as the
    default: ``?dry_run=ture`` must not be a real submission that spends the team's money, nor
    ``?all_teams=maybe`` a shorter list than the caller asked for.
    """
    raw = params.get(name)
    if raw is None:
        return False
    word = raw.strip().lower()
    if word not in YES + NO:
        raise ValidationError({name: ["Must be true or false."]})
    return word in YES
