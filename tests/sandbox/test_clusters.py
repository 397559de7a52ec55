"""Several sandbox clusters: each backend sees and changes only its own cluster's rows, has its own
clock and nodes, and can be silenced (a partition: calls fail, the work runs on)."""

from __future__ import annotations

import re
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from cluster.errors import NotFound, Transient
from cluster.training import NONE, PYTORCHJOB, TrainingOffer
from jobs.status import TrainingPhase, training_status
from sandbox import faults
from sandbox.backend import SandboxBackend
from sandbox.inventory import UnknownCluster
from sandbox.models import SimClock, SimEvent, SimLoad, SimNodeHeat, SimObject, SimPod
from tests.sandbox.conftest import TWO_CLUSTERS
from tests.sandbox.helpers import at, endpoint, observed, ref, run_until, team_objects, training
from workloads.registry import resource_kinds


def _apply_run(backend: SandboxBackend, name: str = "run-42", gpus: int = 1, duration: str = "60s") -> None:
    backend.apply(team_objects() + training(name, gpus=gpus, duration=duration), resource_kinds(), now=at(0))


def _in_use(backend: SandboxBackend) -> dict[tuple[str, str], tuple[int, int]]:
    return {(row.node, row.resource_name): (row.in_use, row.allocatable) for row in backend.capacity()}


def test_a_backend_without_a_name_works_on_the_first_cluster_and_an_unknown_name_is_refused(east_west):
    assert SandboxBackend().cluster == "east"
    assert [backend.cluster for backend in east_west] == ["east", "west"]
    with pytest.raises(UnknownCluster, match=r"no sandbox cluster 'north'.*it has east, west"):
        SandboxBackend("north")


def test_two_clusters_hold_the_same_names_apart(east_west):
    east, west = east_west
    _apply_run(east)  # the same namespace team-ml and Job run-42 on both
    _apply_run(west, gpus=3)
    for backend in east_west:
        run_until(backend, 0, 15)
    on_east, on_west = observed(east, "run-42"), observed(west, "run-42")
    assert on_east.first("Job")["metadata"]["uid"] != on_west.first("Job")["metadata"]["uid"]
    assert [len(east.observe(resource_kinds())), len(west.observe(resource_kinds()))] == [1, 1]
    # Each cluster bound its own pod, on its own node of the same name, with its own requests.
    assert _in_use(east)[("gpu-h100-0", "nvidia.com/gpu")] == (1, 8)
    assert _in_use(west)[("gpu-h100-0", "nvidia.com/gpu")] == (3, 8)
    assert ("gpu-l4-spot-0", "nvidia.com/gpu") in _in_use(west) and len(_in_use(east)) == 1
    (east_pod,), (west_pod,) = east.pods(ref("run-42")), west.pods(ref("run-42"))
    assert east_pod["metadata"]["uid"] != west_pod["metadata"]["uid"]
    assert east.logs(ref("run-42"), east_pod["metadata"]["name"])
    with pytest.raises(NotFound):  # east's pod is not west's
        west.logs(ref("run-42"), east_pod["metadata"]["name"])
    assert east.annotate_pods(ref("run-42"), {"slipway.dev/notice": "preempt"}, now=at(16)) == 1

    def notice(backend: SandboxBackend) -> str | None:
        (pod,) = backend.pods(ref("run-42"))
        return (pod["metadata"].get("annotations") or {}).get("slipway.dev/notice")

    assert (notice(east), notice(west)) == ("preempt", None)
    west_events = west.events(ref("run-42"))
    assert west_events and all(event.object != f"Pod/{east_pod['metadata']['name']}" for event in west_events)

    assert east.delete(ref("run-42"), resource_kinds(), now=at(20)) == 1  # the Job (and its pods) on east only
    assert observed(east, "run-42") is None and east.pods(ref("run-42")) == []
    assert observed(west, "run-42").first("Job") is not None and len(west.pods(ref("run-42"))) == 1
    assert west.events(ref("run-42")) == west_events
    assert _in_use(east)[("gpu-h100-0", "nvidia.com/gpu")] == (0, 8)


