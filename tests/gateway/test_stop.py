"""A gateway's stop (SIGTERM, Ctrl-C) writes its last counts in one transaction and never waits out another
process's lock: ``make run`` gives each service 6 s before it kills it, and on a loaded machine the worker, finishing
its task as everything stops, held the SQLite database longer than that (the gateway, waiting up to the portal's
20 s busy timeout, was killed). Real ``manage.py gateway`` processes, on the test database (PostgreSQL) and on a
SQLite file as ``make run`` has it."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from core import processes
from gateway.server import LOCK_WAIT_SECONDS
from inference.models import GatewayLoad, KeyUsage, TrafficWindow
from tests import db_template
from tests.e2e.conftest import wait_for
from tests.factories import make_team
from tests.gateway.support import (
    Process,
    answers,
    bearer,
    completion,
    make_endpoint,
    make_key,
    start_gateway,
    until_status,
)

#: ``make run``'s grace (scripts/run.sh STOP_GRACE_SECONDS): a gateway stopped while the database is locked ends
#: within it. Without the limit it waited 20 s on SQLite, and on PostgreSQL for as long as the lock was held.
GRACE_SECONDS = 6


def stopped_within(process: Process, seconds: float) -> float:
    """SIGTERM ``process`` and wait for its exit; the seconds it took (failing past ``seconds``)."""
    started = time.monotonic()
    process.proc.send_signal(signal.SIGTERM)
    try:
        process.proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the gateway still ran {seconds} s after SIGTERM:\n{process.text()[-2000:]}")
    return time.monotonic() - started


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
class TestOnPostgres:
    @pytest.fixture
    def asleep(self, flavors):
        """An endpoint with no replica and a key: with no hold, each request is a 503 counted in the key's hour (no
        revision's: it was forwarded to none)."""
        team = make_team("ml-research", "ML Research")
        endpoint = make_endpoint(team, "asleep", state="scaled_to_zero")
        raw, _key = make_key(team)
        return endpoint, raw

    def test_a_stop_writes_its_last_counts_and_deletes_its_load_rows(self, tmp_path, asleep):
        endpoint, raw = asleep
        process, base = start_gateway(tmp_path, "clean", SLIPWAY_GATEWAY_HOLD_SECONDS="0")
        try:
            until_status(f"{base}/ml-research/asleep/v1/completions", 503, method="POST", json=completion(),
                         headers=bearer(raw))
            # A load row of this process's, as its load loop writes one while requests are held or in flight.
            gateway = f"{socket.gethostname()}:{process.proc.pid}"
            GatewayLoad.objects.create(endpoint=endpoint, gateway=gateway, held=1, updated_at=timezone.now())
            stopped_within(process, GRACE_SECONDS)
        finally:
            process.stop()
        assert process.proc.returncode == 0, process.text()
        assert sum(u.requests_5xx for u in KeyUsage.objects.filter(endpoint=endpoint)) >= 1
        assert not GatewayLoad.objects.filter(gateway=gateway).exists()
        assert "stopped without its last counts" not in process.text()

    def test_a_stop_while_the_tables_are_locked_ends_within_the_grace_and_writes_nothing(self, tmp_path, asleep):
        endpoint, raw = asleep
        process, base = start_gateway(tmp_path, "locked", SLIPWAY_GATEWAY_HOLD_SECONDS="0")
        try:
            # Another transaction holds the tables the gateway writes: it may read them, not write them.
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {TrafficWindow._meta.db_table}, {KeyUsage._meta.db_table}, "
                               f"{GatewayLoad._meta.db_table} IN EXCLUSIVE MODE")
                until_status(f"{base}/ml-research/asleep/v1/completions", 503, method="POST", json=completion(),
                             headers=bearer(raw))
                took = stopped_within(process, GRACE_SECONDS)
        finally:
            process.stop()
        assert process.proc.returncode == 0, process.text()
        assert took >= LOCK_WAIT_SECONDS  # it did wait for the lock, as long as its limit
        # What it counted is said, not half-written: one transaction, all or nothing.
        said = re.search(r"stopped without its last counts \(\d+ traffic windows, (\d+) key-hours", process.text())
        assert said and int(said[1]) >= 1, process.text()
        assert not KeyUsage.objects.filter(endpoint=endpoint).exists()


def test_a_stop_while_sqlite_is_locked_ends_within_the_grace(tmp_path):
    """``make run``'s case: SQLite, another process in a write transaction for longer than the grace."""
    var = tmp_path / "var"
    var.mkdir()
    database = db_template.migrated_sqlite(var / "slipway.sqlite3")
    port = processes.free_port()
    env = processes.minimal_env({"SLIPWAY_VAR_DIR": str(var), "DJANGO_SETTINGS_MODULE": "portal.settings",
                                 "DEBUG": "true"})
    process = Process([sys.executable, "manage.py", "gateway", "--bind", f"127.0.0.1:{port}"], env,
                      tmp_path / "gateway.log")
    holder = sqlite3.connect(database, isolation_level=None, timeout=30)
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/healthz") == 200 or process.proc.poll() is not None,
                 timeout=60, what="the gateway to serve")
        assert process.proc.poll() is None, process.text()
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held until the gateway is gone
        holder.execute("DELETE FROM django_session")
        took = stopped_within(process, GRACE_SECONDS)
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        process.stop()
    assert process.proc.returncode == 0, process.text()
    assert took >= LOCK_WAIT_SECONDS
    assert "stopped without its last counts" in process.text() and "database is locked" in process.text()
