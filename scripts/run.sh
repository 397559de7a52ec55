#!/usr/bin/env bash
# Start Slipway locally: web (gunicorn) + Celery worker + Celery beat, on the simulated
# GPU cluster, with demo teams and data. Ctrl-C stops all three.
set -euo pipefail
port="${1:-8000}"
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=portal.settings
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
mkdir -p var/log

"$PY" manage.py migrate --noinput
"$PY" manage.py seed_demo

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping Slipway…"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

"$VENV/bin/celery" -A portal worker -Q default,cluster,reconcile --concurrency 2 --loglevel INFO \
  >var/log/worker.log 2>&1 &
pids+=($!)
"$VENV/bin/celery" -A portal beat --loglevel INFO >var/log/beat.log 2>&1 &
pids+=($!)
"$VENV/bin/gunicorn" portal.wsgi --bind "127.0.0.1:$port" --workers 2 --threads 4 --access-logfile - \
  >var/log/web.log 2>&1 &
pids+=($!)

cat <<MSG

  Slipway is running:  http://127.0.0.1:$port/
  Demo logins are printed above (seed_demo); admin console at http://127.0.0.1:$port/admin/
  Logs: var/log/web.log, var/log/worker.log, var/log/beat.log — Ctrl-C stops everything.

MSG
# Stop everything as soon as any of the three dies, so a crash is not hidden.
wait -n "${pids[@]}"
echo "a Slipway process exited; see var/log/" >&2
exit 1
