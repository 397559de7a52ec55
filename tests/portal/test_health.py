"""Kubernetes probes: ``/healthz`` answers while the process lives, ``/readyz`` only with DB and broker."""

from __future__ import annotations

import socket

import pytest
from django.db.utils import ConnectionHandler

from portal import health
from tests.conftest import redis_reachable


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_it_answers_healthz(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_it_answers_readyz_when_database_and_broker_answer(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok"}


def test_it_is_not_ready_when_the_database_is_down(client, db, monkeypatch):
    # A real PostgreSQL connection to a port where nothing listens.
    unreachable = ConnectionHandler({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": "slipway", "USER": "slipway",
        "HOST": "127.0.0.1", "PORT": str(closed_port()), "OPTIONS": {"connect_timeout": 2},
    }})["default"]
    monkeypatch.setattr(health, "connection", unreachable)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "problems": ["database unreachable: OperationalError"]}
    # Liveness stays green: restarting the pod would not bring the database back.
    assert client.get("/healthz").status_code == 200


def test_it_is_not_ready_when_the_redis_broker_is_down(client, db, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/4"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["broker unreachable: OperationalError"]


def test_it_is_not_ready_when_the_filesystem_queue_is_missing(client, db, settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(tmp_path / "gone"), "data_folder_out": str(tmp_path / "gone")}
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["broker unreachable: queue folder missing or not writable"]


def test_it_reports_both_problems_at_once(client, db, monkeypatch):
    monkeypatch.setattr(health, "check_database", lambda: "database unreachable: OperationalError")
    monkeypatch.setattr(health, "check_broker", lambda: "broker unreachable: OperationalError")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["database unreachable: OperationalError", "broker unreachable: OperationalError"]


@pytest.mark.redis
def test_it_is_ready_with_a_reachable_redis_broker(client, db, settings):
    from tests.conftest import redis_url

    assert redis_reachable(redis_url())
    settings.CELERY_BROKER_URL = redis_url()
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
    assert client.get("/readyz").status_code == 200


def test_it_answers_probes_for_any_host_and_over_plain_http(client, db, settings):
    # The kubelet sends the pod IP as Host and never follows a TLS redirect.
    settings.ALLOWED_HOSTS = ["slipway.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz", HTTP_HOST="10.42.0.17:8000").status_code == 200
    assert client.get("/readyz", HTTP_HOST="10.42.0.17:8000").status_code == 200
    # Every other page still enforces both.
    assert client.get("/login/", HTTP_HOST="10.42.0.17:8000").status_code == 400
    assert client.get("/login/", HTTP_HOST="slipway.example.com").status_code == 301


def test_it_refuses_writes_to_the_probes(client, db):
    assert client.post("/healthz").status_code == 405
    assert client.post("/readyz").status_code == 405
