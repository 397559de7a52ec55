"""``manage.py seed_demo``: the demo world, printed credentials that work, and reruns that add only what
is missing and never undo an admin's changes."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from billing.models import TeamBudget
from fleet.models import GpuFlavor
from front.management.commands import seed_demo
from inference.constants import EndpointState
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from notifications.models import EmailSubscription
from notifications.vocabulary import kind_event_codes
from quotas.demo import seed_flavors
from quotas.models import TeamQuota
from teams.models import Membership, Team
from tests.shared_flavors import shared_demo_flavors
from workloads.models import TeamAlertSettings

User = get_user_model()


def seed(**options) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **options)
    return out.getvalue()


def snapshot() -> dict:
    """Everything the command writes, as comparable values."""
    return {
        "teams": list(Team.objects.values_list("slug", "name", "namespace")),
        "users": list(User.objects.order_by("username").values_list("username", "is_staff", "is_superuser")),
        "memberships": list(Membership.objects.values_list("team__slug", "user__username", "role")),
        "flavors": list(GpuFlavor.objects.order_by("name").values_list("name", "price_per_hour", "active")),
        "quotas": sorted(TeamQuota.objects.values_list("team__slug", "flavor__name", "limit")),
        "budgets": sorted(TeamBudget.objects.values_list("team__slug", "monthly_limit")),
        "email": sorted(EmailSubscription.objects.values_list("team__slug", "user__username", "event_kind")),
        "alert_rules": sorted(TeamAlertSettings.objects.values_list("team__slug", "idle_minutes")),
    }


@pytest.fixture
def debug_on(settings):
    settings.DEBUG = True


def test_it_seeds_the_demo_teams_and_people(db, debug_on):
    seed()
    assert list(Team.objects.values_list("slug", "name")) == [
        ("ml-research", "ML Research"), ("nlp", "NLP Platform"), ("vision", "Computer Vision")]
    assert set(Membership.objects.values_list("user__username", "team__slug", "role")) == {
        ("alice", "ml-research", "member"), ("alice", "vision", "viewer"),
        ("bob", "ml-research", "admin"), ("carol", "ml-research", "viewer"),
        ("dave", "vision", "member"), ("erin", "nlp", "member"),
    }
    admin = User.objects.get(username="admin")
    assert admin.is_staff and admin.is_superuser and not admin.memberships.exists()


def test_it_seeds_flavors_quotas_and_budgets(db, debug_on):
    seed()
    assert set(GpuFlavor.objects.values_list("name", flat=True)) == {
        "a100-80gb", "h100-80gb", "l4", "a100-1g.10gb", "a100-2g.20gb", "a100-3g.40gb", "t4-ts4", "a10g-mps2"}
    limits = {(slug, flavor): limit for slug, flavor, limit in TeamQuota.objects.values_list(
        "team__slug", "flavor__name", "limit")}
    assert limits[("ml-research", "a100-80gb")] == 8 and limits[("ml-research", "a100-3g.40gb")] == 4
    assert limits[("vision", "a100-1g.10gb")] == 7
    # NLP's MPS quota comes with the flavor (quotas.demo defines the shared flavors, issue 37a).
    shared = {"a10g-mps2"} & set(GpuFlavor.objects.values_list("name", flat=True))
    assert {f for s, f in limits if s == "nlp"} == {"h100-80gb"} | shared
    assert dict(TeamBudget.objects.values_list("team__slug", "monthly_limit")) == {
        "ml-research": Decimal("20000"), "vision": Decimal("5000"), "nlp": Decimal("15000")}


def test_it_seeds_the_quotas_of_the_shared_flavors(db, debug_on):
    shared_demo_flavors()  # t4-ts4 and a10g-mps2 as the contract defines them (quotas.demo will, issue 37a)
    seed(no_runs=True)
    assert sorted(TeamQuota.objects.filter(flavor__sharing__in=["time-slicing", "mps"]).values_list(
        "team__slug", "flavor__name", "limit")) == [
        ("ml-research", "a10g-mps2", 2), ("ml-research", "t4-ts4", 4), ("nlp", "a10g-mps2", 2), ("vision", "t4-ts4", 4)]


def test_a_quota_of_a_flavor_that_does_not_exist_waits_for_it(db, debug_on, monkeypatch):
    monkeypatch.setattr(seed_demo, "TEAMS", (seed_demo.DemoTeam("vision", "Computer Vision",
                                                                {"l4": 2, "later-gpu": 3}, None),))
    seed(no_runs=True)  # nothing fails, and the quota it could not give is not marked as given
    assert list(TeamQuota.objects.values_list("flavor__name", "limit")) == [("l4", 2)]
    later = GpuFlavor.objects.get(name="l4")
    later.pk, later.name = None, "later-gpu"  # an admin adds the flavor
    later.save()
    seed(no_runs=True)
    assert sorted(TeamQuota.objects.values_list("flavor__name", "limit")) == [("l4", 2), ("later-gpu", 3)]


def test_it_prints_credentials_that_work(db, debug_on, monkeypatch):
    monkeypatch.delenv("PORT", raising=False)
    out = seed()
    lines = [line.split() for line in out.splitlines() if line.startswith("  ") and " / " in line]
    credentials = {parts[0]: parts[2] for parts in lines}
    assert set(credentials) == {"alice", "bob", "carol", "dave", "erin", "admin"}
    for username, password in credentials.items():
        assert authenticate(username=username, password=password) is not None, username
    assert "Open http://127.0.0.1:8000/ — the admin console is at http://127.0.0.1:8000/admin/" in out


def test_it_prints_the_port_the_server_listens_on(db, debug_on, monkeypatch):
    monkeypatch.setenv("PORT", "8123")
    out = seed(no_runs=True)
    assert "http://127.0.0.1:8123/" in out and "8000" not in out
    assert "Open https://demo.example.com/" in seed(no_runs=True, url="https://demo.example.com/")


def test_it_subscribes_alice_to_every_kinds_events_and_dave_to_visions_gpu_alerts_by_e_mail_once(db, debug_on):
    """Alice hears of what every workload kind declares (a run ended, an endpoint degraded, a workspace paused)
    and of preemptions and her team's sweeps ending: the demo names no kind's event, the registry gives them."""
    seed(no_runs=True)
    alice = set(EmailSubscription.objects.filter(user__username="alice").values_list("team__slug", "event_kind"))
    assert alice == {("ml-research", code) for code in [*kind_event_codes(), "preempted", "sweep_finished"]}
    assert {"run_succeeded", "run_failed", "endpoint_degraded", "workspace_paused"} <= {kind for _team, kind in alice}
    assert sorted(EmailSubscription.objects.filter(user__username="dave").values_list("team__slug", "event_kind")) == [
        ("vision", "gpu_idle"), ("vision", "gpu_memory")]
    total = EmailSubscription.objects.count()
    EmailSubscription.objects.filter(event_kind="run_succeeded").delete()  # she unsubscribed: it stays so
    seed(no_runs=True)
    assert EmailSubscription.objects.count() == total - 1


def test_vision_tightened_its_idle_alert_once_and_a_change_stays(db, debug_on):
    seed(no_runs=True)
    rules = TeamAlertSettings.objects.get(team__slug="vision")
    assert (rules.idle_util_pct, rules.idle_minutes, rules.memory_pct, rules.memory_minutes) == (None, 5, None, None)
    assert TeamAlertSettings.objects.count() == 1
    TeamAlertSettings.objects.filter(team__slug="vision").update(idle_minutes=15)  # its admins changed it
    seed(no_runs=True)
    assert TeamAlertSettings.objects.get(team__slug="vision").idle_minutes == 15


def test_it_is_idempotent(db, debug_on):
    seed()
    first = snapshot()
    seed()
    assert snapshot() == first


def test_it_keeps_what_an_admin_changed_when_run_again(db, debug_on):
    seed(no_runs=True)
    # An admin raises a quota and a budget, changes a price and a role, removes a member,
    # deletes a quota row and a user, deactivates a flavor and changes a password.
    TeamQuota.objects.filter(team__slug="nlp", flavor__name="h100-80gb").update(limit=16)
    TeamQuota.objects.filter(team__slug="vision", flavor__name="l4").delete()
    TeamBudget.objects.filter(team__slug="vision").update(monthly_limit=Decimal("9000"))
    GpuFlavor.objects.filter(name="a100-80gb").update(price_per_hour=Decimal("3.9500"))
    GpuFlavor.objects.filter(name="l4").update(active=False)
    Membership.objects.filter(user__username="alice", team__slug="vision").update(role="admin")
    Membership.objects.filter(user__username="carol", team__slug="ml-research").delete()
    User.objects.filter(username="erin").delete()
    bob = User.objects.get(username="bob")
    bob.set_password("bobs-own")
    bob.save()
    changed = snapshot()
    counts = {model: model.objects.count() for model in (Team, User, Membership, GpuFlavor, TeamQuota, TeamBudget)}

    out = seed(no_runs=True)

    assert snapshot() == changed
    assert {model: model.objects.count() for model in counts} == counts  # nothing duplicated or re-created
    assert TeamQuota.objects.get(team__slug="nlp", flavor__name="h100-80gb").limit == 16
    assert not TeamQuota.objects.filter(team__slug="vision", flavor__name="l4").exists()
    assert TeamBudget.objects.get(team__slug="vision").monthly_limit == Decimal("9000")
    assert GpuFlavor.objects.get(name="a100-80gb").price_per_hour == Decimal("3.9500")
    assert not GpuFlavor.objects.get(name="l4").active
    assert Membership.objects.get(user__username="alice", team__slug="vision").role == "admin"
    assert not Membership.objects.filter(user__username="carol").exists()
    assert not User.objects.filter(username="erin").exists()
    assert authenticate(username="bob", password="bobs-own") is not None
    assert "bob    / slipway-demo" in out and "(password changed since seeding)" in out
    assert "erin" not in out
    assert "alice  / slipway-demo   member of ml-research, admin of vision" in out  # roles as they are now
    assert "carol  / slipway-demo   no team" in out


def test_it_adds_what_is_missing_and_adopts_what_exists_without_overwriting(db, debug_on):
    # A database seeded by hand (or before seed_demo kept its records): nothing there is changed.
    flavors = {f.name: f for f in seed_flavors(["a100-80gb"])}
    GpuFlavor.objects.filter(pk=flavors["a100-80gb"].pk).update(price_per_hour=Decimal("9.9900"))
    team = Team.objects.create(slug="nlp", name="NLP (renamed)")
    TeamQuota.objects.create(team=team, flavor=flavors["a100-80gb"], limit=3)
    seed()
    assert GpuFlavor.objects.get(name="a100-80gb").price_per_hour == Decimal("9.9900")
    assert GpuFlavor.objects.count() == 8  # the missing ones were added
    assert Team.objects.get(slug="nlp").name == "NLP (renamed)"
    shared = {"a10g-mps2": 2} if GpuFlavor.objects.filter(name="a10g-mps2").exists() else {}  # quotas.demo's (37a)
    assert dict(TeamQuota.objects.filter(team=team).values_list("flavor__name", "limit")) == {
        "a100-80gb": 3, "h100-80gb": 8, **shared}
    assert Membership.objects.filter(team=team, user__username="erin", role="member").exists()


def demo_endpoints() -> set[str]:
    """The demo's endpoints: ocr-small's flavor t4-ts4 comes with quotas.demo's shared flavors (issue 37a)."""
    return {"detector", "llama-chat"} | ({"ocr-small"} if GpuFlavor.objects.filter(name="t4-ts4").exists() else set())


