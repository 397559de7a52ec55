"""Multiprocess figures under the real servers.

* gunicorn with two workers: admissions made through the API in whichever worker serves them
  are summed by one scrape, and stay summed when a worker is replaced (``gunicorn.conf.py``).
* A Celery worker (two pool processes, embedded beat, the sandbox cluster) writes its figures
  and serves them on its own port, behind the scrape rule; the web's ``/metrics`` reading the
  same directory sums the same figures.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings

from quotas.demo import seed_flavors, seed_team_quotas
from teams.services import create_api_token
from tests.conftest import redis_url
from tests.e2e.conftest import WorkerProcess, require_postgresql, started_worker, wait_for
from tests.portal.test_metrics import parse, scrape, value

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(240)]

TOKEN = "scrape-token-for-the-test"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def worker_with_metrics(transactional_db, tmp_path):
    """A worker of the test's own (the module's one test of it): its figures' directory and port."""
    port = free_port()
    process = started_worker(tmp_path, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"),
                             SLIPWAY_WORKER_METRICS_PORT=str(port), SLIPWAY_METRICS_TOKEN=TOKEN,
                             SLIPWAY_METRICS_ALLOW="192.0.2.1/32")
    yield process, f"http://127.0.0.1:{port}/metrics", tmp_path / "prometheus"
    process.stop()


def get(url: str, token: str | None = None, body: dict | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={**headers, "Connection": "close"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError:  # not listening (yet)
        return 0, ""


def test_the_worker_serves_its_pools_figures_and_the_web_sums_the_same(worker_with_metrics, client, settings):
    _process, url, directory = worker_with_metrics
    count = "slipway_reconcile_duration_seconds_count"

    def cycles() -> float:
        status, body = get(url, TOKEN)
        assert status == 200
        return value(parse(body), count, cluster="default")

    # Beat sends a cycle every 0.5 s; a pool process runs each and writes its own file.
    wait_for(lambda: cycles() >= 3, timeout=90, what="three reconcile cycles counted")
    assert list(directory.glob("histogram_*.db"))
    # Loopback is not in this worker's allow-list: the token is what lets a scraper in.
    assert get(url)[0] == 403 and get(url, "wrong")[0] == 403
    assert get(url.replace("/metrics", "/other"), TOKEN)[0] == 404
    # The web's view over the same directory: the same summed figures, plus the database's.
    settings.PROMETHEUS_MULTIPROC_DIR = str(directory)
    seen = cycles()
    web = scrape(client)
    assert value(web, count, cluster="default") >= seen and value(web, "slipway_cluster_up", cluster="default") == 1
    assert ("slipway_preemptions_total", frozenset({("cause", "spot")})) in web


@pytest.fixture
def gunicorn(transactional_db, tmp_path):
    """``gunicorn --workers 2`` as deployed (``--config gunicorn.conf.py``) on the test database, with
    no PROMETHEUS_MULTIPROC_DIR of its own: the settings put it under SLIPWAY_VAR_DIR."""
    require_postgresql("web")
    redis.Redis.from_url(redis_url()).flushdb()
    env = {**WorkerProcess(tmp_path).env}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("gunicorn")), "portal.wsgi", "--config", "gunicorn.conf.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        cwd=django_settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{url}/healthz")[0] == 200 or server.poll() is not None, timeout=60, what="gunicorn")
        assert server.poll() is None
        yield server, url, tmp_path / "prometheus"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        redis.Redis.from_url(redis_url()).flushdb()


def workers_of(master: int) -> set[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return {int(pid) for pid in children}


def test_gunicorn_workers_figures_are_summed_and_outlive_a_replaced_worker(gunicorn, team, member):
    server, url, directory = gunicorn
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("200000"))
    _token, raw = create_api_token(member, "test")
    payload = {"team": team.slug, "image": "registry.example.com/ml/trainer:1.0", "command": ["python", "train.py"],
               "flavor": "a100-80gb", "gpus_per_worker": 1}
    for index in range(6):  # a new connection each: either worker may take it
        status, body = get(f"{url}/api/v1/runs/", raw, {**payload, "name": f"run-{index}"})
        assert status == 201, body
    assert directory.is_dir() and list(directory.glob("counter_*.db"))
    status, body = get(f"{url}/metrics")
    assert status == 200
    samples = parse(body)
    assert value(samples, "slipway_admissions_total", decision="admitted") == 6
    assert value(samples, "slipway_admission_latency_seconds_count") == 6
    assert value(samples, "slipway_units_in_use", team=team.slug, flavor="a100-80gb") == 6
    # A worker replaced (max_requests, a crash): what it counted stays in the sum.
    workers = workers_of(server.pid)
    os.kill(min(workers), signal.SIGTERM)
    wait_for(lambda: len(workers_of(server.pid) - workers) == 1 and len(workers_of(server.pid)) == 2, timeout=30,
             what="gunicorn to replace the worker")
    status, body = get(f"{url}/metrics")
    assert status == 200 and value(parse(body), "slipway_admissions_total", decision="admitted") == 6
