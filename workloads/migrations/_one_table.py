"""The move of issue 48's point 1, shared by each kind app's migration: every workload row to the one table.

Until this move each kind's table held the shared columns itself (an abstract ``Workload``); now the
shared columns live in ``workloads_workload`` (``workloads/migrations/0009_workload_table.py``) and a
kind's table keeps its own columns and its primary key, the number its refs (``run:42``), API ids
and cluster objects (``run-42``) carry, linked one to one (Django's multi-table inheritance with a
``parent_link`` that is not the primary key). :func:`move_to_workload_table` gives a kind's migration
its operations, in order:

1. a nullable ``workload`` link on the kind's table;
2. :class:`CopyToWorkloadTable`: one ``INSERT … SELECT`` copies every row's shared columns to the one
   table with its kind and number, and one ``UPDATE`` links each row to its copy;
3. the shared columns leave the kind's table;
4. the link becomes the parent link, not null, and the kind's model inherits ``workloads.Workload``
   (:class:`AlterModelBases`, the state only: Django's autodetector never changes a model's bases);
5. :class:`LiveNames`: the kind's names are unique among its unfinished workloads, as its table's
   constraint said — now a partial unique index on the one table, for the kind's rows and its
   states that are not final (a constraint of Django's on the one table cannot name one kind's states).

Backwards, the shared columns come back (nullable first: the operations before the copy make the kind's
columns that are not null nullable, so that their columns can be added back empty and filled before
they are not null again) and the kind's rows leave the one table.
"""

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models
from django.db.migrations.operations.base import Operation

#: The shared columns the kinds' tables held until this move: ``workloads.models.Workload``'s fields at
#: this migration, but for the one table's own (``uid``, ``kind``, ``number``, ``parent``).
SHARED = ("team", "created_by", "name", "flavor", "spot", "state", "reason", "reason_code", "created_at",
          "admitted_at", "started_at", "finished_at", "apply_attempts", "apply_started_at", "applied_at",
          "billed_cost", "idle_since", "preemptions", "last_preempted_at", "preempting_since", "attempt",
          "attempt_started_at", "cluster", "placement_reason", "placed_at", "cluster_selector", "gpu_memory_gb")


class CopyToWorkloadTable(Operation):
    """Copy every row of a kind's table to the one table (its kind and number, its shared columns) and link it;
    backwards, copy the shared columns back and delete the kind's rows of the one table."""

    def __init__(self, model_name: str, prefix: str) -> None:
        self.model_name, self.prefix = model_name, prefix

    def deconstruct(self):
        return self.__class__.__qualname__, [self.model_name, self.prefix], {}

    def state_forwards(self, app_label, state) -> None:
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        workload = from_state.apps.get_model("workloads", "Workload")
        q = schema_editor.quote_name
        columns = ", ".join(q(model._meta.get_field(name).column) for name in SHARED)
        table, target = q(model._meta.db_table), q(workload._meta.db_table)
        schema_editor.execute(f"INSERT INTO {target} ({q('kind')}, {q('number')}, {columns}) "  # noqa: S608 - quoted names only
                              f"SELECT %s, {q('id')}, {columns} FROM {table} ORDER BY {q('id')}", [self.prefix])
        schema_editor.execute(f"UPDATE {table} SET {q('workload_id')} = (SELECT w.{q('uid')} FROM {target} w "  # noqa: S608
                              f"WHERE w.{q('kind')} = %s AND w.{q('number')} = {table}.{q('id')})", [self.prefix])
        _check_now(schema_editor)

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        workload = to_state.apps.get_model("workloads", "Workload")
        q = schema_editor.quote_name
        columns = [q(model._meta.get_field(name).column) for name in SHARED]
        table, target = q(model._meta.db_table), q(workload._meta.db_table)
        schema_editor.execute(f"UPDATE {table} SET ({', '.join(columns)}) = (SELECT {', '.join(columns)} "  # noqa: S608
                              f"FROM {target} w WHERE w.{q('uid')} = {table}.{q('workload_id')})")
        schema_editor.execute(f"UPDATE {table} SET {q('workload_id')} = NULL")  # noqa: S608
        schema_editor.execute(f"DELETE FROM {target} WHERE {q('kind')} = %s", [self.prefix])  # noqa: S608
        _check_now(schema_editor)


def _check_now(schema_editor) -> None:
    """PostgreSQL checks the foreign keys of rows just written at commit (they are deferred); a table with
    such checks pending cannot be altered, and the next operations alter these tables: check them now."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")

    def describe(self) -> str:
        return f"Copy every {self.model_name} to the one Workload table"


class AlterModelBases(Operation):
    """Set a model's bases in the migration state (nothing in the database)."""

    reduces_to_sql = False

    def __init__(self, model_name: str, bases: tuple) -> None:
        self.model_name, self.bases = model_name, bases

    def deconstruct(self):
        return self.__class__.__qualname__, [self.model_name, self.bases], {}

    def state_forwards(self, app_label, state) -> None:
        state.models[app_label, self.model_name].bases = self.bases
        state.reload_model(app_label, self.model_name, delay=True)

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        pass

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        pass

    def describe(self) -> str:
        return f"{self.model_name} inherits {', '.join(map(str, self.bases))}"


