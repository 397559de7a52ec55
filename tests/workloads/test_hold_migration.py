"""The migrations of the workloads' money, run on a seeded database (issue 48: "a migration test on a
seeded database … row counts, every ledger sum and every workload's cost identical before and after").

The open segment moved from the kinds' tables to the quota holds (``*/migrations/*_hold_money.py``, their
shared step ``workloads/migrations/_hold_money.py``). This module seeds the demo's world and two weeks of history
and makes work of every kind run, roll an hour over, be preempted and queued again, and end
(:func:`seeded_world`), and reads every figure money shows (:func:`money`): the ledger's rows and sums, each
workload's cost to the second and its charged rate, each team's spend and commitments, what each hold and queue
entry carries. The walk back to before the move (its backward step fills the kinds' columns again, checked against
what the holds said) and forward once more is the one of the one table's move, which goes back past it
(``tests/workloads/test_one_table_migration.py``): one walk for both. The older move of the charged rate
(``workloads/migrations/_charged_rates.py``) is run here, on its own schema.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Sum
from django.utils import timezone

from billing import ledger, segments
from billing.models import QuotaHold, UsageRecord
from quotas.models import QueuedRequest
from teams.models import Team
from tests.db_template import database_at, early_rows
from workloads import lifecycle
from workloads.registry import kind_of, kinds

pytestmark = pytest.mark.django_db(transaction=True)

#: The kind apps' migrations just before the money moved, and the quotas one that gave the holds their columns.
BEFORE = [("quotas", "0015_quota_hold"), ("jobs", "0014_charged_price"), ("inference", "0014_revisions"),
          ("workspaces", "0002_charged_price"), ("tinykind", "0009_charged_price")]
MONEY_COLUMNS = ("billed_until", "open_units", "open_idle", "charged_price")


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)


def latest() -> list[tuple[str, str]]:
    """Every app's last migration: what moving the apps back unapplied, wherever it is, comes back."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def workloads_of_every_kind() -> list:
    return [w for kind in kinds() for w in kind.model.objects.select_related("team", "flavor").with_segments()
            .order_by("pk")]


def run_for_a_while(workload, started, now) -> None:
    """What the reconcile cycle does for work that runs: open its segment at ``started``, roll it over at the
    next hour (a ledger row, a new segment at today's rate), written as the cycle writes them."""
    units = workload.placement_shape[0]
    for at in (started, ledger.next_hour(started) + timedelta(minutes=1)):
        workload.refresh_from_db()
        plan = segments.plan_billing(workload, units, started, None, at, attempt_started_at=started)
        assert segments.move_segment(plan)
        type(workload).objects.filter(pk=workload.pk).update(state=kind_of(workload).lifecycle.applied,
                                                              started_at=started, **segments.cost_change(plan))
        segments.record([(workload, plan)])


def seeded_world(now):
    """The demo (teams, two weeks of history, work submitted) and, of each kind, work running, work
    preempted and queued again, and work ended."""
    call_command("seed_demo", force=True, stdout=StringIO())
    started = now - timedelta(hours=3, minutes=7)
    for kind in kinds():
        holding = list(kind.model.objects.holding_quota().select_related("team", "flavor").order_by("pk"))
        for workload in holding:
            run_for_a_while(workload, started, now)
        if len(holding) >= 3:
            preempted, ended = holding[0], holding[1]
            kind.model.objects.filter(pk=preempted.pk).update(preempting_since=now - timedelta(minutes=2))
            preempted.refresh_from_db()
            assert lifecycle.requeue(kind, preempted, now - timedelta(minutes=1), reason="preempted (migration test)")
            ended.refresh_from_db()
            assert lifecycle.end(ended, "ended (migration test)")


