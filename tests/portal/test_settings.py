"""``portal/settings.py`` read from the environment: service-free defaults, production overrides.

Each case executes the settings module afresh (``runpy``) under a controlled environment,
so the assertions see exactly what a process started with that environment would see.
"""

from __future__ import annotations

import os
import re
import runpy
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from portal.celery import app as celery_app

REPO = Path(__file__).resolve().parents[2]
SETTINGS_FILE = REPO / "portal" / "settings.py"
#: Every variable the settings read (the same scan the .env.example test uses).
READ_VARIABLES = sorted(set(re.findall(r'env_(?:str|bool|int|float|list|networks|choice|group_map)\(\s*"([A-Z0-9_]+)"', SETTINGS_FILE.read_text())))


@pytest.fixture
def load_settings(monkeypatch, tmp_path):
    """``load_settings(**env)``: the settings module's globals under exactly ``env``."""

    def load(**env: str) -> dict:
        for name in READ_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("SLIPWAY_VAR_DIR", str(tmp_path / "var"))
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return runpy.run_path(str(SETTINGS_FILE))

    return load


def test_it_needs_no_services_by_default(load_settings, tmp_path):
    s = load_settings()
    assert s["DEBUG"] is True
    db = s["DATABASES"]["default"]
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "var" / "slipway.sqlite3")
    assert s["CELERY_BROKER_URL"] == "filesystem://localhost//"
    assert s["CACHES"]["default"]["BACKEND"] == "django.core.cache.backends.db.DatabaseCache"
    assert s["SLIPWAY_CLUSTER_BACKEND"] == "sandbox"
    assert s["ALLOWED_HOSTS"] == ["localhost", "127.0.0.1", "[::1]"]
    assert s["SECURE_SSL_REDIRECT"] is False and s["SESSION_COOKIE_SECURE"] is False


