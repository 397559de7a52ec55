"""The test modules CI runs a second time, on SQLite (scripts/test.sh prints them for that pass).

Plain data with no imports: the test script reads it before any Django settings are loaded, and
the SQLite pass collects these files only instead of every module of the suite.
"""

#: The test modules marked ``sqlite``: CI runs them again on SQLite (scripts/test.sh), the database
#: `make run` uses by default. They are the tests of the SQL that differs per database — the
#: statements built per ``connection.vendor`` and the raw SQL beside them — and of the local
#: default path (SQLite settings, the database cache, the filesystem broker, the demo's seed).
#: Every other test runs once, on PostgreSQL: the ORM's queries are Django's to keep portable.
#: A module whose tests set every variable the settings read (tests/portal/test_settings.py: its
#: settings are loaded, and its ``manage.py check`` processes started, under an environment of its
#: own) runs the same on both passes: it is not here (its four processes were 105 of the SQLite
#: pass's 660 worker-seconds).
SQLITE_MODULES = {
    "tests/workloads/test_one_table_migration.py": "the rows' move to the one table and back (workloads/migrations/_one_table.py's SQL)",
    "tests/core/test_rawsql.py": "reading raw rows back (dates, decimals) as each database returns them",
    "tests/core/test_writes.py": "writes run together: one statement of data-modifying CTEs on PostgreSQL, one each on SQLite",
    "tests/quotas/test_admission.py": "admission's facts, insert and release statements (quotas.admission._hot_sql)",
    "tests/quotas/test_resize.py": "growth and shrink through the same statements",
    "tests/quotas/test_cohorts.py": "the locked admit that borrows, the cohort's queue",
    "tests/billing/test_ledger.py": "the ledger's upsert and the closed spend (billing.ledger._upsert_sql, _closed_spend_sql)",
    "tests/quotas/test_services.py": "budget summaries over the ledger",
    "tests/billing/test_projection.py": "the month-end projection: spend + committed money",
    "tests/quotas/test_api.py": "the usage report's sums by day, flavor and workload",
    "tests/billing/test_segments.py": "open segments and groups (billing.segments's SQL)",
    "tests/billing/test_open_spend.py": "the month's spend with open segments",
    "tests/billing/test_hold_rate.py": "a hold's rate in the ledger's SQL (billing.ledger._priced) against the rule",
    "tests/workloads/test_budget_forecast.py": "committed money (billing.segments._commitments_sql)",
    "tests/reservations/test_api.py": "reserved windows' committed money (billing.ledger._commitments_sql's UNION ALL)",
    "tests/reservations/test_window_admission.py": "admission's facts with a team's reserved windows (the hot path's EXISTS on them)",
    "tests/reservations/test_window_money.py": "a window's idle units in the ledger (its upsert) and work in a window committing nothing",
    "tests/workloads/test_cost_timeline.py": "the ledger against a scripted timeline",
    "tests/jobs/test_reconcile.py": "the reconcile cycle's batched steady update (workloads.cycle.reconcile._steady_sql)",
    "tests/jobs/test_services.py": "submit, run again and the preview on the local default",
    "tests/jobs/test_idempotency_failures.py": "Idempotency-Key's row lock and transaction on SQLite's IMMEDIATE transactions",
    "tests/front/test_seed_demo.py": "the demo `make run` seeds",
    "tests/front/test_usage_page.py": "the Usage page's sums and charts",
    "tests/portal/test_health.py": "the readiness probe's database and broker checks",
    "tests/portal/test_smoke.py": "the project boots and answers on the local default",
    "tests/test_bad_input.py": "input each database refuses in its own way (integers past 64 bits, NUL)",
    "tests/inference/test_traffic.py": "a traffic window's start in Unix seconds, computed per database (inference.traffic._Epoch)",
    "tests/inference/test_cold_starts_flow.py": "a timeline's stages merged keeping the first instants (|| on PostgreSQL, json_patch on SQLite)",
    "tests/test_db_snapshot.py": "the browser tests' demo snapshot: CREATE TABLE … AS, INSERT … SELECT, the sequences after",
    "tests/sweeps/test_storage.py": "Optuna's study in the portal's tables: JSON columns (key order, NaN, inf) and the "
                                    "row locks each database takes its own way, under Optuna's conformance suite",
}
