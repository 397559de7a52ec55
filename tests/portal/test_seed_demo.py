"""``manage.py seed_demo``: the demo world, printed credentials that work, idempotence."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from inference.models import InferenceEndpoint
from portal.models import Membership, Team
from quotas.models import GpuFlavor, TeamBudget, TeamQuota

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
        "a100-80gb", "h100-80gb", "l4", "a100-1g.10gb", "a100-2g.20gb", "a100-3g.40gb"}
    limits = {(slug, flavor): limit for slug, flavor, limit in TeamQuota.objects.values_list(
        "team__slug", "flavor__name", "limit")}
    assert limits[("ml-research", "a100-80gb")] == 8 and limits[("ml-research", "a100-3g.40gb")] == 4
    assert limits[("vision", "a100-1g.10gb")] == 7
    assert {f for s, f in limits if s == "nlp"} == {"h100-80gb"}
    assert dict(TeamBudget.objects.values_list("team__slug", "monthly_limit")) == {
        "ml-research": Decimal("20000"), "vision": Decimal("5000"), "nlp": Decimal("15000")}


def test_it_prints_credentials_that_work(db, debug_on):
    out = seed()
    lines = [line.split() for line in out.splitlines() if line.startswith("  ") and " / " in line]
    credentials = {parts[0]: parts[2] for parts in lines}
    assert set(credentials) == {"alice", "bob", "carol", "dave", "erin", "admin"}
    for username, password in credentials.items():
        assert authenticate(username=username, password=password) is not None, username
    assert "http://127.0.0.1:8000/" in out


def test_it_is_idempotent(db, debug_on):
    seed()
    first = snapshot()
    seed()
    assert snapshot() == first


def test_it_restores_the_demo_state_when_run_again(db, debug_on):
    seed()
    first = snapshot()
    Membership.objects.filter(user__username="alice", team__slug="vision").update(role="admin")
    TeamQuota.objects.filter(team__slug="nlp").update(limit=1)
    alice = User.objects.get(username="alice")
    alice.set_password("changed")
    alice.save()
    seed()
    assert snapshot() == first
    assert authenticate(username="alice", password="slipway-demo") is not None


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
    assert set(endpoints) == {"detector", "llama-chat"}
    assert endpoints["detector"].min_replicas == 0 and endpoints["detector"].flavor.mig_profile == "1g.10gb"
    call_command("seed_demo", stdout=StringIO())
    assert InferenceEndpoint.objects.count() == 2
