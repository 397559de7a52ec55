#!/usr/bin/env bash
# Start Slipway locally: web (gunicorn) + Celery worker + notification worker + Celery beat + the workspace proxy
# + the gateway, on the simulated GPU cluster (which lives in the worker and beat), with demo teams and data.
# Ctrl-C (or SIGTERM, SIGHUP) stops all of them within 10 s, leaves no process behind, and the script then
# exits 0 — and so does `make run`. The workspace proxy serves the sandbox's notebooks at
# ws-<id>.localhost on the port after the portal's (SLIPWAY_WORKSPACE_PROXY_PORT): never on the
# portal's host (docs/workspaces.md). The gateway serves the endpoints at
# http://127.0.0.1:<portal's port + 2>/<team>/<endpoint>/… (SLIPWAY_GATEWAY_PORT; docs/serving.md).
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
# The settings keep their state under SLIPWAY_VAR_DIR (default var/); the logs go beside it.
LOG_DIR="${SLIPWAY_VAR_DIR:-var}/log"
mkdir -p "$LOG_DIR"
# How long the services get to stop by themselves before they are killed: with the 10 s that
# Ctrl-C promises, a worker in warm shutdown on a long task must not hold the stop up.
STOP_GRACE_SECONDS="${STOP_GRACE_SECONDS:-6}"

# Under `make run` (or any parent in the terminal's foreground group) a terminal's Ctrl-C signals the
# whole group: make too, which then dies of that SIGINT itself once its child is done (GNU make re-raises
# it: exit 130, "Error 130" for a script), whatever this script does. So, where it shares the terminal's
# foreground group with its parent, the script moves to a group of its own and takes the terminal
# (setpgid and tcsetpgrp, which bash has no builtin for: Python's, then back to bash by exec, the same
# process): Ctrl-C reaches this script only, which stops everything and exits 0, and make exits 0 with
# it. The terminal goes back to the parent's group whenever the script exits (give_back_terminal).
if [[ -z "${SLIPWAY_RUN_GROUP_CHECKED:-}" && -t 0 && -x "$PY" ]]; then
  export SLIPWAY_RUN_GROUP_CHECKED=1
  exec "$PY" -c 'import os, signal, sys
parent = os.getpgrp()
try:
    foreground = os.tcgetpgrp(0) == parent
except OSError:
    foreground = False
if foreground and os.getpid() != parent:
    os.setpgid(0, 0)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # not yet in the foreground: taking the terminal is allowed
    os.tcsetpgrp(0, os.getpgrp())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.environ["SLIPWAY_RUN_GIVE_TERMINAL_TO"] = str(parent)
os.execv(sys.argv[1], sys.argv[1:])' "$BASH" "$PWD/scripts/run.sh" "$@"
fi
give_back_terminal() {
  [[ -n "${SLIPWAY_RUN_GIVE_TERMINAL_TO:-}" ]] || return 0
  "$PY" -c 'import os, signal, sys
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.tcsetpgrp(0, int(sys.argv[1]))' "$SLIPWAY_RUN_GIVE_TERMINAL_TO" 2>/dev/null || true
  SLIPWAY_RUN_GIVE_TERMINAL_TO=
}
trap give_back_terminal EXIT
# Stopped before any service started (during migrate or seed_demo): nothing to stop, an orderly exit.
trap 'echo; echo "stopped before Slipway started"; exit 0' INT TERM HUP

if ! [[ "$port" =~ ^[0-9]+$ ]] || (( port < 1 || port > 65535 )); then
  echo "error: the port must be a number from 1 to 65535, got '$port'" >&2
  exit 2
fi
proxy_port="${SLIPWAY_WORKSPACE_PROXY_PORT:-$((port + 1))}"
if ! [[ "$proxy_port" =~ ^[0-9]+$ ]] || (( proxy_port < 1 || proxy_port > 65535 || proxy_port == port )); then
  echo "error: the workspace proxy's port must be a number from 1 to 65535 other than $port, got '$proxy_port'" >&2
  exit 2
