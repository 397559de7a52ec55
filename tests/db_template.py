"""One migrated database per test run, copied by every xdist worker.

Without it each pytest-xdist worker migrates a test database of its own from nothing (every app's
migrations, paid by each worker at the same time on the same two cores). Here the first worker to
arrive migrates one template database for the whole run, and every worker copies it with
``CREATE DATABASE … TEMPLATE``, a file copy on the server. The copies are what pytest-django would
have made: the same name (``test_<name>_gw<N>``), the same migrations applied, the same rows the
migrations' post-migrate handlers write (content types, permissions) and the cache table.

The run's controller names the template (:func:`name_the_template`, in the environment the workers
inherit, so two runs on one server never share one) and drops it at the end (:func:`drop_template`).
A PostgreSQL advisory lock on the server's maintenance database makes the workers take turns: one
migrates, the others wait and then copy (PostgreSQL refuses to copy a database someone is connected
to). Templates a killed run left behind are dropped by the next run's first worker.

On SQLite (CI's second pass) the template is a file the first worker migrates (the workers take turns on
a file lock), and each worker's test database stays what Django makes it, a shared in-memory database,
filled from the file with SQLite's backup API.

Without xdist, pytest-django sets the database up as before, unless the run was started by a test of another run
that has a template (tests/conftest.py ``django_db_setup``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

#: The advisory lock the workers take turns on (any constant: it names this use of the lock).
LOCK_KEY = 0x511B3A7E
#: Where the controller puts the run's template name for its workers.
ENV = "SLIPWAY_TEST_TEMPLATE_DB"
PREFIX = "tpl_"


def is_postgres(db: dict) -> bool:
    return "postgresql" in db["ENGINE"]


def is_sqlite(db: dict) -> bool:
    return "sqlite" in db["ENGINE"]


def name_the_template(db: dict) -> None:
    """The controller's first step: on PostgreSQL ``tpl_<random>_<database>`` (within PostgreSQL's 63
    bytes), on SQLite a file in a directory of the run's own."""
    if is_postgres(db):
        os.environ[ENV] = f"{PREFIX}{uuid.uuid4().hex[:12]}_{db['NAME']}"[:63]
    elif is_sqlite(db):
        os.environ[ENV] = str(Path(tempfile.mkdtemp(prefix="slipway-test-template-")) / "template.sqlite3")


def template() -> str | None:
    return os.environ.get(ENV)


