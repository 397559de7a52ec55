#!/usr/bin/env bash
# What the test suite needs from Debian: chromium for the browser tests (Playwright drives
# Debian's build: its own browser download cannot work offline), curl for the API
# walk-through test (tests/test_api_walkthrough.py runs docs/api-walkthrough.md's commands) and
# promtool, from Debian's prometheus package, to check and unit-test the Prometheus rules of
# deploy/prometheus/ (tests/deploy/test_promtool.py). Installs what is missing, once, when we may (root).
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "error: the tests need Debian's ${missing[*]}: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