def test_it_submits_the_demo_work_of_a_team_once(db, debug_on, published):
    seed()
    runs = TrainingRun.objects.count()
    assert runs > 0 and InferenceEndpoint.objects.count() == len(demo_endpoints())
    TrainingRun.objects.filter(team__slug="nlp").delete()  # an admin cleans a team up
    seed()
    assert not TrainingRun.objects.filter(team__slug="nlp").exists()
    assert InferenceEndpoint.objects.count() == len(demo_endpoints())


def test_it_keeps_data_it_did_not_create(db, debug_on):
    Team.objects.create(slug="robotics", name="Robotics")
    seed()
    assert Team.objects.filter(slug="robotics").exists()


def test_it_refuses_to_seed_well_known_passwords_without_debug(db, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="--force"):
        seed()
    assert not User.objects.exists()
    seed(force=True)
    assert User.objects.filter(username="admin").exists()


def test_it_creates_the_demo_endpoints_once(db, debug_on):
    call_command("seed_demo", stdout=StringIO())
    endpoints = {e.name: e for e in InferenceEndpoint.objects.all()}
    assert set(endpoints) == demo_endpoints()
    assert endpoints["detector"].min_replicas == 0 and endpoints["detector"].flavor.mig_profile == "1g.10gb"
    call_command("seed_demo", stdout=StringIO())
    assert InferenceEndpoint.objects.count() == len(demo_endpoints())


