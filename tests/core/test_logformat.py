"""JSON log lines (``SLIPWAY_LOG_FORMAT=json``): what Django's processes and the Celery worker
write, each line one JSON object with its level, logger, message and traceback."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
from django.conf import settings

from core.logformat import JsonFormatter

LOG_ONE = textwrap.dedent("""
    import logging
    {setup}
    log = logging.getLogger("workloads.cycle.reconcile")
    log.info("reconcile: %s workloads", 3, extra={{"cluster": "default"}})
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("cycle failed")
""")

DJANGO = "import django; django.setup()"
# What `celery worker` does when it starts: Celery's own logging setup, which Slipway's
# setup_logging receiver (portal/celery.py) replaces with Django's LOGGING.
CELERY = "import django; django.setup(); from portal.celery import app; app.log.setup(loglevel=logging.INFO)"


def run(setup: str, log_format: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "SLIPWAY_LOG_FORMAT": log_format}
    return subprocess.run([sys.executable, "-c", LOG_ONE.format(setup=setup)], env=env, cwd=settings.BASE_DIR,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("setup", [DJANGO, CELERY], ids=["django", "celery-worker"])
def test_each_line_is_one_json_object_with_level_logger_message_and_traceback(setup):
    result = run(setup, "json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    info, error = [line for line in lines if line["logger"] == "workloads.cycle.reconcile"]
    assert (info["level"], info["message"], info["cluster"]) == ("INFO", "reconcile: 3 workloads", "default")
    assert info["time"].endswith("+00:00") and "exception" not in info
    assert (error["level"], error["message"]) == ("ERROR", "cycle failed")
    assert error["exception"].startswith("Traceback (most recent call last):")
    assert error["exception"].endswith("ZeroDivisionError: division by zero")


def test_text_stays_the_default():
    result = run(DJANGO, "text")
    assert result.returncode == 0, result.stderr
    assert " INFO workloads.cycle.reconcile: reconcile: 3 workloads" in result.stderr
    assert "Traceback (most recent call last):" in result.stderr


def test_an_unknown_format_stops_the_start_with_the_settings_name():
    result = run(DJANGO, "xml")
    assert result.returncode != 0
    assert "SLIPWAY_LOG_FORMAT must be one of text, json, got 'xml'" in result.stderr


def test_values_json_cannot_hold_are_written_as_text():
    record = logging.LogRecord("quotas", logging.WARNING, __file__, 1, "spent %s", ("10.00",), None)
    record.amount = object()
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "spent 10.00" and line["amount"].startswith("<object object")
