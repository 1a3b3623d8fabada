#!/usr/bin/env bash
# `kvbench submit slurm` on a real one-node Slurm cluster (issue 26).
#
# Starts munged, slurmctld and slurmd with all their state (munge key,
# sockets, spool, slurm.conf on free ports) in a temporary folder, submits
# configs/demo.json in 3 shards, requeues one array task in the middle of its
# shard, and checks that the finish job's merged predictions equal an
# unsharded `kvbench run` byte for byte (timings aside), that the report and
# slurm/summary.txt are there and right, that sbatch's refusal is quoted, and
# that submitting the finished run again submits nothing. Every wait is
# bounded; the daemons are stopped however the test ends. When Slurm cannot
# start here, the test fails and says why. Output: TAP.
#
# Environment: KVBENCH (the binary under test), KVB_SOURCE (the source tree).
set -uo pipefail

kvbench=${KVBENCH:?KVBENCH must name the kvbench binary}
src=${KVB_SOURCE:?KVB_SOURCE must name the source tree}
limit=12 # samples per task: 36 in all, 12 per shard
tmp=$(mktemp -d) || exit 1
chmod 755 "$tmp" # munged wants every folder above its socket searchable by all
n=0

ok() {
    n=$((n + 1))
    echo "ok $n - $*"
}

# Says what went wrong and shows the logs that tell why, then ends the test
# (the EXIT trap stops the daemons).
fail() {
    n=$((n + 1))
    echo "not ok $n - $*"
    for log in "$tmp"/log/* "$tmp"/results/demo/slurm/logs/*; do
        [ -f "$log" ] || continue
        echo "# --- $log (last lines)"
        tail -n 15 "$log" | sed 's/^/# /'
    done
    echo "1..$n"
    exit 1
}

# Stops one daemon by its pid file and waits (bounded) until it is gone.
stop_daemon() {
    local pidfile=$1 pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# No job of this cluster outlives the test: a job step (slurmstepd) would
# outlive slurmd, so the jobs are cancelled first and their end awaited.
cancel_jobs() {
    [ -f "$tmp/slurmctld.pid" ] || return 0
    scancel --user="$(id -un)" 2>/dev/null || return 0
    for _ in $(seq 100); do
        [ -z "$(squeue --noheader 2>/dev/null)" ] && return 0
        sleep 0.1
    done
}

cleanup() {
    [ -n "${reference:-}" ] && kill "$reference" 2>/dev/null
    cancel_jobs
    stop_daemon "$tmp/slurmd.pid"
    stop_daemon "$tmp/slurmctld.pid"
    stop_daemon "$tmp/munge/munged.pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds.
wait_for() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@"; do
        [ $SECONDS -lt $deadline ] || fail "$what: not within ${seconds}s"
        sleep 0.1
    done
}

for prog in munged slurmctld slurmd sbatch scontrol squeue sinfo python3; do
    command -v "$prog" >/dev/null ||
        fail "Slurm cannot start here: $prog is not on PATH (./kvbench.sh test installs slurm-wlm, munge)"
done

# ---- a one-node cluster -----------------------------------------------------
mkdir -p "$tmp"/{munge,state,spool,log} || fail "cannot create the cluster's folders"
chmod 755 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key" && chmod 400 "$tmp/munge/munge.key"
munged --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
    --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/log/munged.log" \
    --seed-file="$tmp/munge/munged.seed" ||
    fail "Slurm cannot start here: munged refused to start ($(tail -n 1 "$tmp/log/munged.log" 2>/dev/null))"

read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
node=$(hostname -s)
user=$(id -un)
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=kvbtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.socket
CredType=cred/munge
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=30
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -i || fail "Slurm cannot start here: slurmctld refused to start"
slurmd -N "$node" || fail "Slurm cannot start here: slurmd refused to start"
node_idle() { [ "$(sinfo --noheader --nodes="$node" --format=%t 2>/dev/null)" = idle ]; }
wait_for 60 "Slurm cannot start here: node $node did not come up idle" node_idle
ok "a one-node Slurm cluster is up (node $node, $(nproc) CPUs, ports $ctld_port/$slurmd_port)"

# ---- sbatch's refusal is quoted -----------------------------------------------
cd "$tmp" || fail "cannot enter $tmp"
out=$("$kvbench" submit slurm "$src/configs/demo.json" --shards 3 --output "$tmp/refused" \
    --limit $limit -- --partition=nope 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "a refused submission exits 1, not $rc: $out"
grep -q 'kvbench: submit: sbatch refused .*array.sbatch: "sbatch: error: .*nvalid partition' \
    <<<"$out" || fail "sbatch's refusal is not quoted: $out"
ok "sbatch refusing an unknown partition: exit 1, its message quoted"

# ---- the sweep: 3 shards, then merge and report ---------------------------------
submit=("$kvbench" submit slurm "$src/configs/demo.json" --shards 3 --output "$tmp/results"
    --limit $limit -- --cpus-per-task=1)
out=$("${submit[@]}" 2>&1) || fail "submit failed: $out"
array=$(sed -n 's/^array job: *\([0-9]*\) (shards 0-2 of 3)$/\1/p' <<<"$out")
finish=$(sed -n 's/^finish job: *\([0-9]*\) .*/\1/p' <<<"$out")
[ -n "$array" ] && [ -n "$finish" ] || fail "submit printed no job ids: $out"
grep -q "^cancel: scancel $array $finish$" <<<"$out" || fail "no cancel command: $out"
ok "submitted: array job $array, finish job $finish"

# The unsharded reference, meanwhile.
"$kvbench" run "$src/configs/demo.json" --output "$tmp/ref" --limit $limit --threads 1 \
    >"$tmp/log/reference.log" 2>&1 &
reference=$!

job_state() { scontrol show job "$1" --oneliner 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }

# Requeue the first shard caught with some of its lines written (scontrol
# requeue cancels the task, kvbench stops after its sample in flight, and
# the task runs again: it must resume, not redo or lose a line).
run=$tmp/results/demo
per_shard=$limit # limit/3 samples of each of the 3 tasks
lines_of() { cat "$run/shards/$1-of-3/predictions/full/"*.jsonl 2>/dev/null | wc -l; }
caught() { # the running shard with the most work left, so the requeue lands mid-run
    local i have fewest=$per_shard
    victim=
    for i in 0 1 2; do
        have=$(lines_of $i)
        if [ "$have" -ge 1 ] && [ "$have" -lt "$fewest" ]; then
            victim=$i
            fewest=$have
        fi
    done
    [ -n "$victim" ]
}
wait_for 180 "no shard was seen in the middle of its samples" caught
scontrol requeue "${array}_$victim" || fail "scontrol requeue ${array}_$victim failed"
at_requeue=$(lines_of "$victim")
# A requeued job waits two minutes before it may start again: once it is
# back in the queue, let it start now.
released() {
    [ "$(job_state "${array}_$victim")" = PENDING ] &&
        scontrol update jobid="${array}_$victim" StartTime=now 2>/dev/null
}
wait_for 60 "the requeued task ${array}_$victim did not come back to the queue" released
ok "shard $victim requeued after $at_requeue of its $per_shard samples"

finish_done() {
    case $(job_state "$finish") in
    COMPLETED) return 0 ;;
    FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) fail "finish job $finish ended $(job_state "$finish")" ;;
    *) return 1 ;;
    esac
}
wait_for 420 "finish job $finish did not complete" finish_done
for i in 0 1 2; do
    state=$(job_state "${array}_$i")
    [ "$state" = COMPLETED ] || fail "array task ${array}_$i ended $state"
