#!/usr/bin/env bash
# Scripted submission, llamafleet against Slurm on the same machine.
#
# Starts a single-node Slurm (slurmctld + slurmd, Debian's 22.05, munge with its own key
# and socket, everything in a temp dir) and a llamafleet coordinator (synchronous=FULL,
# token auth), then times, interleaved round by round:
#   - one `sbatch --hold job.sh` against one `llamafleet submit -f job-N.yaml`
#     (sequential, N calls per round; every llamafleet file is a distinct job, so no
#     submission is answered from the idempotency index);
#   - with --parallel: P parallel submitters of each (jobs/s), and one
#     `llamafleet submit -f DIR` of as many files (one batch);
#   - with --submit-bench: build/bin/submit_bench (gRPC API, 64 clients) against the
#     parallel sbatch rate measured in the same run, and the same clients' gRPC health
#     checks (submit_bench --floor: what a call that does nothing reaches here).
# Prints medians over the rounds and the ratios, then stops everything it started.
# A benchmark, not a test: it is not registered in ctest. Needs root to install
# slurm-wlm (apt) when slurmctld is missing.
#
#   tests/bench/cli_vs_sbatch.sh [--bin build/bin] [--rounds 5] [--calls 20]
#                                [--parallel 8] [--parallel-jobs 400] [--submit-bench]
set -euo pipefail

BIN=build/bin
ROUNDS=5
CALLS=20
PARALLEL=0
PARALLEL_JOBS=400
SUBMIT_BENCH=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --calls) CALLS=$2; shift 2 ;;
    --parallel) PARALLEL=$2; shift 2 ;;
    --parallel-jobs) PARALLEL_JOBS=$2; shift 2 ;;
    --submit-bench) SUBMIT_BENCH=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
BIN=$(cd "$BIN" && pwd)
for b in llamafleet llamafleet-coordinator; do
  [[ -x $BIN/$b ]] || { echo "missing $BIN/$b (build it first)" >&2; exit 1; }
done

if ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  echo "installing slurm-wlm (slurmctld slurmd slurm-client munge) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

T=$(mktemp -d /tmp/cli_vs_sbatch.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
# CPU_NOW: CPU seconds (user + system) used so far by this shell's finished children
# (`times` must run in this shell, not in a command substitution's subshell).
cpu_now() {
  times >"$T/times"
  CPU_NOW=$(awk 'NR == 2 {gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4}' "$T/times")
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# --- munge: its own key and socket, in the foreground under our control -------------
mkdir -p "$T/munge" "$T/state" "$T/spool"
chmod 700 "$T/munge"
mungekey --create --keyfile="$T/munge/munge.key" 2>/dev/null ||
  dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
munged --foreground --force --key-file="$T/munge/munge.key" --socket="$T/munge/socket" \
  --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" \
  --seed-file="$T/munge/seed" >"$T/munge/out.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S $T/munge/socket ]] && break; sleep 0.1; done
[[ -S $T/munge/socket ]] || { echo "munged did not start:" >&2; cat "$T/munge/out.log" >&2; exit 1; }

# --- slurm: one node (this host), one partition ----------------------------------------
HOST=$(hostname -s)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
cat >"$T/slurm.conf" <<EOF
ClusterName=bench
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/socket
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MaxJobCount=1000000
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$T/slurm.conf
slurmctld -D -i -f "$T/slurm.conf" >"$T/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$T/slurm.conf" >"$T/slurmd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do sinfo -h >/dev/null 2>&1 && break; sleep 0.1; done
sinfo -h >/dev/null 2>&1 || { echo "slurmctld did not start:" >&2; tail -20 "$T/slurmctld.log" "$T/slurmctld.out" >&2; exit 1; }
printf '#!/bin/sh\nsleep 60\n' >"$T/job.sh"
sbatch --hold "$T/job.sh" >/dev/null  # warm up (and fail early if submission does not work)

# --- llamafleet: a coordinator with token auth -------------------------------------------
mkdir -p "$T/lf"
TOKEN=$("$BIN/llamafleet-coordinator" token create --data-dir "$T/lf" --user bench --role user) ||
  { echo "llamafleet-coordinator token create failed" >&2; exit 1; }
