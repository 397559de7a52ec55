"""Shared fixtures: the standard cast of users, API clients, the browser, and the CI service guard.

With ``CI=true`` the suite must run on PostgreSQL and Redis: if either is unreachable the
session stops with an error instead of skipping the tests that need them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from decimal import Decimal
from functools import partial

import pytest
import redis
from celery.canvas import Signature
from django.conf import settings
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test import Client
from django.test.testcases import LiveServerThread
from django.utils import timezone
from rest_framework.test import APIClient

from portal.celery import app as celery_app
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from teams.services import create_api_token
from tests import db_template
from tests.backends import use_backend
from tests.browser.support import BrowserThread, Remote, save_evidence, watch_for_template_leaks
from tests.factories import add_member, make_team, make_user
from tests.fakes import FakeBackend
from tests.jobs.conftest import submit_run_as
from tests.sqlite_modules import SQLITE_MODULES
from tests.template_leaks import leak_report

IN_CI = os.environ.get("CI", "").lower() == "true"

def redis_url() -> str:
    return os.environ.get("REDIS_URL") or os.environ.get("SLIPWAY_TEST_REDIS_URL") or ""


def redis_reachable(url: str) -> bool:
    if not url:
        return False
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


def pytest_sessionstart(session):
    if not IN_CI:
        return
    engine = settings.DATABASES["default"]["ENGINE"]
    problems = []
    if "postgresql" not in engine:
        problems.append(f"CI must run on PostgreSQL, but DATABASES uses {engine} (set DATABASE_URL)")
    else:
        import psycopg

        db = settings.DATABASES["default"]
        try:
            psycopg.connect(host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"],
                            password=db["PASSWORD"] or None, connect_timeout=3).close()
        except psycopg.Error as exc:
            problems.append(f"PostgreSQL unreachable: {exc}")
    if not redis_reachable(redis_url()):
        problems.append(f"Redis unreachable at {redis_url() or '(REDIS_URL unset)'}")
    if problems:
        pytest.exit("CI services missing:\n  " + "\n  ".join(problems), returncode=3)


#: The tests marked ``slow`` (they start processes of their own — Celery workers, ``make run``, the
#: benchmarks with their scratch databases — or open 64 connections at once) run one at a time in a
#: lane: one xdist worker takes a lane's tests in turn, beside the other lane and the rest of the suite.
#: Two lanes of about equal length: the first is every slow module not listed here, the second these. The
#: lanes share nothing a test holds alone: each worker has its own database, Redis database and var directory
#: (tests/settings.py) and the ports are free ones. The modules that open 64 connections at once (marked
#: ``many_connections``) all run in the second lane, one after another, whatever this list says: PostgreSQL
#: allows 100 in all (the quotas' two races and the booking race; the booking race, once left in the first lane,
#: ran beside the quotas' race: "too many clients", 2026-11-29).
#:
#: History, in seconds of the 2-vCPU VM: one lane held all of them (971 s) and was the whole pass's floor. Two lanes
#: ran 852 and 867 s of a 905 s pass on 2026-12-01 (clean clone, 5,742 tests) while the other tests ended at 904 s:
#: all three the same length, the cores busy. A third lane and a worker for it (same boot, next run): the lanes
#: ended at 529, 650 and 836 s, but the other tests at 930 s and the pass took 938 s — the CPU, not a lane, is the
#: floor, and the fifth process made the CPU-bound tests slower (the startkind proof 87 -> 112 s, ``make run``'s
#: Ctrl-C 65 -> 108 s). So two lanes. The seconds per module are from that run (its load): CI prints each lane's
#: modules with theirs (tests/cpu_time.py): move a module when one lane nears the pass's time. The TrainJob e2e
#: (98 s) moved to the first lane when the pools' e2e stopped waiting out a minute's backoff (-50 s); the next clean
#: clone's lanes ran 903 and 817 s (the other tests ended at 940 s), and the gateway's processes (44 s) came here.
LANES = {
    "processes-2": {
        "tests/test_benchmarks.py": "184 s: scratch databases copied from one template, bench/api.py's port",
        "tests/workloads/test_startkind.py": "130 s: the scaffold, its linter and migrations check, its tests in a pytest",
        "tests/portal/test_run_ctrl_c.py": "108 s: one make run, one Ctrl-C",
        "tests/e2e/test_serving_e2e.py": "106 s: the gateway, canary and wake-from-zero story",
        "tests/notifications/test_worker.py": "69 s",
        "tests/e2e/test_endpoints_e2e.py": "53 s",
        "tests/e2e/test_run_metrics_e2e.py": "45 s",
        "tests/sandbox/test_engines.py": "28 s",
        "tests/sandbox/test_shared_state.py": "21 s",
        "tests/test_api_walkthrough.py": "21 s",
        "tests/sandbox/test_canary_engines.py": "21 s",
        "tests/sandbox/test_engine.py": "20 s",
        "tests/inference/test_serving_load.py": "15 s",
        "tests/gateway/test_gateway.py": "44 s: two real gateway processes (manage.py gateway)",
    },
}


def lane(item) -> str:
    """The xdist group of a ``slow`` test: its serial lane (the second for every ``many_connections`` one)."""
    if "many_connections" in item.keywords:
        return "processes-2"
    module = item.nodeid.split("::")[0]
    return next((name for name, modules in LANES.items() if module in modules), "processes")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """Outside CI, skip (with the reason) tests whose service is absent; in CI never skip.

    The modules of :data:`SQLITE_MODULES` are marked ``sqlite``.

    Under pytest-xdist (``--dist loadgroup``) the ``slow`` tests run in two serial lanes
    (:data:`LANES`); every other test is spread over the workers. xdist hands out the largest
    groups first, so each lane starts at once on a worker of its own.
    """
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(pytest.mark.xdist_group(lane(item)))
        if item.nodeid.split("::")[0] in SQLITE_MODULES:
            item.add_marker(pytest.mark.sqlite)

    if IN_CI:
        return
    on_postgres = "postgresql" in settings.DATABASES["default"]["ENGINE"]
    have_redis = redis_reachable(redis_url())
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL (CI does)"))
        if "redis" in item.keywords and not have_redis:
            item.add_marker(pytest.mark.skip(reason="needs Redis: set REDIS_URL (CI does)"))


class NoDelayServer(ThreadedWSGIServer):
    """The live server, answering without Nagle's delay (``TCP_NODELAY`` on each connection).

    Django's test server writes a response's status line, headers and body in separate small
    writes; with Nagle's algorithm on, each write after the first waited for the client's delayed
    acknowledgement, about 40 ms per request. Most of every live-server test's time went there:
    the schema fuzz (4,729 requests) took 312 s with it and 109 s without, the same requests.
    gunicorn, which serves Slipway outside the tests, sets ``TCP_NODELAY`` itself.
    """

    def get_request(self):
        connection, address = super().get_request()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


def delete_flush(original):
    """PostgreSQL's flush between transactional tests as ``DELETE`` per table instead of one ``TRUNCATE``.

    pytest-django empties every table after each transactional test (264 of them: the e2e, live-server
    and concurrency tests). A ``TRUNCATE`` of the ~110 tables gives each table, index and TOAST table a
    new file and unlinks the old: 1.2 s a flush on the loaded 2-vCPU VM (cProfile), where deleting the
    few rows a test left takes milliseconds. The tables end as empty, and the id sequences go on as
    before (the flush never restarted them); every foreign key Django creates on PostgreSQL is
    ``DEFERRABLE INITIALLY DEFERRED``, so the order of the deletes does not matter inside the flush's
    transaction. A flush that restarts the sequences or cascades keeps Django's own statement.

    The order still matters to processes writing beside the flush (a test's gateways add their counts every
    2 s): referenced tables go first (:func:`parents_first`). A row a writer adds to a referencing table
    then either commits before the referenced row's delete (which waits for it) and is swept by its own
    table's later delete, or waits for the flush and is refused — never left pointing at a deleted row,
    which failed the flush's commit (an endpoint's traffic row written between the two deletes). A writer
    holding rows the flush deletes while it waits for one the flush deleted before is a deadlock PostgreSQL
    ends by failing one side (once in a CI run: a gateway adding counts to its traffic row): the flush is
    tried again (:func:`retried_flush`), and then finds the writer's rows committed and deletes them too.
    """

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET CONSTRAINTS ALL DEFERRED",
                *(f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))}"
                  for table in parents_first(tables))]

    return sql_flush


#: SQLSTATEs of a flush that lost to a process writing beside it: a deadlock, a row left referencing a
#: deleted one (a writer's, committed between two deletes).
FLUSH_RACES = {"40P01", "23503"}


def retried_flush(original):
    """``execute_sql_flush`` tried again, up to three times, when it lost a race to a writer (see delete_flush)."""
    from django.db import DatabaseError

    def execute_sql_flush(self, sql_list):
        for attempt in range(3):
            try:
                return original(self, sql_list)
            except DatabaseError as exc:
                if attempt == 2 or getattr(exc.__cause__, "sqlstate", None) not in FLUSH_RACES:
                    raise

    return execute_sql_flush


def parents_first(tables) -> list[str]:
    """``tables`` ordered so that a table comes after every table its foreign keys reference (self-references
    left out; a cycle of two or more tables, should one appear, is broken where it is met)."""
    from django.apps import apps

    references: dict[str, set[str]] = {}
    for model in apps.get_models(include_auto_created=True):
        references.setdefault(model._meta.db_table, set()).update(
            field.related_model._meta.db_table for field in model._meta.concrete_fields
            if field.is_relation and field.related_model is not None and field.related_model is not model)
    ordered: list[str] = []
    placed: set[str] = set()

    def place(table: str, path: frozenset = frozenset()) -> None:
        if table in placed or table in path:
            return
        for parent in sorted(references.get(table, ())):
            place(parent, path | {table})
        placed.add(table)
        ordered.append(table)

    wanted = set(tables)
    for table in sorted(wanted):
        place(table)
    return [table for table in ordered if table in wanted]


def pytest_configure(config):
    LiveServerThread.server_class = NoDelayServer
    if _is_xdist_controller(config):
        db_template.name_the_template(settings.DATABASES["default"])
    if not hasattr(config, "workerinput"):  # the controller, or the one process without xdist
        config._slipway_named_migrated_sqlite = db_template.name_the_migrated_sqlite()
    from django.db.backends.postgresql.operations import DatabaseOperations

    DatabaseOperations.sql_flush = delete_flush(DatabaseOperations.sql_flush)
    DatabaseOperations.execute_sql_flush = retried_flush(DatabaseOperations.execute_sql_flush)


def _is_xdist_controller(config) -> bool:
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_unconfigure(config):
    if _is_xdist_controller(config):
        db_template.drop_template(settings.DATABASES["default"])
    if getattr(config, "_slipway_named_migrated_sqlite", False):
        db_template.remove_the_migrated_sqlite()


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_use_migrations,
                    django_db_keepdb, django_db_createdb, django_db_modify_db_settings):
    """Under xdist, this worker's test database is a copy of the run's one migrated template
    (tests/db_template.py); without a template, pytest-django's own setup, unchanged.

    A pytest that a test of the suite starts (``manage.py startkind``'s proof runs the scaffolded kind's tests in one)
    inherits the run's template in its environment: it copies it too, then migrates what its checkout adds (the new
    kind's app), instead of migrating a database from nothing (14-22 s of a core on the 2-vCPU VM)."""
    from django.core.management import call_command
    from django.db import connections
    from pytest_django import fixtures

    db = settings.DATABASES["default"]
    inherited = not hasattr(request.config, "workerinput") and not _is_xdist_controller(request.config)
    if not (db_template.template() and django_db_use_migrations and not django_db_keepdb):
        yield from fixtures.django_db_setup.__wrapped__(
            request, django_test_environment, django_db_blocker, django_db_use_migrations, django_db_keepdb,
            django_db_createdb, django_db_modify_db_settings)
        return
    connection = connections["default"]
    base = db["NAME"]

    def point_at(name: str) -> None:
        connection.close()
        db["NAME"] = connection.settings_dict["NAME"] = name

    def migrate_into(name: str) -> None:
        # What Django's create_test_db does after creating the database.
        point_at(name)
        call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
        call_command("createcachetable", verbosity=0)
        point_at(base)

    if db_template.is_sqlite(db):
        with django_db_blocker.unblock():
            path = db_template.sqlite_template(migrate_into)
            # The name Django gives a worker's in-memory test database (kept open: Django never closes it).
            point_at(connection.creation._get_test_db_name())
            connection.ensure_connection()
            db_template.fill_from_sqlite(path, connection.connection)
            if inherited:
                call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
        yield
        return
    # Django's own name for it: TEST's NAME, which pytest-django sets for an xdist worker, else "test_" + NAME (a
    # pytest started by a test has no TEST NAME: read as it was, None, the copy was a database named "None" and the
    # tests ran in the server's maintenance database "postgres", whatever it held from earlier runs).
    test_name = connection.creation._get_test_db_name()
    with django_db_blocker.unblock():
        db_template.copy_test_database(db, test_name, migrate_into)
        point_at(test_name)
        if inherited:
            call_command("migrate", verbosity=0, interactive=False, run_syncdb=True)
    yield
    with django_db_blocker.unblock():
        point_at(base)
        db_template.drop_database(db, test_name)


