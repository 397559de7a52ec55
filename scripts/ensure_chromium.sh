#!/usr/bin/env bash
# Browser tests drive Debian's chromium through Playwright (Playwright's own browser
# download cannot work offline). Install it once when missing and we may (root).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "error: browser tests need Debian's chromium: sudo apt-get install chromium" >&2
  exit 1
fi
