#!/usr/bin/env bash
# Start Slipway locally: web (gunicorn) + Celery worker + Celery beat, on the simulated
# GPU cluster, with demo teams and data. Ctrl-C (or SIGTERM) stops all three; the script
# then exits 0.
#
#   scripts/run.sh [PORT]     (or PORT=9000 scripts/run.sh; make run PORT=9000) — default 8000
#
# Every address it prints (and seed_demo prints) is the one gunicorn really listens on: the
# port is checked free before anything starts, and the URL is printed once /healthz answers.
set -euo pipefail
port="${1:-${PORT:-8000}}"
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=portal.settings
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
HOST=127.0.0.1
mkdir -p var/log

if ! [[ "$port" =~ ^[0-9]+$ ]] || (( port < 1 || port > 65535 )); then
  echo "error: the port must be a number from 1 to 65535, got '$port'" >&2
  exit 2
fi
# A port already taken would make gunicorn exit after the banner below claimed it serves there.
if ! "$PY" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))' "$HOST" "$port" 2>/dev/null; then
  echo "error: port $port on $HOST is in use; choose another: make run PORT=8001" >&2
  exit 1
fi
export PORT="$port"   # seed_demo prints its links with it
url="http://$HOST:$port/"

"$PY" manage.py migrate --noinput
"$PY" manage.py seed_demo --url "$url"

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping Slipway…"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
# Ctrl-C or a SIGTERM (`make run &` then `kill`) is the orderly way to stop: stop the three,
# wait for them and exit 0, so make does not report "Error 130/143" for it. Any other exit
# (a process died, a failed step) keeps its own status.
stopped() {
  cleanup
  exit 0
}
trap stopped INT TERM
trap cleanup EXIT

"$VENV/bin/celery" -A portal worker -Q default,cluster,reconcile --concurrency 2 --loglevel INFO \
  >var/log/worker.log 2>&1 &
pids+=($!)
"$VENV/bin/celery" -A portal beat --loglevel INFO >var/log/beat.log 2>&1 &
pids+=($!)
"$VENV/bin/gunicorn" portal.wsgi --config gunicorn.conf.py --bind "$HOST:$port" --workers 2 --threads 4 --access-logfile - \
  >var/log/web.log 2>&1 &
web=$!
pids+=("$web")

# Announce the address only once the server answers there.
ready=
for _ in $(seq 1 120); do
  if ! kill -0 "$web" 2>/dev/null; then
    echo "error: the web server exited before it listened on $url; see var/log/web.log" >&2
    exit 1
  fi
  if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "healthz", timeout=1)' "$url" \
      2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.5
done
[[ -n "$ready" ]] || echo "warning: $url did not answer within 60 s; see var/log/web.log" >&2

cat <<MSG

  Slipway is running:  $url
  Demo logins are printed above (seed_demo); admin console at ${url}admin/
  Logs: var/log/web.log, var/log/worker.log, var/log/beat.log — Ctrl-C stops everything.

MSG
# Stop everything as soon as any of the three dies, so a crash is not hidden.
wait -n "${pids[@]}"
echo "a Slipway process exited; see var/log/" >&2
exit 1
