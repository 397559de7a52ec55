"""The one shape of a reason kept with a decision: a code for code, words for people (docs/glossary.md "reason").

Every place that keeps a reason keeps both halves, under one type: code branches on ``code`` (stable,
from a vocabulary: an admission code, a placement rejection, why reclaim found no victims), never on
``words``, which carry figures ("needs 4× a100-80gb, 6 of 8 in use") and may be reworded. It lives
in the lowest layer that keeps one (placement's rejections, here in the Django-free cluster layer),
so every layer above uses the same type.
"""

from __future__ import annotations

from typing import NamedTuple


class Reason(NamedTuple):
    """Why, twice: ``code`` for code to compare, ``words`` for people to read."""

    code: str
    words: str
