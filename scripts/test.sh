#!/usr/bin/env bash
# The test command (make test). With CI=true the suite runs on the real PostgreSQL and
# Redis of the machine and fails, never skips, when either is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export DJANGO_SETTINGS_MODULE=portal.settings
export SLIPWAY_VAR_DIR="${SLIPWAY_VAR_DIR:-$PWD/var/test}"

if [ "${CI:-}" = "true" ]; then
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
  export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
  bash scripts/ensure_chromium.sh
fi

"$VENV/bin/ruff" check .
"$VENV/bin/python" -m pytest "$@"