def test_each_cluster_keeps_its_own_clock_loads_nodes_and_reset(east_west):
    east, west = east_west
    east.apply(team_objects() + endpoint("ep-1"), resource_kinds(), now=at(0))
    west.apply(team_objects() + endpoint("ep-1"), resource_kinds(), now=at(0))
    east.tick(at(30))
    assert east.clock() == at(30) and SimClock.objects.filter(cluster="west").exists() is False
    west.tick(at(5))
    assert (east.clock(), west.clock()) == (at(30), at(5))

    east.set_load(ref("ep-1"), 900)
    assert list(SimLoad.objects.values_list("cluster", "value")) == [("east", 900.0)]

    faults.reclaim_node(east, "gpu-h100-0", now=at(31))
    assert set(east.nodes_down()) == {"gpu-h100-0"} and west.nodes_down() == {}
    with pytest.raises(NotFound):
        faults.reclaim_node(east, "gpu-l4-spot-0", now=at(32))  # west's node, not east's

    east.reset()
    assert not SimObject.objects.filter(cluster="east").exists() and east.nodes_down() == {}
    assert SimObject.objects.filter(cluster="west").count() == SimObject.objects.count() > 0
    assert west.clock() == at(5) and observed(west, "ep-1") is not None


def test_a_silent_cluster_refuses_every_call_but_runs_its_work_to_the_end(east_west):
    east, west = east_west
    _apply_run(east, duration="60s")
    _apply_run(west)
    east.tick(at(0))
    assert faults.silence(east, now=at(1)) is True
    assert faults.silence(east, now=at(2)) is False  # silent since the first
    kinds = resource_kinds()
    calls = {
        "apply": lambda: east.apply(team_objects(), kinds, now=at(3)),
        "delete": lambda: east.delete(ref("run-42"), kinds, now=at(3)),
        "annotate_pods": lambda: east.annotate_pods(ref("run-42"), {"a": "b"}, now=at(3)),
        "observe": lambda: east.observe(kinds),
        "observe at a time": lambda: east.observe(kinds, now=at(3)),
        "pods": lambda: east.pods(ref("run-42")),
        "logs": lambda: east.logs(ref("run-42"), "run-42-x"),
        "events": lambda: east.events(ref("run-42")),
        "capacity": lambda: east.capacity(),
        "gpu_telemetry": lambda: east.gpu_telemetry([]),
        "training": lambda: east.training(),
        "apply_secret": lambda: east.apply_secret({"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": "s", "namespace": "team-ml"}, "data": {"K": "dg=="}}),
    }
    for call in calls.values():
        with pytest.raises(Transient, match=r"cluster east does not answer \(silent since 2026-11-22T10:00:01Z\)"):
            call()
    # Refused before anything was done: the Job is still there, its pod not annotated, no Secret.
    assert set(SimObject.objects.filter(cluster="east", workload="run-42").values_list("resource_kind", flat=True)) == {"Job"}
    assert SimPod.objects.get(cluster="east").annotations == {}
    assert not SimObject.objects.filter(resource_kind="Secret").exists()
    assert observed(west, "run-42") is not None  # the other cluster answers

    # A partition, not a crash: the cluster runs on, and its Job finishes while nobody sees it.
    run_until(east, 5, 80, step=15)
    assert east.clock() == at(80) and east.node_usage()[0].in_use == 0
    assert faults.answer(east) is True and faults.answer(east) is False
    assert training_status(observed(east, "run-42")).state == TrainingPhase.SUCCEEDED


