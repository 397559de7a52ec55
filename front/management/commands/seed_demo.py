"""``manage.py seed_demo``: demo teams, people, GPU flavors, quotas and prices.

Creates each demo object once and never changes it afterwards. ``make run`` seeds on every
start, and by then an admin may have raised a quota or budget, changed a price, changed a
role or removed a member: a rerun adds only what it never created and leaves everything else
as the admin left it. Every object it creates is recorded by key in :class:`DemoSeed`
(``team:ml-research``, ``member:ml-research/alice`` …), so something an admin *deleted* is not
re-created either. Objects that exist without a record (seeded before the records, or made by
hand) are adopted as they are, never overwritten.

The demo's quotas add up to the GPUs of the sandbox's clusters per flavor (``sandbox/inventory.yaml``;
``tests/front/test_demo_capacity.py`` keeps them equal), so a team gets past its nominal quota
only by borrowing: ML Research and NLP Platform share the cohort ``research``
(:data:`COHORTS`), set up through :mod:`quotas.services` as the admin (audited like any change).

Passwords are fixed demo strings, set when the user is created and printed at the end (a user
whose password was changed since is marked so) — which is also why the command refuses to
run with ``DEBUG`` off unless ``--force`` says the deployment really is a demo.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from billing.models import TeamBudget
from billing.services import seed_cluster_prices
from cluster.backends.base import NodeCapacity
from cluster.capacity import offers
from fleet.models import Cluster, GpuFlavor, NodePool
from fleet.pools import set_pool
from notifications.constants import EventKind
from notifications.services import email_kinds, set_email_kinds
from notifications.vocabulary import kind_event_codes
from quotas import demo
from quotas.models import Cohort, TeamQuota, TeamSharing
from quotas.services import set_cohort, set_team_quota
from reservations.demo import seed_demo_reservation
from sandbox import inventory as sandbox_inventory
from sweeps.demo import seed_demo_sweep
from teams.models import DemoSeed, Membership, Role, Team
from workloads.models import TeamAlertSettings
from workloads.registry import Demo
from workloads.registry import kinds as registered_kinds
from workloads.telemetry.alert_settings import problems

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


@dataclass(frozen=True)
class DemoCohort:
    name: str
    teams: tuple[str, ...]  # slugs
    reclaim: str
    min_runtime_minutes: int
    preemption_delay_seconds: int
    borrowing_limits: dict[tuple[str, str], int]  # (team slug, flavor name) -> units it may borrow


TEAMS: tuple[DemoTeam, ...] = (
    DemoTeam("ml-research", "ML Research",
             {"a100-80gb": 8, "h100-80gb": 8, "l4": 2, "a100-1g.10gb": 3, "a100-2g.20gb": 2, "a100-3g.40gb": 4,
              "t4-ts4": 4, "a10g-mps2": 2},
             Decimal("20000")),
    # Seven 1g.10gb slices: one A100 in MIG mode, cut the way inference endpoints like it; and one
    # time-sliced T4 (four t4-ts4 units) for small endpoints.
    DemoTeam("vision", "Computer Vision", {"a100-80gb": 4, "l4": 2, "a100-1g.10gb": 7, "t4-ts4": 4},
             Decimal("5000")),
    # The shared flavors share east's two T4s (time-sliced x4) and its node of two A10Gs (MPS x2),
    # whose clients are of one team at a time (one_team_per_gpu, enforced per node): ML Research's or NLP's.
    DemoTeam("nlp", "NLP Platform", {"h100-80gb": 8, "a10g-mps2": 2}, Decimal("15000")),
)

#: Quota sharing: of their flavors only H100 is both teams', so that is where ML Research borrows
#: (its demo run llama-ablation, which the training kind's ``seed_demo`` submits) and NLP reclaims (t5-distill, two minutes later).
#: Short rules so the reclaim happens within minutes of ``make run``: borrowed work older than
#: a minute may be preempted, once NLP's queued work has waited 30 s for capacity to free itself.
COHORTS: tuple[DemoCohort, ...] = (
    DemoCohort("research", ("ml-research", "nlp"), Cohort.Reclaim.ANY, min_runtime_minutes=1,
               preemption_delay_seconds=30, borrowing_limits={("ml-research", "h100-80gb"): 8}),
)

#: E-mail subscriptions of the demo: (team slug, username, what gives the kinds of event). Alice hears
#: of every workload kind's own events (a run ended, an endpoint degraded, …: what the kinds declare)
#: and of preemptions; Dave of Vision's idle GPUs (its forgotten notebook, a demo run) and GPU memory
#: running out.
DEMO_EMAIL: tuple[tuple[str, str, Callable[[], list[str]]], ...] = (
    ("ml-research", "alice", lambda: [*kind_event_codes(), EventKind.PREEMPTED, EventKind.SWEEP_FINISHED]),
    ("vision", "dave", lambda: [EventKind.GPU_IDLE, EventKind.GPU_MEMORY]),
)

#: Alert rules teams tightened (workloads.telemetry.alert_settings): Vision is told of idle GPUs after 5 minutes
#: rather than the platform's 30, so the forgotten notebook's idle alert comes within minutes of ``make run``.
DEMO_ALERT_RULES: tuple[tuple[str, dict], ...] = (
    ("vision", {"idle_minutes": 5}),
)

USERS: tuple[DemoUser, ...] = (
    DemoUser("alice", (("ml-research", Role.MEMBER), ("vision", Role.VIEWER))),
    DemoUser("bob", (("ml-research", Role.ADMIN),)),
    DemoUser("carol", (("ml-research", Role.VIEWER),)),
    DemoUser("dave", (("vision", Role.MEMBER),)),
    DemoUser("erin", (("nlp", Role.MEMBER),)),
    DemoUser("admin", (), staff=True),
)


class Seeded:
    """The keys of the demo objects created by earlier runs; each object is created once."""

    def __init__(self) -> None:
        self.done = set(DemoSeed.objects.values_list("key", flat=True))
        self.new: list[str] = []

    def due(self, key: str) -> bool:
        """True when ``key`` was never seeded: the caller creates it (if missing) and it is recorded."""
        if key in self.done:
            return False
        self.done.add(key)
        self.new.append(key)
        return True

    def save(self) -> None:
        DemoSeed.objects.bulk_create([DemoSeed(key=key) for key in self.new], ignore_conflicts=True)
        self.new = []


class Command(BaseCommand):
    help = ("Create the demo teams, users (credentials printed), GPU flavors, quotas and prices that were never "
            "created before; what exists is left as it is.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true",
                            help="Seed even with DEBUG off (demo users have well-known passwords).")
        parser.add_argument("--no-runs", action="store_true",
                            help="Seed the teams, quotas and prices only: no kind's demo work, no history.")
        parser.add_argument("--url", default=None,
                            help="Where the portal is served, for the printed links "
                                 "(default: http://127.0.0.1:$PORT/, PORT defaulting to 8000).")

    def handle(self, *args, force: bool = False, no_runs: bool = False, url: str | None = None, **options) -> None:
        if not settings.DEBUG and not force:
            raise CommandError("DEBUG is off: refusing to create users with well-known passwords. "
                               "Use --force if this deployment is a demo.")
        seeded = Seeded()
        with transaction.atomic():
            created = seed_world(seeded)
            seeded.save()
        if not no_runs:
            # Submitted like any run (admission, queue, tasks published after commit), once per
            # team: a team whose demo work was seeded before (or that has work) gets none.
            slugs = [spec.slug for spec in TEAMS if seeded.due(f"runs:{spec.slug}")]
            # Each kind seeds its own (Demo.seed_demo): the command names none.
            lines = [line for kind in registered_kinds() for line in Demo.of(kind).seed_demo(slugs)]
            history = [spec.slug for spec in TEAMS if seeded.due(f"history:{spec.slug}")]
            lines = [line for kind in registered_kinds() for line in Demo.of(kind).seed_demo_history(history)] + lines
            if seeded.due("reservation:release-eval"):
                lines.append(seed_demo_reservation(timezone.now()))
            if seeded.due("sweep:lr-search"):
                lines.append(seed_demo_sweep())
            seeded.save()
            for line in lines:
                self.stdout.write(line)
        self.report(created, url or portal_url())

    def report(self, created: int, url: str) -> None:
        self.stdout.write(self.style.SUCCESS(
            f"Demo data ready: {len(TEAMS)} teams, {len(USERS)} users, {len(demo.flavor_definitions())} GPU flavors"
            f" ({created} objects created now; existing ones kept as they are)."))
        self.stdout.write("Log in with (username / password):")
        users = {u.username: u for u in get_user_model().objects.filter(username__in=[spec.username for spec in USERS])}
        # The roles as they are now (an admin may have changed them), not as the demo first made them.
        roles: dict[str, list[str]] = {}
        for username, role, slug in (Membership.objects.filter(user__in=users.values()).order_by("team__slug")
                                     .values_list("user__username", "role", "team__slug")):
            roles.setdefault(username, []).append(f"{role} of {slug}")
        for spec in USERS:
            user = users.get(spec.username)
            if user is None:
                continue  # an admin deleted it: not re-created
            what = ", ".join(roles.get(spec.username, [])) or ("staff superuser" if user.is_superuser else "no team")
            password = ADMIN_PASSWORD if spec.staff else DEMO_PASSWORD
            note = "" if user.check_password(password) else "  (password changed since seeding)"
            self.stdout.write(f"  {spec.username:<6} / {password:<14} {what}{note}")
        self.stdout.write(f"Open {url} — the admin console is at {url}admin/")


def portal_url() -> str:
    """The portal's address for printed links: the port it really listens on (``PORT``, as ``scripts/run.sh`` sets)."""
    return f"http://127.0.0.1:{os.environ.get('PORT') or 8000}/"


