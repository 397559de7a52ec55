"""Usernames that pass for another: the one rule every place that names a user applies (security
reviews 4 #9 and 5 #3; docs/security.md "Look-alike usernames").

A username is shown in team lists, audit logs and the admin console; one that *reads* as a
colleague's lets its holder pass for them. Two names read alike when they share a key
(:func:`username_keys`):

1. **NFKC**, the compatibility form: fullwidth ``ａｄｍｉｎ`` is ``admin``, the small roman numeral
   ``ⅾ`` (U+217E) in ``ⅾave`` is ``d``;
2. the **TR39 skeleton** (Unicode Technical Standard #39, "confusable detection"): every character
   replaced by the prototype it is confusable with — Cyrillic ``а`` → ``a``, ``I`` → ``l``, ``1`` → ``l``,
   ``0`` → ``O``, ``m`` → ``rn`` — so ``aIice`` (a capital I, all ASCII) reads as ``alice``;
3. **casefolded**, before and after the skeleton (``AIice`` and ``ALICE`` are ``alice`` too).

The confusables come from the Unicode data the ``confusable-homoglyphs`` package ships
(``confusables.json``). It records each line of TR39's ``confusables.txt`` (source → prototype) in
both directions, and its own ``is_confusable`` looks only for characters of *another script* than
the preferred ones — so ``ⅾ`` and ``ａ`` (Latin script) and ``I`` for ``l`` pass it. The prototypes are
read back from that table (:func:`_prototypes`).

Where it applies: the admin console's user forms refuse such a name (creating a user, or renaming
one: :mod:`teams.admin`), and single sign-on replaces it with ``sso-<subject>``
(:func:`teams.sso.safe_username`). Adding someone to a team names an existing account and creates none.
"""

from __future__ import annotations

import functools
import unicodedata

from confusable_homoglyphs import confusables
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

#: The marks the package wraps right-to-left characters in (``"\u200eו\u200e"``): not part of them.
_LTR_MARK = "\u200e"


@functools.cache
def _prototypes() -> dict[str, str]:
    """``{character: its TR39 prototype}`` from the package's two-way table.

    A source has exactly one entry, its prototype; a prototype lists every source of it. So a
    character with one entry maps to it — unless that entry names only it back (a prototype with a
    single source): then the pair maps to the smaller of the two, which is as good a key."""
    table = {key.replace(_LTR_MARK, ""): [entry["c"].replace(_LTR_MARK, "") for entry in entries]
             for key, entries in confusables.confusables_data.items()}
    found: dict[str, str] = {}
    for char, targets in table.items():
        if len(char) != 1 or len(targets) != 1:
            continue
        target = targets[0]
        found[char] = min(char, target) if len(target) == 1 and table.get(target) == [char] else target
    return found


def skeleton(text: str) -> str:
    """TR39's skeleton of ``text``: NFD, each character replaced by its prototype, NFD again."""
    prototypes = _prototypes()
    return unicodedata.normalize("NFD", "".join(prototypes.get(ch, ch) for ch in unicodedata.normalize("NFD", text)))


def username_keys(username: str) -> frozenset[str]:
    """What ``username`` reads as: two names sharing a key read alike. NFKC, then the TR39 skeleton
    casefolded (``AIice`` → ``alice``) and the casefolded name's skeleton (``ALICE`` → ``alice``: the
    skeleton keeps case, and a capital I reads as l only beside lower-case letters)."""
    name = unicodedata.normalize("NFKC", username)
    return frozenset((skeleton(skeleton(name).casefold()), skeleton(name.casefold())))


def lookalike_of(username: str, exclude_pk: int | None = None) -> str | None:
    """The existing username ``username`` would pass for, or None.

    Another user (``exclude_pk``: the one being renamed) whose name reads alike (:func:`username_keys`);
    else, with no such user, a name that is not plain ASCII yet reads as plain ASCII (``ａｄｍｉｎ``, a
    Cyrillic "а" in "аlice"): its key, a disguise even before its target exists. A name wholly in
    another script that reads as itself ("оля") is kept, and so is the same name (the database's
    uniqueness is for that). One read of every username: creating or renaming a user is rare."""
    keys = username_keys(username)
    users = get_user_model().objects.exclude(pk=exclude_pk) if exclude_pk is not None else get_user_model().objects
    for other in users.values_list("username", flat=True).iterator():
        if other != username and keys & username_keys(other):
            return other
    plain = sorted(key for key in keys if key.isascii())
    return plain[0] if plain and not username.isascii() else None


def refuse_lookalike(username: str, exclude_pk: int | None = None) -> str:
    """``username``, or ``ValidationError`` saying whom it reads like (the admin console's user forms)."""
    other = lookalike_of(username, exclude_pk)
    if other is None:
        return username
    raise ValidationError(
        f"“{username}” reads like “{other}”: its letters look like another name's (Unicode TR39 "
        "confusables, such as a capital I for an l or a fullwidth or Cyrillic letter), so it could pass "
        "for someone else in lists and logs. Choose a plainly different name.", code="lookalike")
