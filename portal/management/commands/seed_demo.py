"""``manage.py seed_demo``: demo teams, people, GPU flavors, quotas and prices.

Idempotent: every row is found by its natural key and brought to the demo state, so running
it twice (``make run`` does it on every start) changes nothing and duplicates nothing.
Passwords are fixed demo strings and printed at the end — which is also why the command
refuses to run with ``DEBUG`` off unless ``--force`` says the deployment really is a demo.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from inference.demo import seed_demo_endpoints
from jobs.demo import seed_demo_runs
from portal.models import Membership, Role, Team
from quotas import demo

DEMO_PASSWORD = "slipway-demo"
ADMIN_PASSWORD = "slipway-admin"


@dataclass(frozen=True)
class DemoTeam:
    slug: str
    name: str
    limits: dict[str, int]  # flavor name -> whole units
    monthly_budget: Decimal | None


@dataclass(frozen=True)
class DemoUser:
    username: str
    memberships: tuple[tuple[str, str], ...]  # (team slug, role)
    staff: bool = False


MIG_PROFILES = ("a100-1g.10gb", "a100-2g.20gb", "a100-3g.40gb")

TEAMS: tuple[DemoTeam, ...] = (
    DemoTeam("ml-research", "ML Research",
             {"a100-80gb": 8, "h100-80gb": 8, "l4": 2, **dict.fromkeys(MIG_PROFILES, 4)}, Decimal("20000")),
    # Seven 1g.10gb slices: one A100 in MIG mode, cut the way inference endpoints like it.
    DemoTeam("vision", "Computer Vision", {"a100-80gb": 4, "l4": 2, "a100-1g.10gb": 7}, Decimal("5000")),
    DemoTeam("nlp", "NLP Platform", {"h100-80gb": 8}, Decimal("15000")),
)

USERS: tuple[DemoUser, ...] = (
    DemoUser("alice", (("ml-research", Role.MEMBER), ("vision", Role.VIEWER))),
    DemoUser("bob", (("ml-research", Role.ADMIN),)),
    DemoUser("carol", (("ml-research", Role.VIEWER),)),
    DemoUser("dave", (("vision", Role.MEMBER),)),
    DemoUser("erin", (("nlp", Role.MEMBER),)),
    DemoUser("admin", (), staff=True),
)


class Command(BaseCommand):
    help = "Create or refresh the demo teams, users (credentials printed), GPU flavors, quotas and prices."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true",
                            help="Seed even with DEBUG off (demo users have well-known passwords).")
        parser.add_argument("--no-runs", action="store_true",
                            help="Do not submit the demo training runs and endpoints.")

    def handle(self, *args, force: bool = False, no_runs: bool = False, **options) -> None:
        if not settings.DEBUG and not force:
            raise CommandError("DEBUG is off: refusing to create users with well-known passwords. "
                               "Use --force if this deployment is a demo.")
        with transaction.atomic():
            flavors = demo.seed_flavors()
            teams = {spec.slug: seed_team(spec) for spec in TEAMS}
            for spec in TEAMS:
                demo.seed_team_quotas(teams[spec.slug], spec.limits, spec.monthly_budget)
            for spec in USERS:
                seed_user(spec, teams)
        if not no_runs:
            # Submitted like any run (admission, queue, tasks published after commit); a
            # team that already has runs gets none, so restarts do not pile them up.
            runs = seed_demo_runs()
            if runs:
                self.stdout.write(f"Submitted {len(runs)} demo training runs; they progress on their own.")
            endpoints = seed_demo_endpoints()
            if endpoints:
                self.stdout.write(f"Created {len(endpoints)} demo inference endpoints; they scale with a demo load.")
        self.report(len(flavors))

    def report(self, flavor_count: int) -> None:
        self.stdout.write(self.style.SUCCESS(
            f"Demo data ready: {len(TEAMS)} teams, {len(USERS)} users, {flavor_count} GPU flavors."))
        self.stdout.write("Log in with (username / password):")
        for spec in USERS:
            roles = ", ".join(f"{role} of {slug}" for slug, role in spec.memberships) or "staff superuser"
            password = ADMIN_PASSWORD if spec.staff else DEMO_PASSWORD
            self.stdout.write(f"  {spec.username:<6} / {password:<14} {roles}")
        self.stdout.write("Open http://127.0.0.1:8000/ (make run); the admin console is at /admin/.")


def seed_team(spec: DemoTeam) -> Team:
    team, _created = Team.objects.update_or_create(slug=spec.slug, defaults={"name": spec.name})
    return team


def seed_user(spec: DemoUser, teams: dict[str, Team]) -> AbstractBaseUser:
    user, _created = get_user_model().objects.update_or_create(
        username=spec.username,
        defaults={"email": f"{spec.username}@example.com", "is_staff": spec.staff, "is_superuser": spec.staff,
                  "is_active": True},
    )
    # Reset every run, so the printed credentials are always the ones that work.
    user.set_password(ADMIN_PASSWORD if spec.staff else DEMO_PASSWORD)
    user.save(update_fields=["password"])
    for slug, role in spec.memberships:
        Membership.objects.update_or_create(team=teams[slug], user=user, defaults={"role": role})
    return user
