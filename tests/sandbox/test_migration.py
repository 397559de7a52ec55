"""Upgrading a running sandbox to several clusters: its rows carry on in the inventory's first cluster."""

from __future__ import annotations

import pytest

from sandbox.backend import SandboxBackend
from sandbox.models import SimClock, SimObject, SimPod
from tests.db_template import database_at
from tests.sandbox.helpers import at

BEFORE, AFTER = [("sandbox", "0002_graceful_deletion_and_spot")], [("sandbox", "0004_rows_to_first_cluster")]


@pytest.mark.django_db(transaction=True)
def test_the_rows_of_a_one_cluster_sandbox_move_to_the_first_cluster(two_clusters_inventory):
    with database_at(BEFORE) as executor:
        old = executor.loader.project_state(BEFORE).apps
        old.get_model("sandbox", "SimClock").objects.create(pk=1, last_tick=at(30))
        job = old.get_model("sandbox", "SimObject").objects.create(
            kind="Job", api_version="batch/v1", namespace="team-ml", name="run-1", workload="run-1", uid="u-1",
            manifest={}, created_at=at(0))
        old.get_model("sandbox", "SimPod").objects.create(owner_id=job.pk, namespace="team-ml", name="run-1-abcde",
                                                          created_at=at(0))
        old.get_model("sandbox", "SimNodeOutage").objects.create(node="gpu-h100-0", since=at(10))

        executor.migrate(AFTER)
        east, west = SandboxBackend("east"), SandboxBackend("west")
        assert (east.clock(), set(east.nodes_down())) == (at(30), {"gpu-h100-0"})
        assert west.nodes_down() == {} and not SimClock.objects.filter(cluster="west").exists()
        assert list(SimObject.objects.values_list("cluster", "name")) == [("east", "run-1")]
        assert list(SimPod.objects.values_list("cluster", "name")) == [("east", "run-1-abcde")]