@pytest.fixture
def mid_month(monkeypatch):
    """Python's clock (``django.utils.timezone.now``) moved into the middle of the portal's month when the real one
    is near a month's edge; returns its "now".

    For tests whose figures are a month's (spend, budgets, commitments) and that record work hours before or after
    now: near the first of a month, 20 hours of usage ending now fall partly in the month before, and what the test
    expects holds only from the second day on. The clock keeps running (an offset, not a frozen instant). Only
    Python's clock moves: not PostgreSQL's ``now()``, not another process's (a worker's, a server's), so it is for
    tests whose code reads the time in the test's process."""
    real = timezone.now
    local = timezone.localtime(real())
    if 3 <= local.day <= 25:
        return real()
    shift = local.replace(day=15) - local
    monkeypatch.setattr(timezone, "now", lambda: real() + shift)
    return timezone.now()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness buys nothing in tests and costs most of their time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_template_syntax_in_pages(monkeypatch):
    """Every HTML page a test client renders is checked for template syntax printed as text.

    Django's client (and DRF's APIClient, built on it) goes through ``Client.request``; a page
    showing ``{#``, ``#}``, ``{%`` or ``%}`` fails the test that rendered it.
    """
    original = Client.request

    def checked(self, **request):
        response = original(self, **request)
        if not getattr(response, "streaming", False) and response.get("Content-Type", "").startswith("text/html"):
            where = f"{request.get('REQUEST_METHOD', 'GET')} {request.get('PATH_INFO', '')} ({response.status_code})"
            problem = leak_report(where, response.content.decode(response.charset or "utf-8", "replace"))
            if problem:
                pytest.fail(problem, pytrace=False)
        return response

    monkeypatch.setattr(Client, "request", checked)