def seed_world(seeded: Seeded) -> int:
    """Create the demo objects never seeded before (existing ones are adopted unchanged); how many were created."""
    created = 0
    # 1. Flavors: prices and placement are the admin's once the flavor exists.
    names = [d["name"] for d in demo.flavor_definitions() if seeded.due(f"flavor:{d['name']}")]
    missing = set(names) - set(GpuFlavor.objects.filter(name__in=names).values_list("name", flat=True))
    created += len(demo.seed_flavors(missing)) if missing else 0
    # 1b. The clusters the backend offers (the sandbox: east and west), priced as its inventory says.
    if seeded.due("cluster-prices"):
        created += seed_cluster_prices()
    # 2. Teams, then their quotas and budgets (only for teams that exist: one an admin deleted stays deleted).
    for spec in TEAMS:
        if seeded.due(f"team:{spec.slug}"):
            created += Team.objects.get_or_create(slug=spec.slug, defaults={"name": spec.name})[1]
    teams = {t.slug: t for t in Team.objects.filter(slug__in=[spec.slug for spec in TEAMS])}
    # A quota of a flavor that does not exist (not defined by quotas.demo, or deleted by an admin)
    # waits, unrecorded, until it does.
    flavors = set(GpuFlavor.objects.values_list("name", flat=True))
    for spec in TEAMS:
        team = teams.get(spec.slug)
        if team is None:
            continue
        have = set(TeamQuota.objects.filter(team=team).values_list("flavor__name", flat=True))
        limits = {name: limit for name, limit in spec.limits.items()
                  if name in flavors and seeded.due(f"quota:{spec.slug}/{name}") and name not in have}
        budget = spec.monthly_budget if seeded.due(f"budget:{spec.slug}") else None
        if budget is not None and TeamBudget.objects.filter(team=team).exists():
            budget = None
        if limits or budget is not None:
            demo.seed_team_quotas(team, limits, budget)
            created += len(limits) + (budget is not None)
    # 3. People and their memberships (a removed member stays removed, a changed role stays changed).
    for spec in USERS:
        if seeded.due(f"user:{spec.username}"):
            created += seed_user(spec)
    users = {u.username: u for u in get_user_model().objects.filter(username__in=[spec.username for spec in USERS])}
    for spec in USERS:
        for slug, role in spec.memberships:
            if seeded.due(f"member:{slug}/{spec.username}") and slug in teams and spec.username in users:
                created += Membership.objects.get_or_create(team=teams[slug], user=users[spec.username],
                                                            defaults={"role": role})[1]
    # 4. Cohorts, through the quota services as the demo admin: audited like an admin's change.
    for spec in COHORTS:
        if seeded.due(f"cohort:{spec.name}"):
            created += seed_cohort(spec, teams, users.get("admin"))
    # 4b. The elastic pools the backend offers (the sandbox's west H100s), so the portal knows them.
    if seeded.due("node-pools"):
        created += seed_node_pools(users.get("admin"))
    # 5. Alice gets e-mail about ML Research's runs (the console backend prints it in the worker's log).
    for slug, username, kinds in DEMO_EMAIL:
        if (seeded.due(f"notify:{slug}/{username}") and slug in teams and username in users
                and Membership.objects.filter(team=teams[slug], user=users[username]).exists()):
            set_email_kinds(users[username], teams[slug], [*email_kinds(users[username], teams[slug]), *kinds()])
            created += 1
    # 6. Alert rules a team tightened (as its admins would on the Team page; checked as they would be).
    for slug, rules in DEMO_ALERT_RULES:
        if seeded.due(f"alert-rules:{slug}") and slug in teams and not problems(rules):
            created += TeamAlertSettings.objects.get_or_create(team=teams[slug], defaults=rules)[1]
    return created


