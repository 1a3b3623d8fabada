#!/usr/bin/env bash
# screenshot_report.sh — render a report.html in headless Chromium and save a PNG,
# to check by eye that the inline SVG charts draw (no network, no scripts).
#
#   tests/screenshot_report.sh [REPORT.html] [OUT.png] [WIDTHxHEIGHT]
#
# With no REPORT it builds one from the hand-made example run in
# tests/data/report/example (invented numbers, see make_example.py) with the
# kvbench in build/. Needs Debian's chromium (apt-get install chromium); CI does
# not run this script.
set -euo pipefail
cd "$(dirname "$0")/.."

report=${1:-}
out=${2:-build/report-screenshot.png}
size=${3:-1200,1600}
size=${size/x/,}

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium_bin" ]; then
  echo "screenshot_report.sh: chromium is not installed (apt-get install chromium)" >&2
  exit 2
fi

if [ -z "$report" ]; then
  kvbench=${KVBENCH:-build/harness/kvbench}
  [ -x "$kvbench" ] || { echo "screenshot_report.sh: build kvbench first (ninja -C build)" >&2; exit 2; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$kvbench" report tests/data/report/example --output "$tmp" >/dev/null
  report=$tmp/report.html
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile" ${tmp:+"$tmp"}' EXIT
mkdir -p "$(dirname "$out")"
"$chromium_bin" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --screenshot="$(realpath -m "$out")" --window-size="$size" \
  "file://$(realpath "$report")" >/dev/null 2>&1
[ -s "$out" ] || { echo "screenshot_report.sh: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
