#!/usr/bin/env bash
# tools/fuzz.sh — coverage-guided libFuzzer runs of the fuzz targets, and the
# minimized corpus that CI replays (tests/data/fuzz/NAME/).
#
#   tools/fuzz.sh [-n RUNS] [-t SECONDS] [-p PROCS] [-l MAXLEN] [NAME...]
#                                                     (default: every target)
#
# Builds build-fuzz (clang, -Dfuzz=true, ASan+UBSan, every library
# instrumented), then per target, one after another: starts from the seeds
# meson's fuzz_NAME test replays (so both read one list), runs RUNS
# executions (default 10^6) or SECONDS (default 1200), whichever ends first,
# (-p: PROCS processes of RUNS/PROCS each over one corpus, for a slow target)
# merges what it found into a fresh folder with -merge=1 -use_counters=0
# (the smallest set keeping every edge covered: a few dozen files, where
# hit-count features would keep a thousand) and copies that to
# tests/data/fuzz/NAME/ in place of the previous merge. Crashes,
# leaks and timeouts are left as crash-*/leak-*/timeout-* in
# build-fuzz/fuzz-work/NAME/ (the script goes on, and exits 1). Prints one line per target:
# executions, corpus files, seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=1000000 secs=1200 procs=1 maxlen=16384
while getopts n:t:p:l: o; do
  case $o in
    n) runs=$OPTARG ;;
    t) secs=$OPTARG ;;
    p) procs=$OPTARG ;;
    l) maxlen=$OPTARG ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null

# NAME and its seed paths, one target a line, from meson's test list.
targets=$(meson introspect build-fuzz --tests | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["name"].startswith("fuzz_"):
        print(t["name"][5:], *t["cmd"][1:])')

export KVB_SOURCE=$PWD
failed=()
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
while read -r name seeds; do
  [ $# -eq 0 ] || [[ " $* " == *" $name "* ]] || continue
  bin=build-fuzz/tests/fuzz_${name}_libfuzzer
  ninja -C build-fuzz "tests/fuzz_${name}_libfuzzer" >/dev/null
  work=build-fuzz/fuzz-work/$name
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/merged"
  for s in $seeds; do
    if [ -d "$s" ]; then find "$s" -maxdepth 1 -type f -exec cp {} "$work/corpus/" \; ; else cp "$s" "$work/corpus/"; fi
  done
  start=$(date +%s)
  pids=()
  for ((k = 0; k < procs; k++)); do
    nice -n 10 "$bin" -runs=$((runs / procs)) -max_total_time="$secs" -max_len="$maxlen" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -seed=$((k + 1)) \
      -artifact_prefix="$work/" "$work/corpus" >"$work/log$k" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  execs=$(cat "$work"/log* | sed -n 's/^stat::number_of_executed_units: *//p' | paste -sd+ | bc)
  if [ $rc -ne 0 ]; then
    echo "fuzz.sh: $name: exit $rc after ${execs:-?} executions; see $work/log* and $work/" >&2
    failed+=("$name")
    continue
  fi
  nice -n 10 "$bin" -merge=1 -use_counters=0 -max_len="$maxlen" -timeout=10 -rss_limit_mb=2048 \
    "$work/merged" "$work/corpus" >"$work/merge.log" 2>&1
  # the committed corpus is the merge; hand-named seeds (crash inputs) stay
  find "tests/data/fuzz/$name" -maxdepth 1 -type f -regextype posix-extended -regex '.*/[0-9a-f]{40}' -delete 2>/dev/null || true
  mkdir -p "tests/data/fuzz/$name"
  cp "$work/merged/"* "tests/data/fuzz/$name/"
  printf '%-15s %9s executions  %4d corpus files  %5d s\n' "$name" "$execs" \
    "$(ls "$work/merged" | wc -l)" $(($(date +%s) - start))
done <<<"$targets"
[ ${#failed[@]} -eq 0 ] || { echo "fuzz.sh: findings in: ${failed[*]}" >&2; exit 1; }