def test_it_serializes_sqlite_writers_in_wal_mode(load_settings):
    options = load_settings()["DATABASES"]["default"]["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in options["init_command"]
    assert "busy_timeout" in options["init_command"]


def test_it_prepares_the_filesystem_broker_under_var(load_settings, tmp_path):
    s = load_settings()
    options = s["CELERY_BROKER_TRANSPORT_OPTIONS"]
    queue = tmp_path / "var" / "broker" / "queue"
    assert options["data_folder_in"] == options["data_folder_out"] == str(queue)
    assert queue.is_dir() and (tmp_path / "var" / "broker" / "processed").is_dir()


def test_it_never_runs_tasks_eagerly(load_settings):
    assert load_settings()["CELERY_TASK_ALWAYS_EAGER"] is False
    assert load_settings(DEBUG="false", SECRET_KEY="x" * 50)["CELERY_TASK_ALWAYS_EAGER"] is False


def test_it_switches_to_production_services(load_settings):
    s = load_settings(
        DEBUG="false", SECRET_KEY="k" * 50, ALLOWED_HOSTS="slipway.example.com, api.example.com",
        CSRF_TRUSTED_ORIGINS="https://slipway.example.com",
        DATABASE_URL="postgres://slipway:pw@db:5432/slipway", REDIS_URL="redis://redis:6379/2",
        SLIPWAY_CLUSTER_BACKEND="kubernetes",
    )
    db = s["DATABASES"]["default"]
    assert (db["ENGINE"], db["HOST"], db["NAME"]) == ("django.db.backends.postgresql", "db", "slipway")
    assert db["CONN_MAX_AGE"] == 60 and db["CONN_HEALTH_CHECKS"] is True
    assert s["CACHES"]["default"] == {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                      "LOCATION": "redis://redis:6379/2",
                                      "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2}}
    assert s["CELERY_BROKER_URL"] == "redis://redis:6379/2"
    assert s["ALLOWED_HOSTS"] == ["slipway.example.com", "api.example.com"]
    assert s["CSRF_TRUSTED_ORIGINS"] == ["https://slipway.example.com"]
    assert s["SLIPWAY_CLUSTER_BACKEND"] == "kubernetes"


def test_it_turns_security_on_without_debug(load_settings):
    s = load_settings(DEBUG="false", SECRET_KEY="k" * 50)
    assert s["ALLOWED_HOSTS"] == []  # nothing is served until the hosts are named
    assert s["SECURE_SSL_REDIRECT"] and s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
    assert s["SECURE_HSTS_SECONDS"] == 31536000
    assert s["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert "CompressedManifest" in s["STORAGES"]["staticfiles"]["BACKEND"]


def test_it_lets_each_security_flag_be_overridden(load_settings):
    s = load_settings(DEBUG="false", SECURE_SSL_REDIRECT="false", SECURE_HSTS_SECONDS="60", SECURE_HSTS_PRELOAD="true")
    assert s["SECURE_SSL_REDIRECT"] is False
    assert s["SECURE_HSTS_SECONDS"] == 60
    assert s["SECURE_HSTS_PRELOAD"] is True
    assert "security.W021" not in s["SILENCED_SYSTEM_CHECKS"]  # preloading chosen: nothing to silence


def test_it_gives_redis_a_visibility_timeout_longer_than_any_task(load_settings):
    s = load_settings(REDIS_URL="redis://redis:6379/0")
    assert s["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] == 3600
    s = load_settings(REDIS_URL="redis://redis:6379/0", CELERY_VISIBILITY_TIMEOUT="7200")
    assert s["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"] == 7200


def test_it_gives_an_smtp_server_a_timeout(load_settings):
    """Django's default is none: a mail server that never answered would hold a notification thread for good."""
    assert load_settings()["EMAIL_TIMEOUT"] == 10.0
    assert load_settings(EMAIL_TIMEOUT="2.5")["EMAIL_TIMEOUT"] == 2.5


def test_it_takes_a_separate_broker_url(load_settings):
    s = load_settings(REDIS_URL="redis://cache:6379/0", CELERY_BROKER_URL="redis://broker:6379/1")
    assert s["CELERY_BROKER_URL"] == "redis://broker:6379/1"
    assert s["CACHES"]["default"]["LOCATION"] == "redis://cache:6379/0"


def test_it_uses_a_named_test_database_when_asked(load_settings):
    db = load_settings(DATABASE_URL="postgres://postgres@127.0.0.1/test", SLIPWAY_TEST_DB_NAME="test_x")["DATABASES"]
    assert db["default"]["TEST"] == {"NAME": "test_x"}


def test_it_fails_loudly_on_a_bad_value(load_settings):
    with pytest.raises(ImproperlyConfigured, match="DEBUG"):
        load_settings(DEBUG="sometimes")
    with pytest.raises(ImproperlyConfigured, match="SLIPWAY_KUBE_BURST"):
        load_settings(SLIPWAY_KUBE_BURST="lots")


def test_it_reads_a_failed_provisionings_backoff_and_refuses_one_that_cannot_be(load_settings):
    assert (load_settings()["SLIPWAY_PROVISIONING_BACKOFF_SECONDS"],
            load_settings()["SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS"]) == (60, 1800)  # Kueue's defaults
    s = load_settings(SLIPWAY_PROVISIONING_BACKOFF_SECONDS="5", SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS="40")
    assert (s["SLIPWAY_PROVISIONING_BACKOFF_SECONDS"], s["SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS"]) == (5, 40)
    for base, cap in (("0", "1800"), ("120", "60"), ("60", "604801"), ("-1", "1800")):
        with pytest.raises(ImproperlyConfigured, match="SLIPWAY_PROVISIONING_BACKOFF_SECONDS"):
            load_settings(SLIPWAY_PROVISIONING_BACKOFF_SECONDS=base, SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS=cap)


def test_it_reads_who_may_scrape_the_metrics(load_settings):
    s = load_settings()
    assert s["SLIPWAY_METRICS_ALLOW"] == ("127.0.0.1/32", "::1/128") and s["SLIPWAY_METRICS_TOKEN"] == ""
    s = load_settings(SLIPWAY_METRICS_ALLOW="10.0.0.0/8, 192.168.1.7", SLIPWAY_METRICS_TOKEN="t0ken")
    assert s["SLIPWAY_METRICS_ALLOW"] == ("10.0.0.0/8", "192.168.1.7/32") and s["SLIPWAY_METRICS_TOKEN"] == "t0ken"
    with pytest.raises(ImproperlyConfigured, match="SLIPWAY_METRICS_ALLOW"):
        load_settings(SLIPWAY_METRICS_ALLOW="10.0.0.0/33")


def test_it_puts_the_metrics_directory_under_var_and_into_the_environment(load_settings, monkeypatch, tmp_path):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    s = load_settings()
    assert s["PROMETHEUS_MULTIPROC_DIR"] == os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "var" / "prometheus")
    assert (tmp_path / "var" / "prometheus").is_dir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "elsewhere"))
    assert load_settings()["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "elsewhere")


def test_it_writes_text_or_json_logs(load_settings):
    assert load_settings()["LOGGING"]["handlers"]["console"]["formatter"] == "text"
    logging = load_settings(SLIPWAY_LOG_FORMAT="JSON")["LOGGING"]
    assert logging["formatters"][logging["handlers"]["console"]["formatter"]] == {"()": "core.logformat.JsonFormatter"}


def test_it_configures_celery_for_at_least_once_delivery():
    conf = celery_app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert {q.name for q in conf.task_queues} == {"default", "cluster", "reconcile", "notify"}
    assert conf.beat_schedule == settings.CELERY_BEAT_SCHEDULE
    assert conf.beat_schedule["reconcile"]["options"]["queue"] == "reconcile"
    assert conf.task_always_eager is False


def _production_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in READ_VARIABLES and not k.startswith("DJANGO_")}
    return {
        **keep,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50)[:50],
        "SLIPWAY_SECRET_KEYS": f"{Fernet.generate_key().decode()},{Fernet.generate_key().decode()}",
        "ALLOWED_HOSTS": "slipway.example.com",
        "CSRF_TRUSTED_ORIGINS": "https://slipway.example.com",
        "DATABASE_URL": "postgres://slipway:secret@db.example.com:5432/slipway",
        "REDIS_URL": "redis://redis.example.com:6379/0",
    }