def money(now) -> dict:
    """Every figure of money the portal shows or counts, as comparable values."""
    teams = list(Team.objects.order_by("pk"))
    team_ids = [team.pk for team in teams]
    sums = UsageRecord.objects.aggregate(rows=Count("pk"), cost=Sum("cost"), gpu=Sum("gpu_hours"),
                                         idle=Sum("idle_cost"), units=Sum("unit_hours"), borrowed=Sum("borrowed_gpu_hours"))
    month = ledger.month_spend(team_ids, now)
    return {
        "ledger": sums,
        "holds": QuotaHold.objects.count(),
        "held": sorted(QuotaHold.objects.held().values_list(
            "ref", "units", "committed_units", "limit_minutes", "user_id", "cluster_id", "started_at",
            *MONEY_COLUMNS)),
        "queue": sorted(QueuedRequest.objects.values_list("ref", "committed_units", "limit_minutes", "user_id")),
        "workloads": {w.ref: (w.state, w.billed_cost, w.cost_at(now), w.unit_price(), w.charged_price,
                              w.open_units, w.billed_until, w.open_idle) for w in workloads_of_every_kind()},
        "spend": {team_id: (spend.spent, spend.burn_per_hour) for team_id, spend in month.items()},
        "committed": ledger.committed_by_team(team_ids, now),
        "usage": ledger.usage_table(teams, ledger.month_start(now) - timedelta(days=31), now, ("workload",), now),
    }


def kind_of_ref(ref: str):
    return next(kind for kind in kinds() if kind.prefix == ref.partition(":")[0])


def old_columns() -> dict[str, tuple]:
    """The kinds' money columns in the schema before the move, read with SQL (today's models lack them); of the
    kinds that existed then (a kind added since, the test-only block kind, never had them)."""
    found = {}
    existed = {app for app, _migration in BEFORE}
    with connection.cursor() as cursor:
        for kind in (kind for kind in kinds() if kind.model._meta.app_label in existed):
            table = connection.ops.quote_name(kind.model._meta.db_table)
            cursor.execute(f"SELECT id, {', '.join(MONEY_COLUMNS)} FROM {table}")
            for pk, *values in cursor.fetchall():
                found[f"{kind.prefix}:{pk}"] = tuple(values)
    return found


def comparable(values: tuple) -> tuple:
    """SQLite hands back text and floats where PostgreSQL gives typed values: compare their meaning."""
    billed_until, units, idle, price = values
    if isinstance(billed_until, str):
        billed_until = datetime.fromisoformat(billed_until)
    if billed_until is not None and billed_until.tzinfo is None:
        billed_until = billed_until.replace(tzinfo=UTC)  # SQLite keeps UTC without saying so
    return billed_until, int(units or 0), bool(idle), None if price is None else Decimal(str(price)).normalize()


def test_work_billed_before_the_charged_rate_existed_gets_its_last_ledger_hours_rate():
    """The data migration of ``charged_price`` (workloads/migrations/_charged_rates.py), on its own schema: an
    ended row with ledger time gets the rate of its last hour (cost ÷ unit-hours), not today's price; an open
    one keeps null."""
    then = [("tinykind", "0008_gpu_memory"), ("quotas", "0014_usage_unit_hours")]  # the ledger's unit-hours exist
    with database_at(then) as executor:
        old = executor.loader.project_state(then).apps
        team, member, flavor = early_rows(old)  # a100-80gb at 4.10 an hour today
        notebook = old.get_model("tinykind", "Notebook")
        t0 = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
        common = {"team_id": team.pk, "created_by_id": member.pk, "flavor_id": flavor.pk, "gpus": 2,
                  "billed_cost": Decimal("1")}
        ended = notebook.objects.create(name="old", state="done", billed_until=t0 + timedelta(hours=2), **common)
        running = notebook.objects.create(name="on", state="running", billed_until=t0, open_units=2, **common)
        usage = old.get_model("quotas", "UsageRecord")
        for ref in (f"nb:{ended.pk}", f"nb:{running.pk}"):
            # The ledger then: a row per hour at 3.60 an hour for each of 2 GPUs.
            for hour in (t0, t0 + timedelta(hours=1)):
                usage.objects.create(team_id=team.pk, ref=ref, flavor_id=flavor.pk, user_id=member.pk, hour=hour,
                                     start=hour, end=hour + timedelta(hours=1), units=2, gpu_hours=2, unit_hours=2,
                                     cost=Decimal("7.2000"))
        executor.migrate([("tinykind", "0009_charged_price")])
        rates = dict(old_rates())
        assert (rates[ended.pk], rates[running.pk]) == (Decimal("3.6000"), None)


def old_rates() -> list[tuple[int, Decimal | None]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, charged_price FROM tinykind_notebook")
        return [(pk, None if price is None else Decimal(str(price)).quantize(Decimal("0.0001")))
                for pk, price in cursor.fetchall()]
