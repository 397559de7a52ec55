#!/usr/bin/env bash
# Fetch htmx from the npm registry into static/vendor/ (served by Django/whitenoise, never a CDN).
set -euo pipefail
version="${1:?usage: vendor_htmx.sh VERSION}"
command -v npm >/dev/null 2>&1 || { echo "error: npm is needed once to fetch htmx $version (apt-get install npm)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "htmx.org@$version" >/dev/null 2>&1)
tar -xzf "$tmp"/htmx.org-"$version".tgz -C "$tmp"
mkdir -p static/vendor
cp "$tmp/package/dist/htmx.min.js" static/vendor/htmx.min.js
echo "htmx $version -> static/vendor/htmx.min.js"