@pytest.fixture
def team(db):
    return make_team("ml-research", "ML Research")


@pytest.fixture
def other_team(db):
    return make_team("vision", "Vision")


@pytest.fixture
def member(team):
    user = make_user("mia")
    add_member(team, user, Role.MEMBER)
    return user


@pytest.fixture
def viewer(team):
    user = make_user("vic")
    add_member(team, user, Role.VIEWER)
    return user


@pytest.fixture
def team_admin(team):
    user = make_user("ada")
    add_member(team, user, Role.ADMIN)
    return user


@pytest.fixture
def outsider(other_team):
    user = make_user("otto")
    add_member(other_team, user, Role.MEMBER)
    return user


@pytest.fixture
def staff(db):
    return make_user("sam", staff=True)


@pytest.fixture
def staff_client(client, staff) -> Client:
    """Django's test client logged in as the staff user (a superuser too: the whole admin console)."""
    client.force_login(staff)
    return client


@pytest.fixture
def api_client_for():
    """``api_client_for(user)``: an APIClient authenticated with a fresh bearer token."""

    def build(user) -> APIClient:
        _token, raw = create_api_token(user, "test")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return build


@pytest.fixture
def api(api_client_for, member):
    return api_client_for(member)


# -- flavors, quota, the cluster seam, task publishes ----------------------------------------


