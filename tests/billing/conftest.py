"""Fixtures of the billing tests: the quotas tests' team with quota (billing counts what admitted work holds), and
a cluster with an elastic pool (idle pool capacity)."""

import pytest

from fleet.models import Cluster, NodePool
from tests.quotas.conftest import quota_team  # noqa: F401 - a fixture, used by name


@pytest.fixture
def east(flavors):
    """Cluster east with an elastic pool of H100 nodes (8 units each); its L4s are a fixed inventory."""
    cluster = Cluster.objects.create(name="east")
    NodePool.objects.create(cluster=cluster, flavor=flavors["h100-80gb"], max_nodes=4)
    return Cluster.objects.prefetch_related("pools__flavor").get(pk=cluster.pk)
