"""Staff roles (security review 4 #3): staff status opens the console and every team's pages to
read; a change needs the Django permission the admin console would ask for. The shipped groups
(front.roles) give the usual roles, and the API answers each role as the matrix says."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

import fleet.services as fleet
from front.roles import FINANCE, PLATFORM_ADMIN, SUPPORT, ensure_staff_groups
from jobs.models import TrainingRun
from quotas.models import Cohort, TeamQuota
from tests.factories import make_user
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

ROLES = (PLATFORM_ADMIN, FINANCE, SUPPORT, "")  # "": staff in no group


def staff_with(role: str):
    user = make_user(f"staff-{role.split()[0].lower() if role else 'bare'}")
    user.is_staff = True  # staff, not superuser: only the group's permissions
    user.save(update_fields=["is_staff"])
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def world(team, quota, member, api_client_for, published):
    """A team with a quota and a queued run of its member's; the one cluster of the suite."""
    fleet.clusters()
    response = api_client_for(member).post("/api/v1/runs/", run_payload(), format="json")
    assert response.status_code == 201, response.content
    return team, response.json()["id"]


def test_the_groups_are_shipped_and_a_second_migrate_changes_nothing():
    names = set(Group.objects.values_list("name", flat=True))
    assert {PLATFORM_ADMIN, FINANCE, SUPPORT} <= names
    counts = {g.name: g.permissions.count() for g in Group.objects.filter(name__in=ROLES)}
    ensure_staff_groups()
    assert counts == {g.name: g.permissions.count() for g in Group.objects.filter(name__in=ROLES)}
    finance = set(Group.objects.get(name=FINANCE).permissions.values_list("codename", flat=True))
    assert "view_usagerecord" in finance and not any(not c.startswith("view_") for c in finance)
    support = set(Group.objects.get(name=SUPPORT).permissions.values_list("codename", flat=True))
    assert "view_trainingrun" in support and "view_apitoken" not in support
    # The shared workloads app's: support reads alert episodes (the admin console's list), not sealed secrets.
    assert {"view_alertepisode", "view_teamalertsettings"} <= support and "view_secretenv" not in support
    admin = set(Group.objects.get(name=PLATFORM_ADMIN).permissions.values_list("codename", flat=True))
    assert "change_teamalertsettings" in admin


def test_a_group_keeps_what_an_operator_added(django_user_model):
    from django.contrib.auth.models import Permission

    extra = Permission.objects.get(codename="change_teambudget")
    Group.objects.get(name=FINANCE).permissions.add(extra)
    call_command("migrate", verbosity=0)
    assert Group.objects.get(name=FINANCE).permissions.filter(pk=extra.pk).exists()


@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_change_only_what_its_permissions_say(world, api_client_for, role):
    team, run_id = world
    user = staff_with(role)
    client = api_client_for(user)
    admin = role == PLATFORM_ADMIN
    changes = {
        "quota": client.put(f"/api/v1/teams/{team.slug}/quotas/l4/", {"limit": 3}, format="json"),
        "sharing": client.patch(f"/api/v1/teams/{team.slug}/", {"fair_weight": 2}, format="json"),
        "cohort": client.put("/api/v1/cohorts/research/", {"teams": [team.slug]}, format="json"),
        "cluster": client.patch("/api/v1/clusters/default/", {"state": "draining"}, format="json"),
    }
    expected = {"quota": 200, "sharing": 200, "cohort": 201, "cluster": 200} if admin else dict.fromkeys(changes, 403)
    assert {name: r.status_code for name, r in changes.items()} == expected
    # The admin console's "end" of another team's run: the service says no without the permission.
    console = Client()
    console.force_login(user)
    ended = console.post(f"/admin/workloads/run/{run_id}/end/", follow=True)
    assert ended.status_code == 200
    assert ("jobs.change_trainingrun" in ended.content.decode()) != admin
    # Refused means unchanged.
    assert TeamQuota.objects.get(team=team, flavor__name="l4").limit == (3 if admin else 2)
    assert Cohort.objects.filter(name="research").exists() == admin
    assert fleet.get("default").draining == admin
    assert (TrainingRun.objects.get(pk=run_id).state == "cancelled") == admin
    # Every staff role reads what staff read.
    for path in ("/api/v1/clusters/", "/api/v1/cohorts/", f"/api/v1/runs/{run_id}/", f"/api/v1/teams/{team.slug}/quotas/"):
        assert client.get(path).status_code == 200, path


def test_a_refusal_names_the_permission(world, api_client_for):
    team, _run = world
    body = api_client_for(staff_with(SUPPORT)).put(f"/api/v1/teams/{team.slug}/quotas/l4/", {"limit": 3},
                                                    format="json").json()
    assert "quotas.change_teamquota" in str(body)