@pytest.fixture
def flavors(db):
    return {f.name: f for f in seed_flavors()}


@pytest.fixture
def quota(team, flavors):
    """The team may hold 8 A100s and 2 L4s; budget 100,000 (the whole quota without runtime limits commits at most
    25,594 in a month: work without a limit counts until the month's end, whatever the date)."""
    return seed_team_quotas(team, {"a100-80gb": 8, "l4": 2}, Decimal("100000"))


@pytest.fixture
def fake_backend(settings):
    """The shared scriptable fake cluster (tests/fakes.py), chosen through the backend setting."""
    return use_backend(settings, FakeBackend())


@pytest.fixture
def published(monkeypatch):
    """Task publishes recorded instead of sent: list of (task name, args)."""
    calls: list[tuple[str, tuple]] = []

    def record(task, *args, **kwargs):
        if isinstance(task, Signature):  # a task with its options set (the cycle's fan-out: its expiry)
            args = (*task.args, *args)
        calls.append((task.name, args))
        return True

    monkeypatch.setattr("core.queueing.publish", record)
    return calls


class Broker:
    """The suite's Redis broker as its lists hold the messages waiting on each of the app's queues."""

    def __init__(self):
        assert settings.CELERY_BROKER_URL.startswith("redis://"), settings.CELERY_BROKER_URL
        self.client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        self.queues = [queue.name for queue in celery_app.conf.task_queues]

    def empty(self) -> None:
        self.client.delete(*self.queues)

    def waiting(self, queue: str) -> list[dict]:
        """The headers (task, argsrepr, expires, …) of the messages waiting on ``queue``, oldest first."""
        return [json.loads(raw)["headers"] for raw in reversed(self.client.lrange(queue, 0, -1))]


