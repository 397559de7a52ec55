"""Request limits under ``/api/``: bodies over the limit, bodies that are not JSON, long request lines.

A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` used to be a 400 with an ERROR and its traceback
logged for each request (Django's ``RequestDataTooBig``); a form or multipart body was parsed
although the schema's fields (``env``, ``autoscale``) have no form encoding; a request line
over gunicorn's default 4094 bytes was answered by gunicorn in HTML, before the API.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from jobs.models import TrainingRun
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

LIMIT = 10_000


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=LIMIT)
@pytest.mark.parametrize("debug", [False, True])
def test_a_body_over_the_limit_is_a_413_in_the_error_shape_without_an_error_log(api, quota, caplog, debug):
    payload = {**run_payload(), "env": {"BIG": "x" * LIMIT}}
    with override_settings(DEBUG=debug), caplog.at_level(logging.INFO):
        response = api.post("/api/v1/runs/", json.dumps(payload), content_type="application/json")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert list(response.json()["errors"]) == ["detail"]
    assert f"at most {LIMIT}" in response.json()["errors"]["detail"][0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]  # not even a warning with a traceback
    assert not TrainingRun.objects.exists()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=LIMIT)
def test_a_body_under_the_limit_is_read_as_before(api, quota, published):
    response = api.post("/api/v1/runs/", json.dumps(run_payload()), content_type="application/json")
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize("content_type", ["multipart", "application/x-www-form-urlencoded"])
def test_a_form_body_is_a_415_the_api_takes_json_only(api, quota, published, content_type):
    fields = {k: v for k, v in run_payload().items() if isinstance(v, str)}
    if content_type == "multipart":
        response = api.post("/api/v1/runs/", fields, format="multipart")
    else:
        response = api.post("/api/v1/runs/", "&".join(f"{k}={v}" for k, v in fields.items()), content_type=content_type)
    assert response.status_code == 415, response.json()
    assert "detail" in response.json()["errors"]
    assert not TrainingRun.objects.exists()


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory):
    """The web server as every launch starts it (``--config gunicorn.conf.py``) on a free port: its base URL.
    One for the module: its tests send requests without a token, which change nothing on the server."""
    tmp_path = tmp_path_factory.mktemp("gunicorn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "SLIPWAY_VAR_DIR": str(tmp_path)}
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("gunicorn")), "portal.wsgi", "--config", "gunicorn.conf.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # waiting for the server to listen, not for a race
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def status_and_type(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"]


def test_a_long_api_request_line_reaches_the_api_up_to_gunicorns_maximum(gunicorn):
    # "GET <path> HTTP/1.1" over gunicorn's default 4094 bytes: the API answers, in JSON (401: no token).
    long_query = "/api/v1/flavors/?created_by=" + "a" * 7000
    assert status_and_type(gunicorn + long_query) == (401, "application/json")
    # Past the documented 8190, gunicorn refuses the line itself (docs/operations.md).
    assert status_and_type(gunicorn + long_query + "a" * 2000)[0] == 414


def raw_post(base: str, header_value: bytes) -> tuple[bytes, bytes]:
    """POST /api/v1/runs/ with ``Idempotency-Key: <header_value>`` as raw bytes: (status line and headers, body)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"POST /api/v1/runs/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2\r\nIdempotency-Key: " + header_value + b"\r\nConnection: close\r\n\r\n{}")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _sep, body = data.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("value", [b"key\x01one", b"key\x00one", b"key\x1bone", b"key\x7fone"])
def test_a_header_gunicorn_refuses_is_answered_in_the_api_error_shape(gunicorn, value):
    """Security review 5 #9d: an Idempotency-Key with a control character never reaches Django —
    gunicorn refuses the header value itself — and its 400 was an HTML page, not the API's JSON."""
    head, body = raw_post(gunicorn, value)
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"\r\ncontent-type: application/json" in head.lower()
    errors = json.loads(body)["errors"]
    assert "IDEMPOTENCY-KEY" in errors["non_field_errors"][0]


@pytest.mark.parametrize("value", [b"key\tone", b"caf\xc3\xa9"])
def test_a_key_that_reaches_django_is_its_json_400_or_goes_on(gunicorn, value):
    """A tab and non-ASCII bytes pass gunicorn: Django answers (401 here, without a token) in JSON;
    with a token the key's own check is a JSON 400 (tests/test_bad_input.py)."""
    head, body = raw_post(gunicorn, value)
    assert head.startswith(b"HTTP/1.1 401 ") and "errors" in json.loads(body)