def test_it_passes_the_deploy_check_with_production_variables(tmp_path):
    env = {**_production_env(), "SLIPWAY_VAR_DIR": str(tmp_path / "var")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_fails_the_deploy_check_with_the_development_key(tmp_path):
    # The counter-test: the check really looks at our settings.
    env = {**_production_env(), "SLIPWAY_VAR_DIR": str(tmp_path / "var")}
    del env["SECRET_KEY"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "security.W009" in result.stdout + result.stderr


def test_it_refuses_to_start_in_production_without_secret_env_keys(tmp_path, load_settings):
    # With DEBUG on the demo derives a key from SECRET_KEY; with DEBUG off there is no default
    # (secret env must not hang on SECRET_KEY), and migrate/runserver's checks stop the start.
    assert len(load_settings()["SLIPWAY_SECRET_KEYS"]) == 1
    assert load_settings(DEBUG="false", SECRET_KEY="k" * 50)["SLIPWAY_SECRET_KEYS"] == []
    assert load_settings(SLIPWAY_SECRET_KEYS=" a, b ,")["SLIPWAY_SECRET_KEYS"] == ["a", "b"]
    env = {**_production_env(), "SLIPWAY_VAR_DIR": str(tmp_path / "var")}
    del env["SLIPWAY_SECRET_KEYS"]
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "slipway.E001" in result.stderr and "SLIPWAY_SECRET_KEYS is not set" in result.stderr


def test_the_demo_database_prints_no_covering_index_warning(tmp_path):
    # `make run` (migrate) checks the models against SQLite: its "no covering indexes" W040
    # about quotas.UsageRecord was printed on every start.
    env = {k: v for k, v in os.environ.items() if k not in READ_VARIABLES}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", SLIPWAY_VAR_DIR=str(tmp_path / "var"))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "W040" not in result.stdout + result.stderr


def test_postgresql_keeps_the_covering_index_check(load_settings):
    # Only SQLite, which cannot build the INCLUDE, has the check silenced.
    s = load_settings(DATABASE_URL="postgres://slipway@db.example.com:5432/slipway")
    assert "models.W040" not in s["SILENCED_SYSTEM_CHECKS"]
    assert "models.W040" in load_settings()["SILENCED_SYSTEM_CHECKS"]
