"""Issue 48, point 5: quotas splits by domain — GpuFlavor to fleet, the money tables to billing — moving no row.

The move is state only (``quotas/migrations/0017_flavors_to_fleet_money_to_billing.py``): the tables keep their
names, so what matters besides the rows is what names the models outside their tables — the content types,
which staff permissions and the admin's history point at. They are renamed, not made anew: a group allowed to
change budgets before the move is allowed after it, under the budget's new app, and back.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType

from billing.models import QuotaHold, TeamBudget
from fleet.models import GpuFlavor
from tests.workloads.test_hold_migration import latest, migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_SPLIT = [("quotas", "0016_hold_money")]


def test_the_split_keeps_rows_content_types_and_staff_permissions_both_ways(flavors, team):
    TeamBudget.objects.create(team=team, monthly_limit=100)
    migrate(BEFORE_SPLIT)
    ContentType.objects.clear_cache()
    old = {model: ContentType.objects.get(app_label="quotas", model=model).pk
           for model in ("gpuflavor", "teambudget", "quotahold", "teamquota")}
    group = Group.objects.create(name="finance")
    group.permissions.add(Permission.objects.get(content_type_id=old["teambudget"], codename="change_teambudget"),
                          Permission.objects.get(content_type_id=old["gpuflavor"], codename="change_gpuflavor"))
    staff = User.objects.create_user("fin", is_staff=True)
    staff.groups.add(group)

    migrate(latest())
    ContentType.objects.clear_cache()
    moved = {(ct.app_label, ct.model): ct.pk for ct in ContentType.objects.filter(pk__in=old.values())}
    assert moved == {("fleet", "gpuflavor"): old["gpuflavor"], ("billing", "teambudget"): old["teambudget"],
                     ("billing", "quotahold"): old["quotahold"], ("quotas", "teamquota"): old["teamquota"]}
    staff = User.objects.get(pk=staff.pk)  # a fresh permission cache
    assert staff.has_perm("billing.change_teambudget") and staff.has_perm("fleet.change_gpuflavor")
    assert not staff.has_perm("quotas.change_teambudget")
    assert TeamBudget.objects.get(team=team).monthly_limit == 100
    assert GpuFlavor.objects.count() == len(flavors) and QuotaHold._meta.db_table == "quotas_quotahold"

    migrate(BEFORE_SPLIT)  # and back: the content types are quotas' again, the permissions with them
    ContentType.objects.clear_cache()
    assert ContentType.objects.get(pk=old["teambudget"]).app_label == "quotas"
    assert ContentType.objects.get(pk=old["gpuflavor"]).app_label == "quotas"
    migrate(latest())
