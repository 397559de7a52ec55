"""Small factories for test data (plain functions: clearer than a factory library here)."""

from __future__ import annotations

import itertools

from django.contrib.auth import get_user_model

from billing.models import QuotaHold
from teams.models import Membership, Role, Team
from workloads import crypto
from workloads.models import SecretEnv

_seq = itertools.count(1)


def make_user(username: str | None = None, *, staff: bool = False, password: str = "pw-Slipway-123"):
    username = username or f"user{next(_seq)}"
    user = get_user_model().objects.create_user(username=username, password=password, email=f"{username}@example.com")
    if staff:
        user.is_staff = True
        user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    return user


def make_team(slug: str | None = None, name: str | None = None) -> Team:
    slug = slug or f"team{next(_seq)}"
    return Team.objects.create(slug=slug, name=name or slug.title())


def add_member(team: Team, user, role: str = Role.MEMBER) -> Membership:
    return Membership.objects.create(team=team, user=user, role=role)


def secret_values(ref: str) -> dict[str, str]:
    """The decrypted secret env values stored for the workload ``ref`` (what the apply task would read)."""
    return crypto.unseal(SecretEnv.objects.get(ref=ref).sealed)


def cohort_pair(staff, units: int = 4, **rules) -> tuple[Team, Team]:
    """``(nlp-platform, vision)``: ``units``× a100-80gb and a budget each, in the cohort "research"
    with the reclaim ``rules`` given (``min_runtime_minutes``, ``preemption_delay_seconds``, …)."""
    from decimal import Decimal

    from quotas import services as quota_services
    from quotas.demo import seed_team_quotas

    nlp, vision = make_team("nlp-platform"), make_team("vision")
    for team in (nlp, vision):
        seed_team_quotas(team, {"a100-80gb": units}, Decimal("100000"))
    quota_services.set_cohort(staff, "research", teams=[nlp, vision], **rules)
    return nlp, vision


def member_api(team_slug: str, username: str):
    """``(API client, user)`` of a new member of the team ``team_slug``, authenticated as them."""
    from rest_framework.test import APIClient

    user = make_user(username)
    add_member(Team.objects.get(slug=team_slug), user, Role.MEMBER)
    client = APIClient()
    client.force_authenticate(user)
    return client, user


def hold_of(workload, since=None, units: int = 0, **columns) -> QuotaHold:
    """The quota hold ``workload`` holds, its open segment running ``units`` since ``since`` (``columns``: its
    other columns), as admission and billing would have left it."""
    hold = QuotaHold.objects.create(team_id=workload.team_id, ref=workload.ref, flavor_id=workload.flavor_id,
                                    units=max(units, 1), spot=workload.spot, user_id=workload.created_by_id,
                                    billed_until=since, open_units=units, **columns)
    workload.forget_segment()
    return hold

