"""Idle is measured against what a workload's units are: a time-sliced or MPS unit is a share of a GPU."""

from __future__ import annotations

import pytest

from cluster.backends.base import ClusterAddress
from tests.shared_flavors import make_shared_flavors
from workloads.idle import is_idle, of_units

pytestmark = pytest.mark.django_db


class Held:
    """What is_idle reads of a workload: its flavor and whether its open segment is idle."""

    def __init__(self, flavor, open_idle: bool = False) -> None:
        self.flavor, self.open_idle = flavor, open_idle


def test_a_shared_pod_busy_with_all_of_its_share_is_not_idle(flavors, settings):
    settings.SLIPWAY_IDLE_UTIL_PCT = 5
    t4 = make_shared_flavors()["t4-ts4"]
    here = ClusterAddress("team-a", "run-1")
    # A quarter of a T4 fully used shows 25 % of the GPU (the sandbox's per-pod share): 100 % of its unit.
    assert of_units(25.0, t4) == 100.0
    assert of_units(1.0, t4) == 4.0 and is_idle({here: 1.0}, here, Held(t4))
    assert not is_idle({here: 2.0}, here, Held(t4))  # 8 % of its unit
    # A whole GPU is measured as it is; a figure over what the unit can be is capped.
    assert of_units(2.0, flavors["a100-80gb"]) == 2.0 and is_idle({here: 2.0}, here, Held(flavors["a100-80gb"]))
    assert of_units(90.0, t4) == 100.0
    # Unmeasured is not idle; no answer at all keeps the flag.
    assert not is_idle({}, here, Held(t4)) and is_idle(None, here, Held(t4, open_idle=True))