def seed_node_pools(actor) -> int:
    """The portal's :class:`fleet.models.NodePool` of each elastic pool of the sandbox's clusters (its inventory's
    ``elastic:`` pools: min, max, mode, unneeded minutes; none with another backend), of the flavor whose units its
    nodes offer, for clusters and flavors that exist and have no pool yet (a staff change is never overwritten).
    How many made."""
    if settings.SLIPWAY_CLUSTER_BACKEND != "sandbox":
        return 0
    made = 0
    flavors = list(GpuFlavor.objects.order_by("name"))
    clusters = {c.name: c for c in Cluster.objects.all()}
    for offered in sandbox_inventory.clusters():
        cluster = clusters.get(offered.name)
        for pool in offered.elastic if cluster else ():
            node = NodeCapacity(pool.template.name, pool.resource, pool.units_per_node, 0, dict(pool.template.labels))
            flavor = next((f for f in flavors if f.max_units_per_node == pool.units_per_node and offers(node, f.to_spec())),
                          None)
            if flavor is None or NodePool.objects.filter(cluster=cluster, flavor=flavor).exists():
                continue
            settings_ = pool.settings
            set_pool(cluster, flavor, {"min_nodes": settings_.min_nodes, "max_nodes": settings_.max_nodes,
                                       "mode": settings_.mode, "unneeded_minutes": settings_.unneeded_minutes}, actor)
            made += 1
    return made


