#!/usr/bin/env bash
# run_sweep.sh — the speed issue's sweep on the run path, measured: `kvbench run` of one real
# 2,048-token sample (the first multi_news article of tests/data/longbench/multi_news.head3.jsonl
# as a task of one's own, LongBench's middle truncation to 2,048 tokens, 64 new tokens) with
#   full        the full cache alone,
#   full+16     the full cache + the 16 H2O/SnapKV configs of `bench sweep` (start 32, recent 64,
#               intermediate 160/416/928/1952, sum/norm_sum, decode-time eviction, no rerotation),
#   full+16 P   the same with the configs' caches at precision P (each P given),
#   fixed       the same article cut to 16 tokens, 1 new token, full cache alone: what a run
#               costs besides the engine's prefill and decode (loading the model and tokenizer,
#               tokenizing, writing, scoring),
# each under /usr/bin/time -v, and prints a Markdown table: wall and CPU seconds, the ratios to the
# full cache alone, the same less the fixed cost (the engine's share, what `bench sweep` times),
# the kernel's share of the CPU seconds (system time: mostly faulting in and zeroing fresh memory,
# ~0.4 GB/s a thread on a VM whose host takes freed memory back), minor faults and peak RSS. The
# engine's ratios are what `bench sweep`'s cold pass measures (a fresh process per mode that has
# loaded the model: its prefill, forks and decode), in wall and CPU time; the run's own ratios
# carry the fixed cost in both terms.
#
#   tests/bench/run_sweep.sh MODEL_DIR [COMPUTE] [THREADS] [PRECISION ...]
#   (defaults: f32 2, no precision rows; KVBENCH=path/to/kvbench, default build/harness/kvbench)
#
# OpenBLAS runs its own choice of kernels, or with KVBENCH_ISA=avx2 its Haswell ones, so that the
# whole run is an AVX2 machine's (tests/bench/bench_env.sh; for that, build with -Dmarch=x86-64-v3
# too). The CPU ratios are the ones to trust on a shared machine. Compare with `bench sweep
# --configs 16`'s "limit batched/full" column (tests/bench/sweep_table.sh) for the machine's limit.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -lt 1 ]; then
  sed -n '/^#   tests\/bench\/run_sweep.sh /,/^#   (defaults/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
model=$(realpath "$1") compute=${2:-f32} threads=${3:-2}
shift $(($# < 3 ? $# : 3))
kvbench=$(realpath "${KVBENCH:-build/harness/kvbench}")
[ -x "$kvbench" ] || { echo "run_sweep.sh: $kvbench: not built (./kvbench.sh setup)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "run_sweep.sh: /usr/bin/time: missing (apt-get install time)" >&2; exit 1; }
. tests/bench/bench_env.sh # OpenBLAS's own kernels; its Haswell ones with KVBENCH_ISA=avx2

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -n 1 tests/data/longbench/multi_news.head3.jsonl >"$dir/article.jsonl"

# config NAME PRECISION|none [MAX_LENGTH NEW]: the run's config file; none = the full cache alone.
config() {
  local sweep="" length=${3:-2048} new=${4:-64}
  if [ "$2" != none ]; then
    sweep=',"sweep": [{"algorithm": ["h2o", "snapkv"], "start_size": 32, "recent_size": 64,
      "intermediate_size": [160, 416, 928, 1952], "score_aggregation": ["sum", "norm_sum"],
      "apply_rerotation": false, "kv_cache_precision": "'"$2"'"}]'
  fi
  cat >"$dir/$1.json" <<EOF
{"model": "$model", "compute": "$compute", "threads": $threads, "output": "$dir/results",
 "max_length": $length, "max_new_tokens": $new, "limit": 1,
 "tasks": [{"task": "article", "file": "$dir/article.jsonl", "template": "{context}",
            "metric": "rouge", "language": "en", "chat": false}]$sweep}
EOF
}

# measure NAME: runs the config, prints "wall cpu system faults rss_kib".
measure() {
  /usr/bin/time -v "$kvbench" run "$dir/$1.json" --name "$1" >"$dir/$1.out" 2>"$dir/$1.err" || {
    tail -n 5 "$dir/$1.err" >&2
    exit 1
  }
  awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); w = 0
                                         for (i = 1; i <= n; i++) w = w * 60 + t[i] }
              /User time/ { u = $2 } /System time/ { s = $2 }
              /Minor \(reclaiming/ { f = $2 } /Maximum resident/ { r = $2 }
              END { printf "%.2f %.2f %.2f %d %d\n", w, u + s, s, f, r }' "$dir/$1.err"
}

config fixed none 16 1
config full none
config sweep_f32 f32
rows=(fixed full sweep_f32)
for p in "$@"; do
  config "sweep_$p" "$p"
  rows+=("sweep_$p")
done

start=$(date -u +%H:%M) load0=$(cut -d' ' -f1 /proc/loadavg)
declare -A res
for r in "${rows[@]}"; do
  res[$r]=$(measure "$r")
  echo "# $r: ${res[$r]} (wall s, CPU s, system s, minor faults, peak RSS KiB)" >&2
done
end=$(date -u +%H:%M) load1=$(cut -d' ' -f1 /proc/loadavg)

levels=$(bench_levels "$kvbench")
echo "\`kvbench run\` of one 2,048-token multi_news article, 64 new tokens, compute $compute," \
  "$threads threads, $levels, $start–$end UTC, load $load0 → $load1:"
echo
echo "| run | wall s | CPU s | of it system | wall / full | CPU / full | engine wall / full | engine CPU / full | minor faults | peak RSS |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
read -r fw fc _ _ _ <<<"${res[full]}"
read -r xw xc _ _ _ <<<"${res[fixed]}"
for r in "${rows[@]}"; do
  read -r w c s f k <<<"${res[$r]}"
  case $r in
    fixed) label="fixed cost (16 tokens, 1 new)" ;;
    full) label="full cache alone" ;;
    *) label="full + 16, ${r#sweep_} caches" ;;
  esac
  awk -v l="$label" -v w="$w" -v c="$c" -v s="$s" -v f="$f" -v k="$k" -v fw="$fw" -v fc="$fc" \
    -v xw="$xw" -v xc="$xc" 'BEGIN {
      printf "| %s | %.1f | %.1f | %.1f | %.2f× | %.2f× | %.2f× | %.2f× | %d | %.2f GB |\n", l, w, c, s,
             w / fw, c / fc, (w - xw) / (fw - xw), (c - xc) / (fc - xc), f, k * 1024 / 1e9 }'
done
