"""The staff groups Slipway ships: the usual roles of platform staff, as Django permission groups.

Staff status lets a user into the admin console and lets them read every team's work; what a
staff user may *change* is their permissions (security review 4 #3: ``teams.permissions.staff_may``
checks them in the API exactly as the admin console does). Three groups are made after every
``migrate`` (:func:`ensure_staff_groups`, from this app's ``post_migrate``, when every app's
permissions exist):

* **Platform admin**: every permission on Slipway's own models — quotas, budgets, prices,
  cohorts, clusters, teams, work, notifications;
* **Finance (read-only)**: view permissions on the money side — flavors and prices, quotas,
  budgets, the usage ledger, preemptions, cohorts, teams;
* **Support (read-only)**: view permissions on Slipway's models (alert episodes and a team's alert
  rules included), except API tokens, device logins (credentials' metadata is not support's
  business) and sealed secret env.

A group is created when missing and given the permissions it lacks; nothing is taken away, so
an operator's additions to a group survive upgrades. Give a staff user a group in the admin
console (*Users* → the user → *Groups*); superusers hold every permission anyway.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.db.models import Q

from workloads.registry import kinds

#: Slipway's apps by label besides the workload kinds' (the teams app's label is "portal"); "workloads" holds
#: what every kind shares: alert episodes and rules, attempts, GPU telemetry (and sealed secret env).
SHARED_APPS = ("portal", "fleet", "billing", "quotas", "workloads", "notifications")


def slipway_apps() -> tuple[str, ...]:
    """Slipway's apps by label: the shared ones and every registered kind's (the kind registry's)."""
    return SHARED_APPS + tuple(kind.model._meta.app_label for kind in kinds())

PLATFORM_ADMIN = "Platform admin"
FINANCE = "Finance (read-only)"
SUPPORT = "Support (read-only)"
#: Finance reads the money side and who it belongs to.
FINANCE_MODELS = {"fleet": ("gpuflavor",),
                  "billing": ("clusterprice", "teambudget", "budgetmonth", "usagerecord", "preemptionevent"),
                  "quotas": ("teamquota", "cohort", "teamsharing"),
                  "portal": ("team",)}
#: What support may not read even with view permissions on everything else: credentials' metadata, and the
#: sealed values of secret env.
SUPPORT_EXCLUDED = {"portal": ("apitoken", "devicelogin"), "workloads": ("secretenv",)}


def _last_slipway_app() -> str:
    return [config.label for config in apps.get_app_configs() if config.label in slipway_apps()][-1]


def _permissions(q: Q) -> list[Permission]:
    return list(Permission.objects.filter(q).select_related("content_type"))


def role_permissions() -> dict[str, list[Permission]]:
    """``{group name: its permissions}`` as shipped."""
    slipway = Q(content_type__app_label__in=slipway_apps())
    finance = Q()
    for app, models in FINANCE_MODELS.items():
        finance |= Q(content_type__app_label=app, content_type__model__in=models)
    excluded = Q()
    for app, models in SUPPORT_EXCLUDED.items():
        excluded |= Q(content_type__app_label=app, content_type__model__in=models)
    views = Q(codename__startswith="view_")
    return {PLATFORM_ADMIN: _permissions(slipway), FINANCE: _permissions(finance & views),
            SUPPORT: _permissions(slipway & views & ~excluded)}


def ensure_staff_groups(sender=None, **_kwargs) -> None:
    """Create the shipped groups where missing and add the permissions they lack (idempotent).

    As a ``post_migrate`` receiver it acts once per migrate, on the signal of the last of
    :func:`slipway_apps` in ``INSTALLED_APPS`` (every app before it has its permissions by then:
    auth's receiver, connected first, makes them).
    """
    if sender is not None and sender.label != _last_slipway_app():
        return
    for name, permissions in role_permissions().items():
        group, _created = Group.objects.get_or_create(name=name)
        group.permissions.add(*permissions)
