#!/usr/bin/env bash
# The test command (make test). With CI=true the suite runs on the real PostgreSQL and
# Redis of the machine and fails, never skips, when either is unreachable.
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
began=$SECONDS
# CI prints the 25 slowest tests and the time of each pass (issue 36 measures the suite by them).
durations=()
if [ "${CI:-}" = "true" ]; then durations=(--durations=25); fi
"$VENV/bin/python" -m pytest "${durations[@]}" "$@"
echo "== main pass: $((SECONDS - began)) s"

# `make run` uses SQLite unless DATABASE_URL says otherwise, and admission and the ledger
# have SQL of their own: in CI run the database-facing tests on SQLite too (what needs
# PostgreSQL or Redis, the browser and the worker processes ran above).
if [ "${CI:-}" = "true" ] && [ "$#" -eq 0 ]; then
  echo "== the database-facing tests again, on SQLite"
  env -u CI DATABASE_URL="sqlite:///$SLIPWAY_VAR_DIR/sqlite-pass.sqlite3" REDIS_URL= \
    "$VENV/bin/python" -m pytest -q tests/core tests/teams tests/quotas tests/workloads tests/jobs tests/front tests/portal tests/test_bad_input.py \
    -m "not postgres and not redis and not browser and not slow"
fi
