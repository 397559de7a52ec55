"""The demo's world adds up: the sandbox's clusters together offer exactly the demo teams' nominal
quotas per flavor, and the demo's cohort borrows at seed time and is reclaimed from minutes later."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.utils import timezone

from billing.segments import borrowed_units
from cluster.capacity import offers
from cluster.pools import PROVISIONING_RESOURCES, provisioning_state
from fleet.models import Cluster, GpuFlavor, NodePool
from fleet.pools import with_headroom
from front.management.commands.seed_demo import COHORTS, TEAMS
from jobs.constants import RunState
from jobs.demo import DEMO_LATER, submit_due_demo_runs
from jobs.models import LaterDemoRun, TrainingRun
from quotas.models import Cohort, TeamQuota, TeamSharing
from quotas.services import remove_cohort
from sandbox import pools
from sandbox.backend import SandboxBackend
from sandbox.inventory import clusters
from teams.models import AuditEvent
from tests.shared_flavors import shared_demo_flavors


@pytest.fixture
def debug_on(settings):
    settings.DEBUG = True


def seed(**options) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **options)
    return out.getvalue()


def test_the_sandbox_offers_exactly_the_demo_teams_nominal_quotas_per_flavor(db, debug_on, settings):
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")  # the shipped one
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"  # the demo's two clusters and their pools, as make run has them
    shared_demo_flavors()  # t4-ts4 and a10g-mps2, as the contract defines them (quotas.demo will)
    seed(no_runs=True)
    flavors = {flavor.name: flavor.to_spec() for flavor in GpuFlavor.objects.all()}
    # The Capacity page's rule (cluster.capacity.offers), over the nodes of every cluster as the portal sees them:
    # an elastic pool (west's H100s) at its max, through the NodePool seed_demo made (fleet.pools.with_headroom).
    offered_by = {cluster.name: {name: sum(node.allocatable for node in with_headroom(
        Cluster.objects.get(name=cluster.name), SandboxBackend(cluster.name).capacity()) if offers(node, spec))
        for name, spec in flavors.items()} for cluster in clusters()}
    pool = NodePool.objects.get()
    assert (pool.cluster.name, pool.flavor.name, pool.min_nodes, pool.max_nodes, pool.mode, pool.unneeded_minutes) == (
        "west", "h100-80gb", 0, 1, "atomic", 10)
    offered = {name: sum(per_cluster[name] for per_cluster in offered_by.values()) for name in flavors}
    quota_sums = {name: sum(team.limits.get(name, 0) for team in TEAMS) for name in flavors}
    # The seeded quotas are the demo's (nothing else holds any), and every demo flavor has some.
    assert quota_sums == dict(TeamQuota.objects.values("flavor__name").annotate(total=Sum("limit")).values_list(
        "flavor__name", "total").order_by())
    assert all(quota_sums.values())
    assert offered == quota_sums
    assert offered["a100-80gb"] == 12 and offered["h100-80gb"] == 16  # so the check is not 0 == 0
    assert (offered["t4-ts4"], offered["a10g-mps2"]) == (8, 4)  # replicas of 2 T4s x4 and 2 A10Gs x2
    # Both clusters offer A100s and H100s (at their own prices): placement by price has a choice.
    assert len(offered_by) == 2 and all(per_cluster["a100-80gb"] and per_cluster["h100-80gb"]
                                        for per_cluster in offered_by.values())


def test_it_seeds_the_research_cohort_through_the_audited_quota_services(db, debug_on, published):
    seed()
    (spec,) = COHORTS
    cohort = Cohort.objects.get(name=spec.name)
    assert (cohort.reclaim, cohort.min_runtime_minutes, cohort.preemption_delay_seconds) == ("any", 1, 30)
    assert set(TeamSharing.objects.filter(cohort=cohort).values_list("team__slug", flat=True)) == {"ml-research", "nlp"}
    assert TeamQuota.objects.get(team__slug="ml-research", flavor__name="h100-80gb").borrowing_limit == 8
    audited = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED)
    assert audited.get(target="cohort research").actor_name == "admin"
    assert audited.filter(target="quota h100-80gb", team__slug="ml-research").get().details["new_limits"] == {
        "borrowing_limit": 8, "lending_limit": None}
    seed()  # a rerun changes nothing
    assert audited.count() == 2 and Cohort.objects.count() == 1


def test_ml_research_borrows_at_seed_time_and_nlp_submits_its_run_two_minutes_later(db, debug_on, published):
    before = timezone.now()
    out = seed()
    runs = {run.name: run for run in TrainingRun.objects.filter(team__slug__in=["ml-research", "nlp"])}
    # llama-pretrain holds ML Research's 8 H100s, t5-flaky-loader 2 of NLP's: llama-ablation takes the other 6.
    assert runs["llama-pretrain"].state == runs["llama-ablation"].state == RunState.ADMITTED
    assert borrowed_units([runs["llama-pretrain"].ref, runs["llama-ablation"].ref]) == {runs["llama-ablation"].ref: 6}
    assert runs["llama-ablation"].has_checkpoint_contract  # it checkpoints, so its reclaim loses little
    assert "t5-distill" not in runs
    later = LaterDemoRun.objects.get()
    assert later.team.slug == "nlp" and later.spec["name"] == "t5-distill" == DEMO_LATER[0][3]["name"]
    assert before + timedelta(seconds=120) <= later.due_at <= timezone.now() + timedelta(seconds=120)
    assert f"NLP Platform submits t5-distill at {timezone.localtime(later.due_at):%H:%M:%S}" in out

    assert submit_due_demo_runs(later.due_at - timedelta(seconds=1)) == []  # not due yet
    (run,) = submit_due_demo_runs(later.due_at)
    # Every H100 of the cohort is held, 6 of them borrowed from NLP: its run waits, under its
    # nominal quota, which is what the cohort's reclaim acts on.
    assert run.name == "t5-distill" and run.state == RunState.QUEUED
    assert "the cohort can lend 0" in run.reason
    later.refresh_from_db()
    assert later.submitted_at == later.due_at and later.outcome == f"submitted as run {run.pk} (queued)"
    assert submit_due_demo_runs(later.due_at + timedelta(minutes=5)) == []  # once
    seed()
    assert LaterDemoRun.objects.count() == 1


def test_a_later_run_that_cannot_be_submitted_says_why(db, debug_on, published):
    seed()
    later = LaterDemoRun.objects.get()
    TeamQuota.objects.filter(team__slug="nlp").delete()  # an admin took NLP's quota away
    assert submit_due_demo_runs(later.due_at) == []
    later.refresh_from_db()
    assert later.submitted_at is not None and later.outcome.startswith("not submitted: ")
    assert "no quota for h100-80gb" in later.outcome


def test_a_cohort_an_admin_removed_is_not_seeded_again(db, debug_on):
    seed(no_runs=True)
    remove_cohort(None, Cohort.objects.get(name="research"))
    seed(no_runs=True)
    assert not Cohort.objects.exists()


def test_the_demos_two_node_runs_go_to_both_training_apis(db, debug_on, published, settings):
    """Issue 51: the demo shows runs of both APIs — llama-pretrain (8 H100s) and llama-ablation (6) cannot share a
    cluster's 8, so one lands on east (Trainer v2: a TrainJob on slipway-pytorch), the other on west (the v1
    operator: a PyTorchJob), whichever a worker applies first taking the cheaper east."""
    from workloads.cycle.reconcile import reconcile_cluster
    from workloads.registry import kind_for
    from workloads.tasks import apply_workload

    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")  # the shipped one
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"  # the demo's two clusters, as make run has them
    seed()
    # West's H100s are the demo's elastic pool (no node until asked for): the run placed there waits for its node
    # (a ProvisioningRequest), then starts. The shipped pool never fails by itself (what the README's stories need).
    demo_pool = pools.pools("west", timezone.now())["west-h100"].settings
    assert (demo_pool.failure_probability, demo_pool.revoke_probability) == (0, 0)
    runs = list(TrainingRun.objects.filter(name__in=["llama-pretrain", "llama-ablation"]).order_by("pk"))
    for run in runs:
        outcome = apply_workload("run", run.pk)
        run.refresh_from_db()
        if outcome == "provisioning":
            assert run.cluster.name == "west"
            west, now = SandboxBackend("west"), timezone.now()
            for seconds in range(30, 931, 30):  # the pool's tail (900 s) is the most a node takes
                west.tick(now + timedelta(seconds=seconds))
                if any(provisioning_state(o).state == "provisioned" for w in west.observe(PROVISIONING_RESOURCES)
                       for o in w.objects):
                    break
            reconcile_cluster(run.cluster, west)  # the cycle sees it Provisioned: the run starts, consuming it
            outcome = apply_workload("run", run.pk)
            run.refresh_from_db()
        assert outcome == "applied"
    assert {(run.cluster.name, run.resource_kind) for run in runs} == {("east", "TrainJob"), ("west", "PyTorchJob")}
    on_east = next(run for run in runs if run.cluster.name == "east")
    (observed,) = [o for o in SandboxBackend("east").observe(kind_for("run").resources)
                   if o.object_name == on_east.object_name]
    assert observed.first("TrainJob")["spec"]["runtimeRef"]["name"] == "slipway-pytorch"
