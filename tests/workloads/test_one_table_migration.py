"""Issue 48, points 1 and 2: every workload moves to the one Workload table and back, and the open segment's money
to the quota holds and back, losing nothing — in one walk back and forth over the migrations.

On a seeded database — the demo's two weeks of history and, of each kind, work running, work preempted and
queued again, and work ended (:func:`tests.workloads.test_hold_migration.seeded_world`) — the apps are moved back to
before the money moved to the holds (past the one table: each kind's table holds the shared columns and its money
columns again, checked against what the one table and the holds said), forward to just before the one table (the
kinds' tables hold exactly what the one table had held for them), and forward to the end: the row counts, every
row's columns, every ledger sum and every workload's cost are what they were.

One walk for both moves, not one each: a walk back renders the state of every migration after the first it unapplies
(Django's ``_migrate_all_backwards``), 51 of the 77 s a walk back took under cProfile on the 2-vCPU machine
(2026-11-30); the two tests that walked back and forth each were 151 and 156 s of one CI run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.workloads import test_hold_migration as hold
from tests.workloads.test_hold_migration import latest, migrate, money, seeded_world
from workloads.migrations._one_table import SHARED
from workloads.models import Workload
from workloads.registry import kinds

pytestmark = pytest.mark.django_db(transaction=True)

#: Every app's migration just before the one table (the test kinds' too).
BEFORE = [("workloads", "0008_attempt_end_reason_code"), ("jobs", "0015_hold_money"),
          ("inference", "0015_hold_money"), ("workspaces", "0003_hold_money"), ("tinykind", "0010_hold_money"),
          ("holdkind", "0001_initial")]


def rows() -> dict[str, dict]:
    """Every workload of every kind with all its columns, shared and its kind's own, by ref."""
    found = {}
    for kind in kinds():
        for values in kind.model.objects.values():
            found[f"{kind.prefix}:{values['id']}"] = {name: value for name, value in values.items()
                                                     if name not in ("uid", "workload_id")}
    return found


