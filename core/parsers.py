"""The API's JSON parser: DRF's, plus a clean 400 for what it would let through as a 500.

* ``json.loads`` raises RecursionError (not ValueError) past roughly a thousand levels of
  nesting; a 20 kB body is enough.
* JSON may carry a lone UTF-16 surrogate (``"\\ud800"``), which no UTF-8 text column can
  store: such a body is refused at the door, whichever field it is in.
"""

from __future__ import annotations

from collections.abc import Iterator

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.text import has_lone_surrogate


def _strings(value) -> Iterator[str]:
    """Every string of a parsed JSON value, keys included (iterative: depth is bounded already)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        if any(has_lone_surrogate(text) for text in _strings(data)):
            raise ParseError("JSON parse error - strings must be valid Unicode (a lone surrogate was sent).")
        return data