def seed_cohort(spec: DemoCohort, teams: dict[str, Team], actor) -> bool:
    """Create the cohort with its teams and their borrowing limits. True if created.

    Adopted, not changed, when it exists; not created when a member is missing or an admin
    already put one in another cohort (joining would take it out of that one).
    """
    members = [teams[slug] for slug in spec.teams if slug in teams]
    if (len(members) < len(spec.teams) or Cohort.objects.filter(name=spec.name).exists()
            or TeamSharing.objects.filter(team__in=members, cohort__isnull=False).exists()):
        return False
    set_cohort(actor, spec.name, reclaim=spec.reclaim, min_runtime_minutes=spec.min_runtime_minutes,
               preemption_delay_seconds=spec.preemption_delay_seconds, teams=members)
    for (slug, flavor), units in spec.borrowing_limits.items():
        quota = TeamQuota.objects.select_related("flavor").filter(team=teams[slug], flavor__name=flavor).first()
        if quota is not None:
            set_team_quota(actor, teams[slug], quota.flavor, quota.limit, borrowing_limit=units)
    return True


def seed_user(spec: DemoUser) -> bool:
    """Create the demo user with its printed password; an existing user is kept as it is. True if created."""
    user, created = get_user_model().objects.get_or_create(
        username=spec.username,
        defaults={"email": f"{spec.username}@example.com", "is_staff": spec.staff, "is_superuser": spec.staff,
                  "is_active": True},
    )
    if created:
        user.set_password(ADMIN_PASSWORD if spec.staff else DEMO_PASSWORD)
        user.save(update_fields=["password"])
    return created
