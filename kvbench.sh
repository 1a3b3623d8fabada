#!/usr/bin/env bash
# kvbench.sh — set up, build and run kvbench on Debian 12.
#
#   ./kvbench.sh run [CONFIG]   install what is missing, build, run the sweep (default configs/demo.json)
#   ./kvbench.sh test           install what is missing, build, run the whole test suite
#                               (a release build, then an ASan+UBSan build)
#   ./kvbench.sh setup          install what is missing and build, nothing else
#
# Installing packages needs root (or sudo). With CI=true the build uses
# -Werror and -march=x86-64-v3 so that it does not depend on the build host.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  gcc meson ninja-build pkg-config git
  libcjson-dev libcurl4-openssl-dev libpcre2-dev libopenblas-dev
  libcriterion-dev libutf8proc-dev libzip-dev
  libssl-dev           # libcrypto's SHA-256 for downloads (libcurl already loads libcrypto)
  libjansson-dev       # JSON strings with NUL bytes for the data path (cJSON cuts them)
  python3-jieba        # jieba's dictionary and HMM tables, read by the Chinese scorers
  libdnnl-dev          # oneDNN: prefill's matmuls; its BF16 kernels reach ~89 % of an AVX512_BF16
                       # core's peak, kvbench's own tile ~10 % (kvcore/model/gemm_dnnl.h)
  # a one-node Slurm cluster for the test of `kvbench submit slurm` (tests/e2e/test_slurm.sh)
  slurm-wlm slurmctld slurmd slurm-client munge
)

# Messages go to stderr, bold only on a terminal: `./kvbench.sh run > out`
# leaves out holding the score table alone, and a log file no escape codes.
say() {
  if [ -t 2 ]; then printf '\033[1m==> %s\033[0m\n' "$*" >&2; else printf '==> %s\n' "$*" >&2; fi
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      echo "kvbench.sh: missing packages: ${missing[*]}; run as root or: apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
  say "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure DIR [meson options...]: (re)configure a build folder with these options.
configure() {
  local dir=$1; shift
  local opts=("$@")
  if [ "${CI:-}" = "true" ]; then opts+=(-Dwerror=true -Dmarch=x86-64-v3); fi
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "${opts[@]}" >/dev/null
  else
    meson setup "$dir" "${opts[@]}" >/dev/null
  fi
}

build() {
  local dir=$1; shift
  say "building $dir"
  configure "$dir" "$@"
  ninja -C "$dir" >&2 # its progress lines are not the command's output
}

# Runs meson test in DIR and prints one closing line "N passed, N failed".
run_tests() {
  local dir=$1; shift
  say "testing $dir"
  local rc=0
  meson test -C "$dir" --print-errorlogs "$@" || rc=$?
  python3 - "$dir/meson-logs/testlog.json" "$TOTALS" <<'PY' || true
import json, sys
# Count the individual Criterion tests from their TAP lines.
ok = bad = skip = 0
for line in open(sys.argv[1]):
    rec = json.loads(line)
    tap = [l for l in rec.get("stdout", "").splitlines() if l.startswith(("ok ", "not ok "))]
    if not tap:
        if rec["result"] in ("OK", "EXPECTEDFAIL"): ok += 1
        elif rec["result"] == "SKIP": skip += 1
        else: bad += 1
    for l in tap:
        if "# SKIP" in l: skip += 1
        elif l.startswith("ok "): ok += 1
        else: bad += 1
print(f"{sys.argv[1].split('/')[0]}: {ok} passed, {bad} failed, {skip} skipped")
with open(sys.argv[2], "a") as f:
    f.write(f"{ok} {bad} {skip}\n")
PY
  return $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  setup)
    install_packages
    build build
    ;;
  run)
    install_packages
    build build
    config=${1:-configs/demo.json}
    [ $# -gt 0 ] && shift
    exec ./build/harness/kvbench run "$config" "$@"
    ;;
  test)
    install_packages
    build build
    rc=0
    TOTALS=$(mktemp)
    run_tests build || rc=1
    build build-asan -Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Db_lundef=false
    run_tests build-asan --timeout-multiplier 3 || rc=1
    # The closing line: every Criterion test of both builds.
    awk '{p+=$1; f+=$2; s+=$3} END {printf "total: %d passed, %d failed, %d skipped\n", p, f, s}' "$TOTALS"
    rm -f "$TOTALS"
    exit $rc
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = "-h" ] || [ "$cmd" = "--help" ] || exit 2
    ;;
esac