@contextmanager
def _server(db: dict):
    """An autocommit connection to the server's maintenance database (CREATE/DROP DATABASE run outside
    transactions)."""
    import psycopg

    conn = psycopg.connect(host=db["HOST"] or None, port=db["PORT"] or 5432, user=db["USER"] or None,
                           password=db["PASSWORD"] or None, dbname="postgres", autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def copy_test_database(db: dict, test_name: str, migrate_into) -> None:
    """Create ``test_name`` as a copy of the run's template, migrating the template first if no worker
    has. ``migrate_into(name)`` migrates the empty database of that name."""
    name = template()
    with _server(db) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        try:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
                _drop_other_templates(conn, db["NAME"], keep=name)
                conn.execute(f'CREATE DATABASE "{name}"')
                migrate_into(name)
            _copy(conn, name, test_name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def _copy(conn, template_name: str, name: str) -> None:
    """``name`` as a fresh copy of ``template_name`` (whatever was there before is dropped)."""
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')


def _drop_other_templates(conn, base: str, keep: str) -> None:
    """Templates other runs left behind (a killed run never drops its own). Under the lock, so no worker
    is copying one; a run whose template went while its workers still arrive migrates it again."""
    rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                        [PREFIX + "%", keep]).fetchall()
    for (name,) in rows:
        if name.endswith("_" + base):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_database(db: dict, name: str) -> None:
    with _server(db) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_template(db: dict) -> None:
    """The controller's last step, once every worker is done with the template."""
    if template() and is_postgres(db):
        drop_database(db, template())
    elif template() and is_sqlite(db):
        shutil.rmtree(Path(template()).parent, ignore_errors=True)


def sqlite_template(migrate_into) -> str:
    """The run's SQLite template file, migrated (``migrate_into(path)``) by the first worker to ask.

    Not from :func:`migrated_sqlite`'s file: the test settings' own apps (the test kinds) have migrations that
    the project's depend on (a kind's one-table migration runs before quotas' 0017), so a database migrated
    without them cannot be migrated on with them (Django refuses an inconsistent history)."""
    path = template()
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not Path(path).exists():
            migrate_into(path + ".part")
            os.replace(path + ".part", path)  # complete or absent, should a worker die migrating
    return path


def fill_from_sqlite(path: str, target) -> None:
    """Copy the database file at ``path`` into ``target``, an open sqlite3 connection (SQLite's backup API)."""
    source = sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        source.close()


#: Where the run keeps one SQLite database as ``manage.py migrate`` alone makes it (see :func:`migrated_sqlite`).
MIGRATED_SQLITE_ENV = "SLIPWAY_TEST_MIGRATED_SQLITE"


def name_the_migrated_sqlite() -> bool:
    """Name the run's migrated SQLite file unless the environment names one already. True when this process
    named it, and so removes it at the end."""
    if os.environ.get(MIGRATED_SQLITE_ENV):
        return False
    os.environ[MIGRATED_SQLITE_ENV] = str(Path(tempfile.mkdtemp(prefix="slipway-migrated-")) / "slipway.sqlite3")
    return True


def remove_the_migrated_sqlite() -> None:
    if os.environ.get(MIGRATED_SQLITE_ENV):
        shutil.rmtree(Path(os.environ[MIGRATED_SQLITE_ENV]).parent, ignore_errors=True)


def migrated_sqlite(dest: Path | None = None) -> Path:
    """A SQLite database as ``python manage.py migrate --noinput`` makes it from nothing with the production
    settings (``portal.settings``), what ``make run`` does first on a new machine: copied to ``dest`` when
    given, else the run's file itself (read it, never write it).

    The suite's processes that start from such a database (``make run``'s Ctrl-C, the API walkthrough, the
    sandbox shared across processes, the sandbox tick benchmark) copy one file, made once per run by the
    first test to ask (the others wait on a file lock), instead of each spending ~24 s of a core on the
    same migrations. ``tests/portal/test_migrate_alone.py`` checks what that one migrate made.
    """
    made = Path(os.environ[MIGRATED_SQLITE_ENV])  # named by tests/conftest.py's pytest_configure
    with open(f"{made}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            _migrate_sqlite(made)
    if dest is None:
        return made
    shutil.copyfile(made, dest)
    return Path(dest)


def _migrate_sqlite(path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    part = path.with_name(path.name + ".part")
    part.unlink(missing_ok=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SLIPWAY_TEST_DB_NAME")}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", SLIPWAY_VAR_DIR=str(path.parent / "var"),
               DATABASE_URL=f"sqlite:///{part}")
    result = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise AssertionError(f"manage.py migrate failed ({result.returncode}):\n{result.stderr[-4000:]}")
    os.replace(part, path)  # complete or absent, should the process die migrating


@contextmanager
def database_at(targets):
    """A database of the test's own at ``targets`` (each an app's migration), made by migrating an empty one forward:
    the default connection points there inside the block (a ``MigrationExecutor`` on it is yielded) and back at the
    test database after, and the database is dropped.

    For the tests of a data migration, whose subject is one step of the history, not the way to it. Migrating the
    test database back to an early point made Django render the whole history's model states with every operation
    undone (15-28 s of a core on the 2-vCPU VM, measured per target: quotas 0014 28 s, workloads 0001 28 s, jobs
    0004 15 s); migrating an empty database forward to the same point renders only that point's ancestors (0.2-6 s).
    Only the targets' ancestors exist in it: rows are written with the historical models of its state
    (``executor.loader.project_state(targets).apps``), and no post-migrate handler runs (no content types).

    PostgreSQL: a database on the same server; SQLite: a file in a directory of its own (the in-memory test database
    stays open, unused, meanwhile: closing its last connection would destroy it).
    """
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    db = connection.settings_dict
    base = db["NAME"]
    kept = None
    if is_postgres(db):
        name = f"mig_{uuid.uuid4().hex[:12]}_{base}"[:63]
        with _server(db) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        connection.close()
    else:
        name = str(Path(tempfile.mkdtemp(prefix="slipway-migration-")) / "db.sqlite3")
        kept, connection.connection = connection.connection, None  # an in-memory test database lives while it is open
    db["NAME"] = name
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(targets)
        yield MigrationExecutor(connection)  # a fresh one: its loader knows what is applied now
    finally:
        connection.close()
        db["NAME"] = base
        if is_postgres(db):
            drop_database(db, name)
        else:
            connection.connection = kept
            shutil.rmtree(Path(name).parent, ignore_errors=True)


def early_rows(apps) -> tuple:
    """``(team, user, flavor)``: the rows most tables of :func:`database_at` reference, written with the historical
    models ``apps`` of a state from before the apps split — the team still the portal's, the flavor quotas' — and
    the a100-80gb flavor at 4.10 an hour."""
    team = apps.get_model("portal", "Team").objects.create(slug="vision", name="Vision")
    user = apps.get_model("auth", "User").objects.create(username="vera")
    flavor = apps.get_model("quotas", "GpuFlavor").objects.create(
        name="a100-80gb", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-A100-SXM4-80GB", gpu_memory_gb=80,
        price_per_hour="4.10", spot_price_per_hour="1.64")
    return team, user, flavor
