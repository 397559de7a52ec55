"""Checks on text every input path shares (the API's parser, the workload validators, URL parts and query values)."""

from __future__ import annotations

#: The digits of the largest 64-bit integer (9223372036854775807): an id, a step or a count has no more.
WHOLE_NUMBER_DIGITS = 19


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a UTF-16 surrogate on its own (JSON allows "\\ud800"; UTF-8 cannot hold it)."""
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def whole_number(raw, digits: int = WHOLE_NUMBER_DIGITS, *, longer: int | None = None) -> int | None:
    """The whole number from 0 that ``raw`` (a URL's path part or a query value) writes in ASCII digits, or None.

    isascii: "²".isdigit() is True and int() reads other scripts' digits. Leading zeros are no digits of the number
    (``0042`` is 42, as int() reads it). A number of more than ``digits`` digits is ``longer`` (None: no number)
    without int() reading it: int() refuses a string of over 4300 digits with a ValueError of Python's own words,
    which a caller catching its own ValueError would pass on.
    """
    text = str(raw)
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0")
    return int(significant or "0") if len(significant) <= digits else longer