def _plain(value):
    """A column's value as both databases give it back through a cursor (SQLite: text and floats; JSON as text)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, str) and value[:1] in ("{", "["):  # a JSON column read with SQL
        return json.loads(value)
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] in " T":
        try:
            return datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)
        except ValueError:
            return value
    if isinstance(value, float | Decimal) and not isinstance(value, bool):  # SQLite's are floats: to the ledger's ten places
        return Decimal(str(value)).quantize(Decimal("1e-10")).normalize()
    return value


def kind_tables_then() -> dict[str, dict]:
    """What the kinds' tables hold of the shared columns before the one table, read with SQL (today's models lack them)."""
    found = {}
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        for kind in kinds():
            columns = [kind.model._meta.get_field(name).column for name in SHARED]
            cursor.execute(f"SELECT id, {', '.join(q(c) for c in columns)} FROM {q(kind.model._meta.db_table)}")
            for pk, *values in cursor.fetchall():
                found[f"{kind.prefix}:{pk}"] = dict(zip(columns, map(_plain, values), strict=True))
    return found


# One walk back over every app's migrations (past the one table, the quotas split and the money's move) and forward:
# about 100 s on the 2-vCPU machine at a load of 4, past the suite's 300 s at a load of 10 (2026-11-27).
@pytest.mark.timeout(900)
def test_every_workload_and_its_money_move_to_the_one_table_and_the_holds_and_back_losing_nothing():
    now = timezone.now()
    seeded_world(now)
    before, figures = rows(), money(now)
    assert {"run", "ep", "ws"} <= {ref.partition(":")[0] for ref in before}  # the demo's kinds
    assert Workload.objects.count() == len(before) > 20
    states = {values["state"] for values in before.values()}
    assert {"queued", "pending", "cancelled"} <= states, states  # queued (some again, preempted), holding, ended
    # Money: running work of every kind the demo submits, ended work that shows the rate it was charged, two weeks of
    # ledger rows.
    running = {ref.partition(":")[0] for ref, shown in figures["workloads"].items() if shown[5] > 0}
    assert {"run", "ep", "ws"} <= running, running
    assert any(shown[4] is not None and shown[0] in hold.kind_of_ref(ref).model.FINAL_STATES
               for ref, shown in figures["workloads"].items())
    assert figures["ledger"]["rows"] > 100 and figures["ledger"]["cost"] > 0
    shared_then = {ref: {Workload._meta.get_field(name).column: _plain(values[Workload._meta.get_field(name).attname])
                         for name in SHARED} for ref, values in before.items()}

    migrate([*hold.BEFORE, ("workloads", "0008_attempt_end_reason_code")])  # the one table's app too
    try:
        assert "workloads_workload" not in connection.introspection.table_names()
        # Before the money moved: each kind's columns hold its open segment as the holds showed it.
        columns = hold.old_columns()
        for ref, shown in figures["workloads"].items():
            money_then = (shown[6], shown[5], shown[7], shown[4])  # billed_until, open_units, open_idle, charged_price
            assert hold.comparable(columns[ref]) == hold.comparable(money_then), ref
        migrate(BEFORE)
        # Just before the one table: the kinds' tables hold what the one table held for them.
        assert "workloads_workload" not in connection.introspection.table_names()
        then = kind_tables_then()
        assert then.keys() == shared_then.keys()
        assert {ref: {c: (v, then[ref][c]) for c, v in values.items() if then[ref][c] != v}
                for ref, values in shared_then.items() if then[ref] != values} == {}
    finally:
        migrate(latest())

    after = rows()
    assert after.keys() == before.keys()
    changed = {ref: {name: (value, after[ref][name]) for name, value in values.items() if after[ref][name] != value}
               for ref, values in before.items() if after[ref] != values}
    assert changed == {}
    assert money(now) == figures
    assert sorted(Workload.objects.values_list("kind", "number")) == sorted(
        (ref.partition(":")[0], int(ref.partition(":")[2])) for ref in before)


def test_the_kinds_names_stay_unique_among_their_unfinished_work_on_the_one_table(member, team, quota):
    """The kinds' constraints moved with their rows: a partial unique index per kind on the one table."""
    from django.db import IntegrityError, transaction

    from fleet.models import GpuFlavor
    from jobs.models import TrainingRun

    flavor = GpuFlavor.objects.get(name="a100-80gb")

    def run(name: str):
        return TrainingRun.objects.create(team=team, created_by=member, name=name, flavor=flavor,
                                          image="registry.example.com/t:1", command=["python"])

    first = run("same")
    with pytest.raises(IntegrityError), transaction.atomic():
        run("same")
    TrainingRun.objects.filter(pk=first.pk).update(state="cancelled")
    assert run("same").name == "same"  # a finished run's name may be taken again
    assert Workload.objects.filter(kind="run", name="same").count() == 2


def test_every_final_state_of_a_run_frees_its_name(member, team, quota):
    """The index of unfinished names and the submission's check (``unfinished()``) agree: a pruned trial's name
    is free again, as a succeeded one's (it was refused by the index: two pruned trials of one name, or a run
    named as a pruned one, "already has an active run named")."""
    from fleet.models import GpuFlavor
    from jobs.models import TrainingRun

    flavor = GpuFlavor.objects.get(name="a100-80gb")
    for state in TrainingRun.FINAL_STATES:
        for _ in range(2):
            run = TrainingRun.objects.create(team=team, created_by=member, name="same", flavor=flavor,
                                             image="registry.example.com/t:1", command=["python"])
            TrainingRun.objects.filter(pk=run.pk).update(state=state)
    assert TrainingRun.objects.create(team=team, created_by=member, name="same", flavor=flavor,
                                      image="registry.example.com/t:1", command=["python"]).name == "same"


def test_the_one_table_is_what_migrations_make_on_this_database():
    """Every kind's index of unfinished names exists (an index Django's state does not know would be lost
    by a later rebuild of the table on SQLite: this says so at once)."""
    names = {constraint for constraint, info in connection.introspection.get_constraints(
        connection.cursor(), "workloads_workload").items() if info["unique"] and info["index"]}
    assert {"uniq_active_run_name", "uniq_live_endpoint_name", "uniq_unfinished_workspace_name"} <= names
    executor = MigrationExecutor(connection)
    assert not executor.migration_plan(executor.loader.graph.leaf_nodes())
