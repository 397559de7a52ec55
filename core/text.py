"""Checks on text every input path shares (the API's parser, the workload validators)."""

from __future__ import annotations


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a UTF-16 surrogate on its own (JSON allows "\\ud800"; UTF-8 cannot hold it)."""
    return any("\ud800" <= ch <= "\udfff" for ch in text)
