"""Cost truth on a scripted timeline: the ledger against the exact figure the script implies.

Runs and an endpoint start and stop on the simulated cluster — on-demand and spot, full GPUs
and a MIG slice, busy and idle GPUs — through the real apply task and reconcile cycle, while
cycles are replayed, skipped (a reconciler outage of two minutes) and one is killed halfway
through its ledger write. Time is the sandbox clock (``timezone.now`` follows it, so user
actions happen at scripted instants), and the script knows exactly when each container ran
and when its GPUs were idle. The ledger must come within 0.5% of that cost, idle GPU-hours
within one reconcile interval, and hold no piece of time twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest

from billing import ledger
from billing.models import UsageRecord
from cluster.backends.base import ClusterAddress
from fleet.models import GpuFlavor
from inference import services as endpoints
from jobs import services as runs
from quotas.demo import seed_team_quotas
from tests.workloads.timeline import INTERVAL, scripted_timeline
from workloads.cycle import reconcile as rec
from workloads.idle import idle_figures

pytestmark = pytest.mark.django_db(transaction=True)

#: Eight minutes before an hour boundary, so segments roll over an hour on the way.
START = datetime(2026, 11, 12, 13, 52, 0, tzinfo=UTC)


@pytest.fixture
def timeline(published, monkeypatch, settings):
    return scripted_timeline(published, monkeypatch, settings, START)


def hours(delta: timedelta) -> Decimal:
    return Decimal(delta.total_seconds()) / 3600


def test_the_ledger_matches_the_scripted_timeline(timeline, member, team, flavors):
    seed_team_quotas(team, {"a100-80gb": 4, "l4": 2, "a100-1g.10gb": 7}, Decimal("100000"))
    a100, l4, mig = (GpuFlavor.objects.get(name=n) for n in ("a100-80gb", "l4", "a100-1g.10gb"))
    image = "registry.example.com/ml/trainer:1.4"

    def run(name, flavor, gpus, spot, env):
        return runs.submit_run(member, team, {"name": name, "image": image, "command": ["python", "t.py"],
                                              "flavor": flavor, "gpus_per_worker": gpus, "spot": spot, "env": env})

    # t0: a busy on-demand A100 pair for 20 min, an idle spot L4 for 15 min, a busy A100 that
    # the user cancels, and a MIG endpoint that idles until traffic arrives.
    busy = run("busy", "a100-80gb", 2, False, {"SLIPWAY_SIM_DURATION": "20m", "SLIPWAY_SIM_GPU_UTIL": "90"})
    lazy = run("lazy", "l4", 1, True, {"SLIPWAY_SIM_DURATION": "15m", "SLIPWAY_SIM_GPU_UTIL": "2"})
    doomed = run("doomed", "a100-80gb", 1, False, {"SLIPWAY_SIM_DURATION": "1h"})
    server = endpoints.create_endpoint(member, team, {
        "name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-1g.10gb",
        "min_replicas": 1, "max_replicas": 1, "autoscale": {"metric": "requests_per_second", "target": 10},
        "env": {"SLIPWAY_SIM_LOAD_SECONDS": "10"}})
    server_ref = ClusterAddress(server.namespace, server.object_name)
    timeline.backend.set_load(server_ref, 0)

    timeline.cycles(24)  # two minutes: everything is running
    starts = {w.ref: timeline.container_start(w) for w in (busy, lazy, doomed, server)}

    # A replayed cycle (same instant, twice) and a reconciler outage of two minutes.
    rec.reconcile(timeline.backend, now=timeline.now)
    timeline.advance(120)
    timeline.cycles(12)

    # Traffic reaches the endpoint: its GPU turns busy.
    timeline.backend.set_load(server_ref, 50)
    traffic_at = timeline.now
    timeline.cycles(12)

    # A worker dies in the middle of a cycle's ledger write (the hour boundary rolls every
    # running segment over): its transaction never commits; the next cycle bills it all.
    while timeline.now + timedelta(seconds=INTERVAL) < datetime(2026, 11, 12, 14, 0, 0, tzinfo=UTC):
        timeline.cycle()
    real_record = ledger.record_intervals
    killed = []

    def dies(intervals):
        if intervals and not killed:
            killed.append(len(intervals))
            raise SystemExit("worker killed")
        return real_record(intervals)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger, "record_intervals", dies)
        with pytest.raises(SystemExit):
            timeline.cycle()
    assert killed
    timeline.cycles(60)

    # The user cancels one run; later the endpoint is deleted; the rest end on their own.
    cancelled_at = timeline.now
    runs.cancel_run(member, runs.get_run_for_user(member, doomed.pk, role="member"))
    timeline.cycles(150)
    deleted_at = timeline.now
    endpoints.delete_endpoint(member, endpoints.get_endpoint_for_user(member, server.pk, role="member"))
    timeline.cycles(70)  # past the end of the 20-minute run

    truth = {  # ref: (cost, GPU-hours, idle GPU-hours)
        busy.ref: (a100.price_per_hour * 2 * hours(timedelta(minutes=20)), 2 * hours(timedelta(minutes=20)), 0),
        lazy.ref: (l4.spot_price_per_hour * hours(timedelta(minutes=15)), hours(timedelta(minutes=15)),
                   hours(timedelta(minutes=15))),
        doomed.ref: (a100.price_per_hour * hours(cancelled_at - starts[doomed.ref]),
                     hours(cancelled_at - starts[doomed.ref]), 0),
        server.ref: (mig.price_per_hour * hours(deleted_at - starts[server.ref]),
                     mig.gpu_fraction * hours(deleted_at - starts[server.ref]),
                     mig.gpu_fraction * hours(traffic_at - starts[server.ref])),
    }
    rows = UsageRecord.objects.order_by("ref", "start")
    for ref, (cost, gpu_hours, idle_hours) in truth.items():
        mine = [r for r in rows if r.ref == ref]
        billed = sum((r.cost for r in mine), Decimal(0))
        assert abs(billed - cost) / cost < Decimal("0.005"), (ref, billed, cost)
        assert abs(sum((r.gpu_hours for r in mine), Decimal(0)) - gpu_hours) / gpu_hours < Decimal("0.005"), ref
        # Idle time within one reconcile interval of the script's.
        units = 2 if ref == busy.ref else 1
        one_interval = hours(timedelta(seconds=INTERVAL)) * units
        assert abs(sum((r.idle_gpu_hours for r in mine), Decimal(0)) - Decimal(idle_hours)) <= one_interval, ref
        # No time held twice: each hour's row starts where the previous one ended, or later,
        # and no row holds more GPU time than its span allows.
        for before, after in pairwise(mine):
            assert after.start >= before.end, ref
        for r in mine:
            fraction = mig.gpu_fraction if ref == server.ref else 1
            assert r.gpu_hours <= hours(r.end - r.start) * units * fraction + Decimal("1E-9"), ref
    # The hour boundary was crossed, and the killed cycle's pieces were billed once.
    assert any(r.start.astimezone(UTC).hour == 14 for r in rows)
    # The report and each workload's own figures say the same.
    report = {row["group"]: row for row in ledger.usage_rows([team], START, START + timedelta(days=1), "workload")}
    figures = idle_figures([type(w).objects.get(pk=w.pk) for w in (busy, lazy, doomed, server)], timeline.now)
    for ref, row in report.items():
        assert row["idle_gpu_hours"] == figures[ref].gpu_hours
        assert row["idle_cost"] == figures[ref].cost
