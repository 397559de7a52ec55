#!/usr/bin/env bash
# The test command (make test). With CI=true the suite runs on the real PostgreSQL and
# Redis of the machine and fails, never skips, when either is unreachable.
#
# The whole suite (no arguments) is spread over the cores by pytest-xdist: each worker has
# its own test database, Redis database and var directory (tests/settings.py); the tests that
# start processes of their own run in two serial lanes (tests/conftest.py LANES). Two
# workers more than the cores: one holds each lane the whole pass (its tests mostly wait on the
# wall clock: a Celery beat, a grace period), the others take the rest. On the 2-vCPU VM
# (2026-11-29, 5,396 tests, lanes of equal length) the main pass took 855 s with three workers,
# the rest of the suite on one worker beside the lanes (the cores 67-84 % busy for minutes), and
# 801 / 784 s with four. A third lane and a fifth worker (2026-12-01): 938 s against 913 s on the same boot, the
# CPU-bound tests slower (tests/conftest.py LANES). Set TEST_WORKERS to choose how many workers (0: none, one process).
# Arguments go to pytest as they are, in one process (a developer's subset).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export DJANGO_SETTINGS_MODULE=tests.settings
export SLIPWAY_VAR_DIR="${SLIPWAY_VAR_DIR:-$PWD/var/test}"

if [ "${CI:-}" = "true" ]; then
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
  export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
  bash scripts/ensure_chromium.sh
fi

"$VENV/bin/ruff" check .
# Python's own default: compiled modules are kept (in __pycache__, ignored by git). Machines and
# images that set PYTHONDONTWRITEBYTECODE (this VM does) made every xdist worker and every process a
# test starts compile the project's modules again, and pytest rewrite ~600 test modules' asserts again.
unset PYTHONDONTWRITEBYTECODE
began=$SECONDS
options=()
# CI prints the 25 slowest tests, each module's CPU seconds (tests/cpu_time.py: on two busy cores a test's
# duration is mostly its wait for one), the machine's speed that day (the same suite took 1,112 s and 2,721 s on two
# boots of one VM) and the time of each pass (issue 36 measures the suite by them).
if [ "${CI:-}" = "true" ]; then options+=(--durations=25 -p tests.cpu_time); fi
workers="${TEST_WORKERS:-$(( $(nproc) + 2 ))}"
if [ "$#" -eq 0 ] && [ "$workers" != "0" ]; then
  options+=(-n "$workers" --dist loadgroup)
fi
status=0
"$VENV/bin/python" -m pytest "${options[@]}" "$@" || status=$?
echo "== main pass: $((SECONDS - began)) s"
if [ "$status" -ne 0 ]; then exit "$status"; fi

# `make run` uses SQLite (with the database cache and the filesystem broker) unless
# DATABASE_URL says otherwise, and admission, the ledger, billing and the sandbox have SQL
# of their own per database: in CI the tests marked `sqlite` (those statements' tests and the
# local default path's) run again on SQLite.
if [ "${CI:-}" = "true" ] && [ "$#" -eq 0 ]; then
  began=$SECONDS
  echo "== the tests marked sqlite again, on SQLite"
  spread=()
  if [ "$workers" != "0" ]; then spread+=(-n "$workers"); fi
  # Only the listed modules are collected (tests/sqlite_modules.py), not the whole suite.
  mapfile -t modules < <("$VENV/bin/python" -c 'from tests.sqlite_modules import SQLITE_MODULES; print(*SQLITE_MODULES, sep="\n")')
  status=0
  env -u CI DATABASE_URL="sqlite:///$SLIPWAY_VAR_DIR/sqlite-pass.sqlite3" REDIS_URL= \
    "$VENV/bin/python" -m pytest -q "${spread[@]}" -m "sqlite and not postgres and not redis and not browser and not slow" \
    "${modules[@]}" || status=$?
  echo "== SQLite pass: $((SECONDS - began)) s"
  if [ "$status" -ne 0 ]; then exit "$status"; fi
fi