done
ok "every array task and the finish job completed"

# ---- the merged run equals an unsharded one, timings aside -----------------------
wait "$reference" || fail "the unsharded reference run failed: $(tail -n 3 "$tmp/log/reference.log")"
reference=
(cd "$tmp/ref/demo" && find predictions -type f | sort) >"$tmp/ref.files"
(cd "$run" && find predictions -type f | sort) >"$tmp/merged.files"
cmp -s "$tmp/ref.files" "$tmp/merged.files" ||
    fail "merged prediction files differ from the unsharded run's: $(diff "$tmp/ref.files" "$tmp/merged.files" | head -5)"
[ "$(wc -l <"$tmp/ref.files")" -eq 48 ] || fail "expected 48 prediction files (16 configs x 3 tasks)"
untimed() { sed -E 's/"(prefill_s|decode_s)":[-+0-9.eE]+/"\1":T/g' "$1"; }
while read -r f; do
    cmp -s <(untimed "$tmp/ref/demo/$f") <(untimed "$run/$f") ||
        fail "$f differs from the unsharded run: $(diff <(untimed "$tmp/ref/demo/$f") <(untimed "$run/$f") | head -4)"
done <"$tmp/ref.files"
ok "merged predictions equal the unsharded run's byte for byte, timings aside (48 files)"

for f in report.html summary.md scores.csv; do
    [ -s "$run/$f" ] || fail "the finish job wrote no $f"
done
ok "the finish job reported the run (report.html, summary.md, scores.csv)"

# ---- summary.txt: per shard, samples, wall time, attempts, node ------------------
summary=$run/slurm/summary.txt
[ -f "$summary" ] || fail "merge wrote no slurm/summary.txt"
for i in 0 1 2; do
    attempts=$([ "$i" = "$victim" ] && echo 2 || echo 1)
    grep -Eq "^ +$i +$per_shard +[0-9]+:[0-9]{2}:[0-9]{2} +$attempts +$node\$" "$summary" ||
        fail "summary.txt has no row 'shard $i, $per_shard samples, $attempts attempts, $node': $(cat "$summary")"
done
grep -Eq "^total +$((3 * limit))\$" "$summary" || fail "summary.txt total: $(cat "$summary")"
first_end=$(grep -m1 '^end' "$run/slurm/attempts/$victim.tsv" | cut -f3)
[ "$first_end" != 0 ] || fail "the requeued attempt of shard $victim ended 0: it was not stopped mid-run"
ok "summary.txt: 3 rows of $per_shard samples, shard $victim with 2 attempts, total $((3 * limit))"

# ---- submitting the finished run again submits nothing --------------------------
jobs_before=$(scontrol show jobs --oneliner | grep -c JobId=)
out=$("${submit[@]}" 2>&1) || fail "resubmitting failed: $out"
grep -q "^nothing to submit: run $run is complete" <<<"$out" || fail "resubmitting said: $out"
grep -q "^array job" <<<"$out" && fail "resubmitting submitted an array: $out"
[ "$(scontrol show jobs --oneliner | grep -c JobId=)" -eq "$jobs_before" ] ||
    fail "resubmitting the finished run queued jobs"
ok "submitting the finished run again submits nothing"

echo "1..$n"