def test_the_commands_silence_answer_and_pick_a_cluster(east_west, capsys):
    east, west = east_west
    _apply_run(west)
    call_command("sandbox", "silence", "west")
    assert "cluster west does not answer since " in capsys.readouterr().out
    call_command("sandbox", "silence", "west")
    assert "cluster west was already silent (since " in capsys.readouterr().out
    with pytest.raises(Transient):
        west.observe(resource_kinds())
    call_command("sandbox", "tick", "--cluster", "west", "--at", "2026-11-22T10:00:30Z")  # ticks while silent
    assert west.clock() == at(30) and SimClock.objects.filter(cluster="east").exists() is False
    call_command("sandbox", "status")
    out = capsys.readouterr().out
    assert "Sandbox cluster east (on-prem-east) at" in out
    assert "Sandbox cluster west (us-west1) at 2026-11-22T10:00:30Z\nsilent since" in out
    assert "gpu-l4-spot-0" in out.split("Sandbox cluster west")[1] and "gpu-l4-spot-0" not in out.split(
        "Sandbox cluster west")[0]
    call_command("sandbox", "answer", "west")
    assert "cluster west answers again" in capsys.readouterr().out
    assert observed(west, "run-42") is not None

    with pytest.raises(CommandError, match=r"no sandbox cluster 'north'.*it has east, west"):
        call_command("sandbox", "silence", "north")
    with pytest.raises(CommandError, match="node 'gpu-h100-0' is in clusters east, west: say which with --cluster"):
        call_command("sandbox", "reclaim-node", "gpu-h100-0")
    call_command("sandbox", "reclaim-node", "gpu-l4-spot-0")  # only west has it
    assert "node gpu-l4-spot-0 reclaimed" in capsys.readouterr().out and set(west.nodes_down()) == {"gpu-l4-spot-0"}
    call_command("sandbox", "reclaim-node", "gpu-h100-0", "--cluster", "east")
    assert set(east.nodes_down()) == {"gpu-h100-0"} and set(west.nodes_down()) == {"gpu-l4-spot-0"}
    call_command("sandbox", "restore-node", "gpu-h100-0", "--cluster", "east")
    assert east.nodes_down() == {}
    with pytest.raises(CommandError, match="no node 'gpu-l4-spot-0' in cluster east"):
        call_command("sandbox", "restore-node", "gpu-l4-spot-0", "--cluster", "east")
    call_command("sandbox", "load", "team-ml/ep-1", "12", "--cluster", "west")
    assert "(cluster west)" in capsys.readouterr().out
    # A failed fan: the node's GPUs run hotter than their load makes them, on that cluster only, until cooled.
    call_command("sandbox", "overheat-node", "gpu-h100-0", "30", "--cluster", "east")
    assert "run 30 °C hotter" in capsys.readouterr().out
    assert list(SimNodeHeat.objects.values_list("cluster", "node", "degrees")) == [("east", "gpu-h100-0", 30.0)]
    with pytest.raises(CommandError, match="degrees must be more than 0 and at most 80"):
        call_command("sandbox", "overheat-node", "gpu-h100-0", "0", "--cluster", "east")
    with pytest.raises(CommandError, match="no node 'gpu-x' in the inventory"):
        call_command("sandbox", "overheat-node", "gpu-x", "10")
    call_command("sandbox", "cool-node", "gpu-h100-0", "--cluster", "east")
    assert "node gpu-h100-0 cooled" in capsys.readouterr().out and not SimNodeHeat.objects.exists()
    call_command("sandbox", "overheat-node", "gpu-h100-0", "30", "--cluster", "east")
    call_command("sandbox", "reset", "--cluster", "east")
    assert SimObject.objects.filter(cluster="west").exists() and not SimNodeHeat.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_clusters_tick_at_once_without_waiting_for_each_other(two_clusters_inventory):
    """East's tick holds east's clock row (its transaction left open); west ticks meanwhile."""
    for name in ("east", "west"):
        _apply_run(SandboxBackend(name))
        SandboxBackend(name).tick(at(0))  # its pod is created, and its clock row exists to be locked
    east_ticked, west_done = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def east_tick() -> None:
        try:
            with transaction.atomic():  # the tick's own transaction nests: east's row stays locked
                results["east"] = SandboxBackend("east").tick(at(10))
                east_ticked.wait()
                west_done.wait()
        except BaseException as exc:
            errors.append(exc)
            east_ticked.abort()
            west_done.abort()
        finally:
            connection.close()

    def west_tick() -> None:
        try:
            east_ticked.wait()
            # East's clock row is held by the other thread right now...
            with pytest.raises(DatabaseError, match="could not obtain lock"), transaction.atomic():
                list(SimClock.objects.select_for_update(nowait=True).filter(cluster="east"))
            results["west"] = SandboxBackend("west").tick(at(10))  # ...and west's tick does not wait for it
            west_done.wait()
        except BaseException as exc:
            errors.append(exc)
            east_ticked.abort()
            west_done.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=east_tick), threading.Thread(target=west_tick)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results["east"]["pods_changed"] == results["west"]["pods_changed"] == 1  # each started its pod
    assert SandboxBackend("east").clock() == SandboxBackend("west").clock() == at(10)
    assert sorted(SimPod.objects.values_list("cluster", "phase")) == [("east", "Running"), ("west", "Running")]
    assert SimEvent.objects.filter(cluster="east").exists() and SimEvent.objects.filter(cluster="west").exists()


