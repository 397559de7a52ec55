"""tests/db_snapshot.py: the rows put back are the rows taken, on PostgreSQL and on SQLite (the demo of the browser tests)."""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.core.management.color import no_style
from django.db import connection

from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import TeamQuota
from teams.models import Team
from tests.db_snapshot import TableSnapshot
from tests.factories import make_team
from tests.jobs.conftest import run_payload


def rows(model) -> list[dict]:
    return list(model.objects.order_by("pk").values())


def test_restore_puts_back_the_rows_taken_and_the_ids_go_on_after_them(member, team, quota, published):
    run = submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "env": {"A": "1"}})
    for slug in ("a", "b", "c"):  # ids past 1, whatever the database's sequences were
        make_team(slug, slug.upper())
    snapshot = TableSnapshot("test")
    snapshot.take()
    taken = {model: rows(model) for model in (Team, TeamQuota, TrainingRun)}
    assert taken[TrainingRun] and taken[TeamQuota]
    # Changed, removed and added after the snapshot: all undone.
    TeamQuota.objects.filter(team=team).update(limit=99)
    TrainingRun.objects.filter(pk=run.pk).delete()
    Team.objects.all().delete()
    with connection.cursor() as cursor:  # ids start again at 1, as a test marked reset_sequences=True leaves them
        for statement in connection.ops.sequence_reset_sql(no_style(), [Team]):
            cursor.execute(statement)
    make_team("late", "Late")
    snapshot.restore()
    assert {model: rows(model) for model in (Team, TeamQuota, TrainingRun)} == taken
    # A row made now gets an id past the restored ones (PostgreSQL's sequences are set from them).
    assert make_team("after", "After").pk > max(row["id"] for row in taken[Team])
    snapshot.drop()
    assert not snapshot.taken


def test_restore_replaces_content_types_made_again_under_other_ids(db):
    kept = ContentType.objects.get_for_model(Team).pk
    snapshot = TableSnapshot("test")
    snapshot.take()
    # As a transactional test's flush does: the rows go, post_migrate makes them again with new ids.
    ContentType.objects.all().delete()
    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(Team).pk != kept  # made again, and now cached
    snapshot.restore()
    assert ContentType.objects.get_for_model(Team).pk == kept
    snapshot.drop()
