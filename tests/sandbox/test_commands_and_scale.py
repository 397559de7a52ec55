"""``manage.py sandbox`` subcommands, constant-query observe(), and concurrent ticks."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.db import connection

from sandbox.backend import SandboxBackend
from sandbox.models import SimClock, SimObject, SimPod
from tests.sandbox.helpers import H100, MIG_1G, at, endpoint, ref, team_objects, training
from workloads.registry import resource_kinds


def test_it_prints_gpus_used_and_free_per_node_and_resource(backend, capsys):
    backend.apply(team_objects() + training("run-1", flavor=H100, gpus=6)
                  + training("mig-1", flavor=MIG_1G, gpus=2), resource_kinds(), now=at(0))
    call_command("sandbox", "tick", "--at", "2026-11-22T10:00:00Z")
    call_command("sandbox", "status")
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:3]): line.split()[3:] for line in out.splitlines() if line.startswith("gpu-")}
    assert rows[("gpu-h100-0", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu")] == ["6", "2", "8"]
    assert rows[("gpu-a100-mig-0", "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb")] == ["2", "8", "10"]
    assert rows[("gpu-l4-0", "NVIDIA-L4", "nvidia.com/gpu")] == ["0", "1", "1"]
    assert "total nvidia.com/gpu: 6 used, 26 free of 32" in out


def test_it_advances_the_clock_in_steps_and_resets(backend, capsys):
    backend.apply(team_objects() + training("run-1", duration="30s"), resource_kinds(), now=at(0))
    call_command("sandbox", "tick", "--at", "2026-11-22T10:00:00Z")
    call_command("sandbox", "tick", "--seconds", "60", "--step", "5")
    assert backend.clock() == at(60)
    assert SimObject.objects.get(resource_kind="Job").done
    assert "advanced to 2026-11-22T10:01:00+00:00" in capsys.readouterr().out
    call_command("sandbox", "reset")
    assert not SimObject.objects.exists() and not SimPod.objects.exists() and not SimClock.objects.exists()


def test_it_rejects_a_malformed_load_reference(backend):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="namespace"):
        call_command("sandbox", "load", "ep-1", "10")
    with pytest.raises(CommandError, match="number"):
        call_command("sandbox", "load", "team-ml/ep-1", "lots")


def _populate(backend: SandboxBackend, count: int) -> None:
    objects = team_objects()
    for i in range(count):
        objects += training(f"run-{i}", gpus=1) if i % 2 else endpoint(f"ep-{i}", max_replicas=2)
    backend.apply(objects, resource_kinds(), now=at(0))
    backend.tick(at(0))
    backend.tick(at(45))


@pytest.mark.parametrize("count", [2, 12])
def test_it_observes_with_a_constant_number_of_queries(backend, django_assert_max_num_queries, count):
    _populate(backend, count)
    # Five, and a sixth for the startup events of the pods that started lately (cluster.startup.starting).
    with django_assert_max_num_queries(6):
        observed = backend.observe(resource_kinds())
    assert len(observed) == count  # the team's own objects are no workload's: not observed
    assert sum(len(o.pods) for o in observed) >= count


@pytest.mark.parametrize("count", [2, 12])
def test_it_ticks_with_a_constant_number_of_queries(backend, django_assert_max_num_queries, count):
    _populate(backend, count)
    with django_assert_max_num_queries(14):
        backend.tick(at(300))


def test_it_replaces_pods_when_a_deployment_template_changes(backend):
    backend.apply(team_objects() + endpoint("ep-1"), resource_kinds(), now=at(0))
    ref_ep = ref("ep-1")
    backend.set_load(ref_ep, 10)
    backend.tick(at(0))
    old = set(SimPod.objects.values_list("name", flat=True))
    backend.apply(endpoint("ep-1", outcome="crashloop"), resource_kinds(), now=at(20))
    backend.tick(at(20))
    new = set(SimPod.objects.filter(active=True).values_list("name", flat=True))
    assert old and new and not old & new
    assert backend.events(ref_ep)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_runs_concurrent_ticks_one_at_a_time():
    backend = SandboxBackend()
    backend.apply(team_objects() + training("run-1"), resource_kinds(), now=at(0))
    results: list[object] = []
    errors: list[BaseException] = []

    def tick() -> None:
        try:
            results.append(SandboxBackend().tick(at(10)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sum(result is not None for result in results) == 1  # the others saw the clock already there
    assert SimPod.objects.count() == 1
