"""Two scripted clusters for the fleet tests: ``east`` (2 free A100s) and ``west`` (8), each its own
backend chosen through the setting (tests/backends.py ``use_backends``)."""

from __future__ import annotations

import pytest

from cluster.backends.base import NodeCapacity
from cluster.manifests.common import node_selector
from fleet.models import Cluster, GpuFlavor
from jobs.models import TrainingRun
from tests.backends import use_backends
from tests.fakes import FakeBackend
from workloads.tasks import apply_workload


def node(name: str, flavor, free: int, total: int = 8) -> NodeCapacity:
    """A node offering ``flavor`` (its labels are what the flavor's pods select), ``free`` of ``total`` units free."""
    spec = flavor.to_spec()
    return NodeCapacity(name, spec.resource_name, total, total - free, labels=dict(node_selector(spec)))


def _a100() -> GpuFlavor:
    return GpuFlavor.objects.get(name="a100-80gb")


@pytest.fixture
def clusters(settings, flavors):
    """``east`` with 2 free A100s, ``west`` with 8; both ready."""
    a100 = flavors["a100-80gb"]
    backends = use_backends(settings, {
        "east": FakeBackend(nodes=[node("east-a100-0", a100, free=2)]),
        "west": FakeBackend(nodes=[node("west-a100-0", a100, free=8)]),
    })
    Cluster.objects.create(name="east", region="us-east", labels={"site": "onprem"})
    Cluster.objects.create(name="west", region="us-west", labels={"site": "cloud"})
    return backends


#: The pools inline's management form of a cluster's admin page with no pools (docs/pools.md), as a browser posts it.
NO_POOLS = {"pools-TOTAL_FORMS": "0", "pools-INITIAL_FORMS": "0"}


def apply(run) -> TrainingRun:
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    return run


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