# The job files name /data/...: jobs may name only paths under a configured root.
"$BIN/llamafleet-coordinator" --listen 127.0.0.1:0 --data-dir "$T/lf" --log-level warn \
  --path-root /data >"$T/coordinator.out" 2>"$T/coordinator.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^listening on ' "$T/coordinator.out" && break; sleep 0.1; done
ADDR=$(sed -n 's/^listening on //p' "$T/coordinator.out")
[[ -n $ADDR ]] || { echo "coordinator did not start:" >&2; cat "$T/coordinator.err" >&2; exit 1; }
export LLAMAFLEET_COORDINATOR=$ADDR LLAMAFLEET_TOKEN=$TOKEN
# Distinct jobs: each file is submitted once.
TOTAL=$((ROUNDS * CALLS + 1 + (PARALLEL > 0 ? ROUNDS * 2 * PARALLEL_JOBS : 0)))
mkdir -p "$T/jobs"
python3 - "$T/jobs" "$TOTAL" <<'EOF'
import sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(f"{d}/job-{i}.yaml", "w") as f:
        f.write(f"name: bench-{i}\nmodel: {{preset: tiny, tokenizer: /data/tok.model}}\n"
                "data: {train_path: /data/train.jsonl}\ntraining: {max_steps: 5, seq_len: 64}\n")
EOF
# take_file sets FILE to the next unused job file (in this shell: no command substitution).
NEXT=0
take_file() { FILE="$T/jobs/job-$NEXT.yaml"; NEXT=$((NEXT + 1)); }
take_file
"$BIN/llamafleet" submit -f "$FILE" >/dev/null  # warm up (and fail early if submission does not work)

echo "cli_vs_sbatch: $ROUNDS rounds x $CALLS sequential calls each; slurm $(sbatch --version | awk '{print $2}'), munge auth; llamafleet synchronous=FULL, token auth"
echo "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
SB=() LF=() SBC=() LFC=()
for r in $(seq "$ROUNDS"); do
  cpu_now; c=$CPU_NOW
  s=$(now_ns)
  for _ in $(seq "$CALLS"); do sbatch --hold "$T/job.sh" >/dev/null; done
  e=$(now_ns)
  sb=$(awk -v d=$((e - s)) -v n="$CALLS" 'BEGIN {printf "%.2f", d / n / 1e6}')
  cpu_now
  sbc=$(awk -v a="$c" -v b="$CPU_NOW" -v n="$CALLS" 'BEGIN {printf "%.2f", (b - a) / n * 1e3}')
  files=()
  for _ in $(seq "$CALLS"); do take_file; files+=("$FILE"); done
  cpu_now; c=$CPU_NOW
  s=$(now_ns)
  for f in "${files[@]}"; do "$BIN/llamafleet" submit -f "$f" >>"$T/submitted"; done
  e=$(now_ns)
  lf=$(awk -v d=$((e - s)) -v n="$CALLS" 'BEGIN {printf "%.2f", d / n / 1e6}')
  cpu_now
  lfc=$(awk -v a="$c" -v b="$CPU_NOW" -v n="$CALLS" 'BEGIN {printf "%.2f", (b - a) / n * 1e3}')
  echo "  round $r: sbatch --hold $sb ms/call (client CPU $sbc ms)   llamafleet submit $lf ms/call (client CPU $lfc ms)"
  SB+=("$sb") LF+=("$lf") SBC+=("$sbc") LFC+=("$lfc")
done
SB_MED=$(printf '%s\n' "${SB[@]}" | median)
LF_MED=$(printf '%s\n' "${LF[@]}" | median)
echo "median: sbatch --hold $SB_MED ms (client CPU $(printf '%s\n' "${SBC[@]}" | median) ms)   llamafleet submit $LF_MED ms (client CPU $(printf '%s\n' "${LFC[@]}" | median) ms)"
# Every timed submission stored a new job (none was answered from the idempotency index).
if grep -qv ' created$' "$T/submitted"; then
  echo "a timed llamafleet submit did not create a new job:" >&2; grep -v ' created$' "$T/submitted" >&2; exit 1
