#!/usr/bin/env bash
# Run every benchmark under bench/; each prints its own figures.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
for script in bench/*.py; do
  echo "== $script"
  "$VENV/bin/python" "$script"
  echo
done