@pytest.fixture
def broker() -> Iterator[Broker]:
    """The real broker (mark the test ``redis``), every queue empty before and after."""
    broker = Broker()
    broker.empty()
    yield broker
    broker.empty()


@pytest.fixture
def submit(member, team, quota, published):
    """``submit(**overrides)``: the member's run (``run_payload`` with ``overrides``) submitted through the
    service into the team's quota, its publishes recorded."""
    return partial(submit_run_as, member, team)


@pytest.fixture
def ep_quota(team, flavors):
    """The team may hold 4 A100s and 7 MIG 1g.10gb slices; budget 100,000 (see quota)."""
    return seed_team_quotas(team, {"a100-80gb": 4, "a100-1g.10gb": 7}, Decimal("100000"))


# -- the browser (tests/browser/support.py) ------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test (``item.rep_call``…): the browser fixture keeps evidence of a failed call.

    A failed test that had a Celery worker of its own (tests/e2e/conftest.py ``WorkerProcess``) gets the worker's
    log since the test began as a section of its report: a timeout in CI then says what the worker was doing."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed:
        for name, log in worker_logs(item):
            report.sections.append((f"Captured log of the Celery worker `{name}` ({report.when})", log))
    return report


def worker_logs(item) -> list[tuple[str, str]]:
    """``(fixture name, its log's last 20,000 characters)`` for each worker among the test's fixtures (once each: a
    test's ``worker`` is often its module's worker lent)."""
    e2e = sys.modules.get("tests.e2e.conftest")  # imported once a test uses a worker: none otherwise
    if e2e is None:
        return []
    workers = {}
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, e2e.WorkerProcess) and value.log_path.exists():
            workers.setdefault(id(value), (name, value))
    return [(name, worker.logs()[-20_000:]) for name, worker in workers.values()]


@pytest.fixture(scope="session")
def chromium() -> Iterator[BrowserThread]:
    """One chromium for the session (each xdist worker its own), driven from Playwright's own thread."""
    driven = BrowserThread()
    yield driven
    driven.stop()


@pytest.fixture
def browser(chromium, live_server, request) -> Iterator[Remote]:
    """A page in a fresh browser context of the session's chromium, with the live server running.

    ``@pytest.mark.browser_page(viewport={"width": …, "height": …}, accept_dialogs=True)`` on a test
    or module sets the window (Playwright's default is 1280×720) and says yes to every ``confirm()``
    (by default they are dismissed). On a failure the page's screenshot and HTML go to
    var/test/browser/; a page that showed template syntax fails the test when it closes.
    """
    marker = request.node.get_closest_marker("browser_page")
    options = {"viewport": None, "accept_dialogs": False} | (marker.kwargs if marker else {})
    if marker and (marker.args or set(options) != {"viewport", "accept_dialogs"}):
        raise TypeError(f"browser_page takes viewport= and accept_dialogs= only, not {marker.args} {marker.kwargs}")
    page = chromium.new_page(options["viewport"])
    leaks = chromium.call(watch_for_template_leaks, page.target)
    if options["accept_dialogs"]:
        chromium.call(lambda: page.target.on("dialog", lambda dialog: dialog.accept()))
    try:
        yield page
        save_evidence(request.node, page)
    finally:
        chromium.call(lambda: page.target.context.close())
    assert not leaks, "\n".join(leaks)