def test_vision_serves_a_small_model_on_a_quarter_of_a_time_sliced_t4(db, debug_on):
    shared_demo_flavors()
    call_command("seed_demo", stdout=StringIO())
    ocr = InferenceEndpoint.objects.get(name="ocr-small")
    assert (ocr.team.slug, ocr.flavor.name, ocr.min_replicas, ocr.max_replicas) == ("vision", "t4-ts4", 1, 2)
    assert ocr.state == EndpointState.DEPLOYING  # admitted: within vision's four t4-ts4 units


def test_the_demo_history_is_billed_by_the_live_rule_and_shows_the_rate_it_was_charged(db, debug_on):
    """Issue 46: bert-base-sweep showed 3.60/h and was billed 4.10/h (the history wrote the ledger at the
    flavor's own price, unplaced, and its page quoted today's placement). Placed and billed by the live
    rule, each finished run shows what its ledger charged, and a price change by staff moves nothing."""
    from decimal import ROUND_HALF_UP

    from billing.models import ClusterPrice, UsageRecord
    from jobs.constants import RunState

    seed()
    history = list(TrainingRun.objects.filter(state=RunState.SUCCEEDED, billed_cost__gt=0))
    assert history

    def charged(run) -> Decimal:
        rows = UsageRecord.objects.filter(ref=run.ref)
        return (sum(r.cost for r in rows) / sum(r.unit_hours for r in rows)).quantize(Decimal("0.0001"), ROUND_HALF_UP)

    shown = {run.pk: run.price_quote().price for run in history}
    assert shown == {run.pk: charged(run) for run in history}
    assert all(run.cluster_id is not None and run.price_quote().placed for run in history)
    GpuFlavor.objects.update(price_per_hour=Decimal("99.00"))
    ClusterPrice.objects.update(price_per_hour=Decimal("98.00"))
    assert {run.pk: run.price_quote().price for run in TrainingRun.objects.filter(pk__in=shown)} == shown
