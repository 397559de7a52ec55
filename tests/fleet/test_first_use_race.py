"""A fresh install's clusters, created on first use by whichever process reads them first (fleet.services.clusters),
while another process reads them too, on PostgreSQL.

Found by tests/e2e/test_training_apis_e2e.py: the test process and the Celery worker both met an empty cluster
table; the worker had created ``east`` (and asked its training API) but not ``west`` yet, so the test's read saw
``east`` alone — and seeded a price for one cluster of two. A submission read then would have found no cluster
with west's (or, east's discovery not kept yet, with Trainer v2's) training API.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from cluster.training import PYTORCHJOB, TRAINJOB
from fleet import services as fleet
from fleet.models import Cluster
from tests.threads import in_thread, wait_until_lock_waiter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

INVENTORY = """
clusters:
  - name: east
    training: trainjob
    pools: [{prefix: east-a100, count: 1, gpu: {product: NVIDIA-A100-SXM4-80GB, count: 8}}]
  - name: west
    pools: [{prefix: west-a100, count: 1, gpu: {product: NVIDIA-A100-SXM4-80GB, count: 8}}]
"""


def test_a_reader_meanwhile_sees_every_offered_cluster_with_its_training_api_never_some(settings, tmp_path):
    path = tmp_path / "east-west.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY, settings.SLIPWAY_CLUSTER_BACKEND = str(path), "sandbox"
    inside, go = threading.Event(), threading.Event()
    errors: list[Exception] = []
    seen: dict[str, list[Cluster]] = {}

    def pause_at_west(execute, sql, params, many, context):
        """The first process stops as it writes the last offered cluster, ``west``: ``east`` is written before."""
        result = execute(sql, params, many, context)
        if not inside.is_set() and sql.startswith('INSERT INTO "fleet_cluster"') and "west" in (params or ()):
            inside.set()
            go.wait(10)
        return result

    def first() -> None:
        with connection.execute_wrapper(pause_at_west):
            seen["first"] = fleet.clusters()

    creating = in_thread(first, errors)
    assert inside.wait(10)
    reading = in_thread(lambda: seen.setdefault("second", fleet.clusters()), errors)
    try:
        # Nothing of the first's is visible yet: the reader creates them too, and waits for the first's rows.
        assert '"fleet_cluster"' in wait_until_lock_waiter(reading).query, seen
    finally:
        go.set()
        creating.join(10)
        reading.join(10)
    assert errors == []
    for reader, clusters in seen.items():
        assert {c.name: c.effective_training_api for c in clusters} == {"east": TRAINJOB, "west": PYTORCHJOB}, reader
    assert Cluster.objects.count() == 2 and all(c.training_checked_at for c in Cluster.objects.all())
