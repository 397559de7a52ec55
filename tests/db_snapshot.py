"""A snapshot of the test database's rows, kept in the database itself and put back in one transaction.

Seeding a world through the services (the demo: admission, prices, two weeks of history) costs
seconds; copying its rows back costs milliseconds. :class:`TableSnapshot` copies each model
table that has rows into a table of its own beside it (``CREATE TABLE … AS SELECT``) and puts
them back with ``INSERT … SELECT``: no row leaves the database, so every type (JSON, decimals,
times) comes back exactly as written, on PostgreSQL and on SQLite alike. Foreign keys are
``DEFERRABLE INITIALLY DEFERRED`` on both (Django creates them so), so the order of the tables
does not matter inside the transaction.

The copies are not model tables: a transactional test's flush leaves them alone.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.core.management.color import no_style
from django.db import DEFAULT_DB_ALIAS, connections, transaction


class TableSnapshot:
    """The rows of every non-empty model table at :meth:`take`, put back by :meth:`restore`."""

    def __init__(self, name: str, using: str = DEFAULT_DB_ALIAS) -> None:
        self.name = name
        self.using = using
        self.copies: dict[str, str] = {}  #: model table -> the table holding its rows

    @property
    def taken(self) -> bool:
        return bool(self.copies)

    def take(self) -> None:
        """Copy the rows of every model table that has any (replacing an earlier snapshot of this name)."""
        self.drop()
        connection = connections[self.using]
        quote = connection.ops.quote_name
        tables = sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))
        copies: dict[str, str] = {}
        with transaction.atomic(using=self.using), connection.cursor() as cursor:
            for index, table in enumerate(tables):
                cursor.execute(f"SELECT 1 FROM {quote(table)} LIMIT 1")  # names from introspection
                if cursor.fetchone() is None:
                    continue
                # Numbered, not prefixed: PostgreSQL cuts names at 63 characters.
                copy = f"snapshot_{self.name}_{index}"
                cursor.execute(f"DROP TABLE IF EXISTS {quote(copy)}")
                cursor.execute(f"CREATE TABLE {quote(copy)} AS SELECT * FROM {quote(table)}")
                copies[table] = copy
        self.copies = copies

    def restore(self) -> None:
        """Make each table of the snapshot hold exactly its rows of then; other tables are left as they are.

        After a transactional test's flush the tables ``post_migrate`` fills again (content types,
        permissions) hold the same rows under other ids: they are replaced too, and the cache of
        content types, which would remember the ids of now, is cleared.
        """
        connection = connections[self.using]
        quote = connection.ops.quote_name
        with transaction.atomic(using=self.using), connection.cursor() as cursor:
            for table, copy in self.copies.items():
                cursor.execute(f"DELETE FROM {quote(table)}")
                cursor.execute(f"INSERT INTO {quote(table)} SELECT * FROM {quote(copy)}")
            # PostgreSQL's sequences go on from the highest id put back, as after the seeding.
            models = [model for model in apps.get_models(include_auto_created=True)
                      if model._meta.db_table in self.copies]
            for statement in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(statement)
        ContentType.objects.clear_cache()

    def drop(self) -> None:
        """Remove the copies."""
        if not self.copies:
            return
        connection = connections[self.using]
        with connection.cursor() as cursor:
            for copy in self.copies.values():
                cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(copy)}")
        self.copies = {}