class LiveNames(Operation):
    """A kind's names unique among its workloads not in ``final_states``: a partial unique index on the one table."""

    reduces_to_sql = True

    def __init__(self, name: str, prefix: str, final_states: tuple[str, ...]) -> None:
        self.name, self.prefix, self.final_states = name, prefix, tuple(final_states)

    def deconstruct(self):
        return self.__class__.__qualname__, [self.name, self.prefix, self.final_states], {}

    def state_forwards(self, app_label, state) -> None:
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        q, value = schema_editor.quote_name, schema_editor.quote_value
        finals = ", ".join(value(state) for state in self.final_states)
        schema_editor.execute(
            f"CREATE UNIQUE INDEX {q(self.name)} ON {q('workloads_workload')} ({q('team_id')}, {q('name')}) "
            f"WHERE {q('kind')} = {value(self.prefix)} AND {q('state')} NOT IN ({finals})")

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(self.name)}")

    def describe(self) -> str:
        return f"Names of unfinished {self.prefix} workloads are unique per team ({self.name})"


class LiveNamesFinal(Operation):
    """A kind's index of unfinished names (:class:`LiveNames`) made again for the final states it has now,
    ``final_states`` (it had ``before``): a kind that gains a final state frees a name in it too, as its checks do."""

    reduces_to_sql = True

    def __init__(self, name: str, prefix: str, before: tuple[str, ...], final_states: tuple[str, ...]) -> None:
        self.name, self.prefix, self.before, self.final_states = name, prefix, tuple(before), tuple(final_states)

    def deconstruct(self):
        return self.__class__.__qualname__, [self.name, self.prefix, self.before, self.final_states], {}

    def state_forwards(self, app_label, state) -> None:
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        old, new = LiveNames(self.name, self.prefix, self.before), LiveNames(self.name, self.prefix, self.final_states)
        old.database_backwards(app_label, schema_editor, from_state, to_state)
        new.database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        old, new = LiveNames(self.name, self.prefix, self.before), LiveNames(self.name, self.prefix, self.final_states)
        new.database_backwards(app_label, schema_editor, from_state, to_state)
        old.database_forwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Names of {self.prefix} workloads in {', '.join(self.final_states)} are free again ({self.name})"


def _nullable() -> list[tuple[str, models.Field]]:
    """The shared columns that are not null, as nullable (the fields they were, but for ``null``)."""
    return [
        ("team", models.ForeignKey(null=True, on_delete=models.PROTECT, related_name="+", to="portal.team")),
        ("created_by", models.ForeignKey(null=True, on_delete=models.PROTECT, related_name="+",
                                         to=settings.AUTH_USER_MODEL)),
        ("flavor", models.ForeignKey(null=True, on_delete=models.PROTECT, related_name="+", to="quotas.gpuflavor")),
        ("name", models.CharField(max_length=40, null=True)),
        ("spot", models.BooleanField(null=True)),
        ("state", models.CharField(max_length=16, null=True)),
        ("reason", models.CharField(blank=True, max_length=500, null=True)),
        ("reason_code", models.CharField(blank=True, max_length=32, null=True)),
        ("created_at", models.DateTimeField(null=True)),
        ("apply_attempts", models.PositiveSmallIntegerField(null=True)),
        ("billed_cost", models.DecimalField(decimal_places=10, max_digits=20, null=True)),
        ("preemptions", models.PositiveSmallIntegerField(null=True)),
        ("attempt", models.PositiveIntegerField(null=True)),
        ("placement_reason", models.CharField(blank=True, max_length=300, null=True)),
        ("cluster_selector", models.JSONField(blank=True, null=True)),
    ]


def move_to_workload_table(model_name: str, prefix: str, final_states: tuple[str, ...] = (),
                           live_names: str | None = None) -> list[Operation]:
    """The operations that move the kind ``model_name`` (refs ``prefix:<id>``) to the one table (module docstring);
    ``live_names``: the name of its unique index of unfinished names (None: a kind whose names may repeat)."""
    link = models.OneToOneField(null=True, on_delete=models.CASCADE, to="workloads.workload")
    return [
        migrations.AddField(model_name=model_name, name="workload", field=link),
        *(migrations.AlterField(model_name=model_name, name=name, field=field) for name, field in _nullable()),
        CopyToWorkloadTable(model_name, prefix),
        *(migrations.RemoveField(model_name=model_name, name=name) for name in SHARED),
        migrations.AlterField(model_name=model_name, name="workload", field=models.OneToOneField(
            on_delete=models.CASCADE, parent_link=True, to="workloads.workload")),
        migrations.SeparateDatabaseAndState(state_operations=[migrations.AlterField(
            model_name=model_name, name="id", field=models.BigAutoField(primary_key=True, serialize=False))]),
        AlterModelBases(model_name, ("workloads.workload",)),
        migrations.AlterModelOptions(name=model_name, options={}),  # its ordering is the one table's now
        *([LiveNames(live_names, prefix, final_states)] if live_names else []),
    ]