@pytest.mark.postgres
def test_a_clusters_tick_and_observe_find_its_rows_by_index(east_west):
    """The bulk paths filter on the cluster column with an index, never by reading every cluster's
    rows: with sequential scans priced out, PostgreSQL plans each of their reads as an index scan
    whose condition starts with the cluster (it would choose a Seq Scan, or an index scan on
    another column, if no index fitted)."""
    east, west = east_west
    for backend in east_west:
        backend.apply(team_objects() + training("run-1") + endpoint("ep-1"), resource_kinds(), now=at(0))
        backend.tick(at(0))
    faults.reclaim_node(west, "gpu-l4-spot-0", now=at(1))
    with CaptureQueriesContext(connection) as captured:
        east.tick(at(10))
        east.observe(resource_kinds())
        east.capacity()
    reads = [q["sql"] for q in captured.captured_queries
             if q["sql"].lstrip().upper().startswith(("SELECT", "DELETE")) and "sandbox_" in q["sql"]]
    assert len(reads) >= 8
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in reads:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan" not in plan, f"{sql}\n{plan}"
            # Led by the cluster column (or by primary keys read in an earlier, cluster-filtered query).
            assert re.search(r"Index Cond: \(+\(?cluster\)?", plan) or "Index Cond: (id = ANY" in plan, f"{sql}\n{plan}"


def test_each_cluster_has_the_training_api_its_inventory_declares(two_clusters_inventory, db, tmp_path, settings):
    """``training:`` (sandbox/inventory.py): pytorchjob unless a cluster says none; one without a training API
    refuses a PyTorchJob as an API server without its CRD does, and runs a single-node Job as any."""
    east, west = SandboxBackend("east"), SandboxBackend("west")
    assert east.training() == west.training() == TrainingOffer(PYTORCHJOB)
    path = tmp_path / "none.yaml"
    path.write_text(TWO_CLUSTERS.replace("    labels: {provider: cloud}\n",
                                         "    labels: {provider: cloud}\n    training: none\n"))
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    west = SandboxBackend("west")
    assert west.training() == TrainingOffer(NONE)
    kinds = resource_kinds()
    west.apply(team_objects(), kinds, now=at(0))
    with pytest.raises(NotFound, match="cluster west has no training API"):
        west.apply(training("run-2", workers=2), kinds, now=at(0))
    assert not SimObject.objects.filter(cluster="west", workload="run-2").exists()
    west.apply(training("run-1"), kinds, now=at(0))  # a plain Job needs no training API
    assert SimObject.objects.filter(cluster="west", workload="run-1", resource_kind="Job").exists()