fi
gateway_port="${SLIPWAY_GATEWAY_PORT:-$((port + 2))}"
if ! [[ "$gateway_port" =~ ^[0-9]+$ ]] || (( gateway_port < 1 || gateway_port > 65535 || gateway_port == port \
    || gateway_port == proxy_port )); then
  echo "error: the gateway's port must be a number from 1 to 65535 other than $port and $proxy_port, got '$gateway_port'" >&2
  exit 2
fi
# A port already taken would make gunicorn (or the proxy, the gateway) exit after the banner below claimed it serves there.
for p in "$port" "$proxy_port" "$gateway_port"; do
  if ! "$PY" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))' "$HOST" "$p" 2>/dev/null; then
    echo "error: port $p on $HOST is in use; choose another: make run PORT=$((port + 3))" >&2
    exit 1
  fi
done
export PORT="$port"   # seed_demo prints its links with it
url="http://$HOST:$port/"
# Every process reads where the sandbox's workspaces are served: the portal's Open sends browsers there.
export SLIPWAY_WORKSPACE_PROXY_PORT="$proxy_port"
# The links in e-mails and webhooks (the worker sends them) start with the address printed here,
# unless the install says where people reach the portal.
export SLIPWAY_PORTAL_URL="${SLIPWAY_PORTAL_URL:-${url%/}}"
# The demo's reservation starts about twelve minutes after seeding (reservations/demo.py): a lead of three minutes
# (rather than the default 15) lets its idle units be lent first and taken back on the way, as in production.
export SLIPWAY_RESERVATION_LEAD_MINUTES="${SLIPWAY_RESERVATION_LEAD_MINUTES:-3}"
# The endpoints' public base URL, which the portal shows, is the gateway started below unless the install says.
export SLIPWAY_GATEWAY_URL="${SLIPWAY_GATEWAY_URL:-http://$HOST:$gateway_port}"

"$PY" manage.py migrate --noinput
"$PY" manage.py seed_demo --url "$url"
# The demo endpoint's key (for the load generator below) and its canary, which the canary rule rolls back.
demo_key="${SLIPWAY_VAR_DIR:-var}/demo-gateway-key"
"$PY" manage.py demo_serving --key-file "$demo_key"
# The demo's later runs (its reclaim) are told in minutes from when the portal first answers, not from
# seeding: held until then (the clock starts below), however long the services take to start.
"$PY" manage.py demo_clock hold

pids=()
alive() {
  local pid
  for pid in "${pids[@]}"; do
    kill -0 -- "-$pid" 2>/dev/null && return 0
  done
  return 1
}
# Each service runs in its own process group (set -m below), so a signal reaches a whole
# service — gunicorn's workers, Celery's pool processes — and nothing outside it.
cleanup() {
  trap - INT TERM HUP EXIT
  echo; echo "stopping Slipway…"
  local pid deadline
  # 1. Ask each service to stop (gunicorn: graceful; Celery: warm shutdown).
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # 2. Give them STOP_GRACE_SECONDS. A worker in warm shutdown waits for its running task and
  #    ignores a second SIGTERM, so waiting for it alone can take as long as that task.
  deadline=$((SECONDS + STOP_GRACE_SECONDS))
  while alive && (( SECONDS < deadline )); do sleep 0.1; done
  # 3. Kill what is left, whole groups, so no pool process outlives its parent. A task cut short
  #    is not lost: tasks are acknowledged late and the reconciler re-drives what they were doing.
  if alive; then
    echo "killing what did not stop within ${STOP_GRACE_SECONDS} s" >&2
    for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    # SIGKILL is delivered at once but a process takes a moment to go: exit only once it has.
    deadline=$((SECONDS + 2))
    while alive && (( SECONDS < deadline )); do sleep 0.1; done
  fi
  wait 2>/dev/null || true
  give_back_terminal
}
# Ctrl-C, a SIGTERM (`make run &` then `kill`) or a closed terminal (SIGHUP) is the orderly way
# to stop: stop the services, wait for them and exit 0, so make does not report "Error 130/143" for
# it. Any other exit (a process died, a failed step) keeps its own status. A terminal's Ctrl-C
# reaches only this script (the services are in groups of their own), so every service gets
# exactly one stop request, from cleanup, instead of a SIGINT and then a SIGTERM.
stopped() {
  cleanup
  exit 0
}
trap stopped INT TERM HUP
trap cleanup EXIT

