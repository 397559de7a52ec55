"""Bodies over the limit and bodies that are not JSON, under ``/api/``: the error shape, no traceback.

A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` used to be a 400 with an ERROR and its traceback
logged for each request (Django's ``RequestDataTooBig``); a form or multipart body was parsed
although the schema's fields (``env``, ``autoscale``) have no form encoding.
"""

from __future__ import annotations

import json
import logging

import pytest
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
