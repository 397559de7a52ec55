"""The API's JSON parser: DRF's, plus a clean 400 for bodies nested too deeply to parse.

``json.loads`` raises RecursionError (not ValueError) past roughly a thousand levels of
nesting, which DRF's parser lets through as a 500; a 20 kB body is enough.
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