set -m  # each background service in a process group of its own (see cleanup)
"$VENV/bin/celery" -A portal worker -Q default,cluster,reconcile --concurrency 2 --loglevel INFO \
  >"$LOG_DIR/worker.log" 2>&1 &
pids+=($!)
# Notifications (fan-outs, e-mails, webhooks) on a worker of their own: a webhook that never answers holds its
# thread for the webhook timeout, and would otherwise hold a process the reconcile cycle and the canary rule need
# (docs/notifications.md). Threads: a delivery waits on the network, not the CPU.
"$VENV/bin/celery" -A portal worker -Q notify -P threads --concurrency 8 -n notify@%h --loglevel INFO \
  >"$LOG_DIR/notify-worker.log" 2>&1 &
pids+=($!)
"$VENV/bin/celery" -A portal beat --loglevel INFO >"$LOG_DIR/beat.log" 2>&1 &
pids+=($!)
# The proxy sends a browser without the workspace's cookie to the portal's Open, at the address printed below.
# Without the slipway[workspaces] extra no workspace can be opened on this machine, and none is served.
if "$PY" -c 'import aiohttp, jupyter_server' 2>/dev/null; then
  "$PY" manage.py workspace_proxy --port "$proxy_port" --portal-url "http://$HOST:$port" >"$LOG_DIR/proxy.log" 2>&1 &
  pids+=($!)
fi
# The gateway: the endpoints' data plane (keys, limits, streaming), reading routes from the database.
"$PY" manage.py gateway --bind "$HOST:$gateway_port" >"$LOG_DIR/gateway.log" 2>&1 &
pids+=($!)
# Live traffic for the demo endpoint, through the gateway with the demo key (docs/serving.md "In the demo").
if [[ -s "$demo_key" ]]; then
  "$PY" manage.py serving_load --gateway "$SLIPWAY_GATEWAY_URL" --key-file "$demo_key" \
    --endpoint ml-research/llama-chat --rate 4 >"$LOG_DIR/load.log" 2>&1 &
  pids+=($!)
fi
"$VENV/bin/gunicorn" portal.wsgi --config gunicorn.conf.py --bind "$HOST:$port" --workers 2 --threads 4 --access-logfile - \
  >"$LOG_DIR/web.log" 2>&1 &
web=$!
pids+=("$web")
set +m  # the commands below stay in this script's group, and get a terminal's Ctrl-C with it

# Announce the address only once the server answers there.
ready=
for _ in $(seq 1 120); do
  if ! kill -0 "$web" 2>/dev/null; then
    echo "error: the web server exited before it listened on $url; see $LOG_DIR/web.log" >&2
    exit 1
  fi
  if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "healthz", timeout=1)' "$url" \
      2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.5
done
[[ -n "$ready" ]] || echo "warning: $url did not answer within 60 s; see $LOG_DIR/web.log" >&2
"$PY" manage.py demo_clock start

# printf is a builtin: once the banner is out, the services are this script's only children
# (`cat <<MSG` forked one more, still alive for a moment after its last line was read).
printf '\n  Slipway is running:  %s\n  Demo logins are printed above (seed_demo); admin console at %sadmin/\n' "$url" "$url"
printf '  Workspaces open at http://ws-<id>.localhost:%s/ (the workspace proxy)\n' "$proxy_port"
printf '  Endpoints answer at %s/<team>/<endpoint>/… (the gateway)\n' "$SLIPWAY_GATEWAY_URL"
printf '  Logs: %s — Ctrl-C stops everything.\n\n' "$LOG_DIR/web.log, $LOG_DIR/worker.log, $LOG_DIR/notify-worker.log, $LOG_DIR/beat.log, $LOG_DIR/proxy.log, $LOG_DIR/gateway.log, $LOG_DIR/load.log"
# Stop everything as soon as any of the services dies, so a crash is not hidden.
wait -n "${pids[@]}"
echo "a Slipway process exited; see $LOG_DIR/" >&2
exit 1