fi
echo "llamafleet/sbatch time ratio: $(awk -v a="$LF_MED" -v b="$SB_MED" 'BEGIN {printf "%.2f", a / b}') (target <= 2.0, and <= 25 ms per submit)"

SB_PAR_MED=""
if [[ $PARALLEL -gt 0 ]]; then
  echo "parallel: $PARALLEL submitters, $PARALLEL_JOBS jobs per round"
  SBP=() LFP=() LFB=()
  for r in $(seq "$ROUNDS"); do
    s=$(now_ns)
    seq "$PARALLEL_JOBS" | xargs -P "$PARALLEL" -I{} sbatch --hold "$T/job.sh" >/dev/null
    e=$(now_ns)
    sbp=$(awk -v d=$((e - s)) -v n="$PARALLEL_JOBS" 'BEGIN {printf "%.0f", n / (d / 1e9)}')
    files=()
    for _ in $(seq "$PARALLEL_JOBS"); do take_file; files+=("$FILE"); done
    s=$(now_ns)
    printf '%s\n' "${files[@]}" | xargs -P "$PARALLEL" -I{} "$BIN/llamafleet" submit -f {} >/dev/null
    e=$(now_ns)
    lfp=$(awk -v d=$((e - s)) -v n="$PARALLEL_JOBS" 'BEGIN {printf "%.0f", n / (d / 1e9)}')
    # The same number of files again, as one invocation (one batch per 1000 jobs).
    rm -rf "$T/batch" && mkdir "$T/batch"
    for _ in $(seq "$PARALLEL_JOBS"); do take_file; mv "$FILE" "$T/batch/"; done
    s=$(now_ns)
    "$BIN/llamafleet" submit -f "$T/batch" >/dev/null
    e=$(now_ns)
    lfb=$(awk -v d=$((e - s)) -v n="$PARALLEL_JOBS" 'BEGIN {printf "%.0f", n / (d / 1e9)}')
    echo "  round $r: sbatch x$PARALLEL $sbp jobs/s   llamafleet submit x$PARALLEL $lfp jobs/s   llamafleet submit -f DIR $lfb jobs/s"
    SBP+=("$sbp") LFP+=("$lfp") LFB+=("$lfb")
  done
  SB_PAR_MED=$(printf '%s\n' "${SBP[@]}" | median)
  echo "median: sbatch x$PARALLEL $SB_PAR_MED jobs/s   llamafleet submit x$PARALLEL $(printf '%s\n' "${LFP[@]}" | median) jobs/s   llamafleet submit -f DIR $(printf '%s\n' "${LFB[@]}" | median) jobs/s"
fi

if [[ $SUBMIT_BENCH -eq 1 ]]; then
  [[ -x $BIN/submit_bench ]] || { echo "missing $BIN/submit_bench" >&2; exit 1; }
  if [[ -z $SB_PAR_MED ]]; then
    SBP=()
    for r in $(seq "$ROUNDS"); do
      s=$(now_ns)
      seq 400 | xargs -P 8 -I{} sbatch --hold "$T/job.sh" >/dev/null
      e=$(now_ns)
      SBP+=("$(awk -v d=$((e - s)) 'BEGIN {printf "%.0f", 400 / (d / 1e9)}')")
    done
    SB_PAR_MED=$(printf '%s\n' "${SBP[@]}" | median)
    echo "median: sbatch x8 $SB_PAR_MED jobs/s"
  fi
  # --floor: the same clients calling the gRPC health check, the most any call can reach
  # on this machine, so the ratio below has its ceiling printed beside it.
  "$BIN/submit_bench" --clients 64 --seconds 4 --runs 3 --floor | tee "$T/submit_bench.out"
  API=$(awk '/^median group commit/ {print $4}' "$T/submit_bench.out")
  FLOOR=$(awk '/^median health check/ {print $6}' "$T/submit_bench.out")
  echo "submit_bench (API, 64 clients) / parallel sbatch: $(awk -v a="$API" -v b="$SB_PAR_MED" 'BEGIN {printf "%.1f", a / b}')x (target >= 10x); a gRPC health check, same clients: $(awk -v a="$FLOOR" -v b="$SB_PAR_MED" 'BEGIN {printf "%.1f", a / b}')x"
fi
echo "  load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
