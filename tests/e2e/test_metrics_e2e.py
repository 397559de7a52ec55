"""A real Celery worker (two pool processes, embedded beat, the sandbox cluster) writes its
figures in multiprocess mode and serves them on its own port, behind the scrape rule; the
web's ``/metrics`` reading the same directory sums the same figures."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
import redis
from django.db import connection

from tests.conftest import redis_url
from tests.e2e.conftest import WorkerProcess, wait_for
from tests.portal.test_metrics import parse, scrape, value

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(240)]

TOKEN = "scrape-token-for-the-test"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def worker_with_metrics(transactional_db, tmp_path):
    if "postgresql" not in connection.settings_dict["ENGINE"]:
        pytest.skip("needs PostgreSQL to share the test database with the worker process")
    redis.Redis.from_url(redis_url()).flushdb()
    process = WorkerProcess(tmp_path)
    port = free_port()
    process.env.update({"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"), "SLIPWAY_WORKER_METRICS_PORT": str(port),
                        "SLIPWAY_METRICS_TOKEN": TOKEN, "SLIPWAY_METRICS_ALLOW": "192.0.2.1/32"})
    process.start()
    yield process, f"http://127.0.0.1:{port}/metrics", tmp_path / "prometheus"
    process.stop()


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


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
