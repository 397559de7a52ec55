"""What an endpoint's autoscaler reads of its engines (sandbox.engines.traffic): its trigger's figure from their
last scrapes, 0 when none has been read, and the demo curve only where the engines cannot say."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox import engines
from sandbox.controllers.scaledobject import endpoint_load
from sandbox.models import SimEngine
from tests.sandbox.helpers import T0


@pytest.fixture(autouse=True)
def engines_on(settings):
    settings.SLIPWAY_SANDBOX_ENGINES = True


DEP = SimpleNamespace(namespace="team-ml", workload="ep-1", plan={"pods": [{"engine": {"probe": "/health/ready"}}]})


def world(*rows: SimEngine) -> SimpleNamespace:
    return SimpleNamespace(cluster="default", engines={(row.namespace, row.pod): row for row in rows})


def engine(pod: str, *, load: float, waiting: int, rate: float, workload: str = "ep-1",
           scraped: bool = True) -> SimEngine:
    return SimEngine(namespace="team-ml", workload=workload, pod=pod, pid=1, port=1, load=load, waiting=waiting,
                     rate=rate, scraped_at=1.0 if scraped else None)


def test_each_trigger_reads_its_figure_summed_over_the_endpoints_engines():
    found = world(engine("ep-1-a", load=0.5, waiting=3, rate=2.0), engine("ep-1-b", load=0.25, waiting=1, rate=1.5),
                  engine("ep-2-a", load=1.0, waiting=9, rate=9.0, workload="ep-2"),
                  engine("ep-1-c", load=1.0, waiting=9, rate=9.0, scraped=False))  # not read yet: nothing to add
    assert engines.traffic(found, DEP, {"metric": "gpu-utilization", "min": 1}) == 75.0
    assert engines.traffic(found, DEP, {"metric": "queue-length", "min": 1}) == 4.0
    assert engines.traffic(found, DEP, {"metric": "requests-per-second", "min": 1}) == 3.5


def test_no_engine_read_yet_is_no_traffic_not_the_demo_curve():
    assert engines.traffic(world(), DEP, {"metric": "queue-length", "min": 1}) == 0.0
    assert engines.traffic(world(), DEP, {"metric": "requests-per-second", "min": 0}) == 0.0  # asleep: stays so


def test_the_engines_cannot_answer_a_users_query_nor_speak_for_replicas_without_engines():
    found = world(engine("ep-1-a", load=0.5, waiting=3, rate=2.0))
    assert engines.traffic(found, DEP, {"metric": "prometheus", "min": 1}) is None
    plain = SimpleNamespace(namespace="team-ml", workload="ep-1", plan={"pods": [{}]})
    assert engines.traffic(found, plain, {"metric": "queue-length", "min": 1}) is None


def test_with_engines_turned_off_the_demo_curve_drives_again(settings):
    settings.SLIPWAY_SANDBOX_ENGINES = False
    found = world(engine("ep-1-a", load=0.5, waiting=3, rate=2.0))
    assert engines.traffic(found, DEP, {"metric": "queue-length", "min": 1}) is None


def test_a_pinned_load_wins_over_the_traffic_and_the_traffic_over_the_demo_curve():
    plan = {"threshold": 70.0, "max": 4}
    assert endpoint_load({("team-ml", "ep-1"): 900.0}, "team-ml", "ep-1", plan, T0, traffic=12.0) == 900.0
    assert endpoint_load({}, "team-ml", "ep-1", plan, T0, traffic=0.0) == 0.0
    assert endpoint_load({}, "team-ml", "ep-1", plan, T0, traffic=None) > 0  # the demo curve
