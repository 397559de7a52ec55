#!/usr/bin/env bash
# Fetch uPlot (the GPU telemetry charts' library, docs/metrics.md) from the npm registry into
# static/vendor/ (served by Django/whitenoise, never a CDN): its minified script and its stylesheet.
set -euo pipefail
version="${1:?usage: vendor_uplot.sh VERSION}"
command -v npm >/dev/null 2>&1 || { echo "error: npm is needed once to fetch uPlot $version (apt-get install npm)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null 2>&1)
tar -xzf "$tmp"/uplot-"$version".tgz -C "$tmp"
mkdir -p static/vendor
cp "$tmp/package/dist/uPlot.iife.min.js" static/vendor/uplot.min.js
cp "$tmp/package/dist/uPlot.min.css" static/vendor/uplot.min.css
echo "uPlot $version -> static/vendor/uplot.min.js, static/vendor/uplot.min.css"
