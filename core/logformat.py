"""JSON log lines (``SLIPWAY_LOG_FORMAT=json``), for log collectors that index fields.

One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message`` (the
formatted message), ``process``, then ``exception`` (the traceback text) and ``stack`` when
present, and any ``extra={...}`` fields the call passed (values JSON cannot hold become
their ``str``). A traceback stays inside its line's object, so a collector never splits it into
lines of their own. The standard library is enough for this; Django's logging (settings
``LOGGING``) and the Celery worker (``portal/celery.py``) both use it.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

#: Attributes every LogRecord has: not copied as ``extra`` fields.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = value
        return json.dumps(line, default=str, ensure_ascii=False)
