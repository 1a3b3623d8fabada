#!/usr/bin/env bash
# sweep_table.sh — the README's sweep table ("Sweeps in one weight pass"), measured.
#
#   tests/bench/sweep_table.sh MODEL_DIR [PROMPT_TOKENS] [GEN_TOKENS] [CONFIGS] [THREADS] [REPEATS]
#   (defaults: 2048 64 4,16,31 2 1; KVBENCH=path/to/kvbench, default build/harness/kvbench)
#
# Runs `kvbench bench sweep` once (the full cache alone, 1 + K configs batched and 1 + K one
# after another, each mode in a process of its own that runs it twice: cold, its first pass on
# fresh memory as a one-sample `kvbench run`, and warm, its second as a run's later samples)
# under /usr/bin/time -v, and prints the Markdown table of wall and CPU ratios to the full cache
# alone for both passes, with the kernel level (KVBENCH_ISA=avx2: OpenBLAS's Haswell kernels too,
# tests/bench/bench_env.sh), the machine's load and the peak RSS of the
# largest mode's process. The CPU ratios are the ones to trust on a shared machine (a
# neighbour's load moves the wall times).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -lt 1 ]; then
  sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
model=$1 prompt=${2:-2048} gen=${3:-64} configs=${4:-4,16,31} threads=${5:-2} repeats=${6:-1}
kvbench=${KVBENCH:-build/harness/kvbench}
[ -x "$kvbench" ] || { echo "sweep_table.sh: $kvbench: not built (./kvbench.sh setup)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "sweep_table.sh: /usr/bin/time: missing (apt-get install time)" >&2; exit 1; }
. tests/bench/bench_env.sh # OpenBLAS's own kernels; its Haswell ones with KVBENCH_ISA=avx2

out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
start=$(date -u +%H:%M) load0=$(cut -d' ' -f1 /proc/loadavg)
if ! /usr/bin/time -v "$kvbench" bench sweep --model "$model" --prompt-tokens "$prompt" \
    --gen-tokens "$gen" --configs "$configs" --threads "$threads" --repeats "$repeats" \
    >"$out" 2>"$err"; then
  cat "$err" >&2
  exit 1
fi
end=$(date -u +%H:%M) load1=$(cut -d' ' -f1 /proc/loadavg)

levels=$(bench_levels "$kvbench")
rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$err")
echo "\`kvbench bench sweep --prompt-tokens $prompt --gen-tokens $gen --configs $configs" \
  "--threads $threads --repeats $repeats\` on $(basename "$model"), $levels," \
  "$start–$end UTC, load $load0 → $load1:"
echo
echo "| pass | configs | batched / full (wall) | sequential / full (wall) | batched / full (CPU) | sequential / full (CPU) | batched / full at the machine's limit |"
echo "|---|--:|--:|--:|--:|--:|--:|"
# bench sweep's tables, one after "cold (..." and one after "warm (...": configs, batched/full,
# sequent/full, seq/batch, CPU batched/full, CPU sequent/full, limit batched/full.
awk '/^cold \(/ { pass = "cold" } /^warm \(/ { pass = "warm" }
  $1 ~ /^[0-9]+$/ && NF == 7 {
  gsub(/x/, "×"); printf "| %s | %s | %s | %s | %s | %s | %s |\n", pass, $1, $2, $3, $5, $6, $7 }' "$out"
echo
sed -n 's/^machine limit: /Machine limit: /p' "$out"
echo
sed -n 's/^# repeat \([0-9]*\), full: cold \([0-9.]*\) s (\([0-9.]*\) CPU s.*warm \([0-9.]*\) s (\([0-9.]*\) CPU s.*/repeat \1: full cache cold \2 s wall, \3 CPU-s; warm \4 s wall, \5 CPU-s/p' "$err"
grep -q '^batched tokens identical to sequential: yes' "$out" && echo "Batched and sequential tokens identical."
awk -v k="$rss_kib" 'BEGIN { printf "Peak RSS: %d KiB = %.2f GB.\n", k, k * 1024 / 1e9 }'
