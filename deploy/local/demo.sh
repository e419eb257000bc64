#!/usr/bin/env bash
# llamafleet on one machine: builds what it needs, starts a coordinator whose SQLite
# database lives under ./var/coordinator, submits the example jobs from deploy/examples/
# and shows the queue. Jobs survive restarts: run it twice and the second run finds the
# same jobs (each file's idempotency keys match) instead of creating new ones.
#
#   deploy/local/demo.sh              # run the demo, then stop the coordinator
#   deploy/local/demo.sh --keep       # leave the coordinator running until Ctrl-C
#
# Environment: LLAMAFLEET_BUILD_DIR (default build), LLAMAFLEET_DEMO_DIR (default ./var).
#
# Workers and training arrive with the scheduling issue; until then jobs stay QUEUED with
# the reason the coordinator gives.
set -euo pipefail
cd "$(dirname "$0")/../.."

keep=0
[ "${1:-}" = "--keep" ] && keep=1

build_dir="${LLAMAFLEET_BUILD_DIR:-build}"
var_dir="${LLAMAFLEET_DEMO_DIR:-./var}"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing missing packages and building (first run: a few minutes)"
bash deploy/local/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j"$(nproc)" --target llamafleet-coordinator llamafleet >/dev/null
bin="$build_dir/bin"

mkdir -p "$var_dir"
log="$var_dir/coordinator.log"
coordinator_pid=""
cleanup() {
  if [ -n "$coordinator_pid" ] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -TERM "$coordinator_pid" 2>/dev/null || true
    wait "$coordinator_pid" 2>/dev/null || true
    echo "coordinator stopped (database kept in $var_dir/coordinator)"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting the coordinator (database: $var_dir/coordinator/coordinator.db, log: $log)"
fifo="$var_dir/.coordinator.stdout"
rm -f "$fifo" && mkfifo "$fifo"
"$bin/llamafleet-coordinator" --listen 127.0.0.1:0 --data-dir "$var_dir/coordinator" \
  >"$fifo" 2>>"$log" &
coordinator_pid=$!
address=""
while IFS= read -r -t 30 line; do
  case "$line" in "listening on "*) address="${line#listening on }"; break ;; esac
done <"$fifo"
rm -f "$fifo"
if [ -z "$address" ]; then
  echo "demo: the coordinator did not start; see $log" >&2
  tail -5 "$log" >&2
  exit 1
fi
echo "coordinator listening on $address (pid $coordinator_pid)"
export LLAMAFLEET_COORDINATOR="$address"
cli="$bin/llamafleet"

say "validating every example without storing it (--dry-run)"
for f in deploy/examples/*.yaml; do
  printf '%-40s ' "$f"
  "$cli" submit -f "$f" --dry-run -o json >/dev/null && echo valid
done

say "a typo is rejected by name, and nothing is stored"
printf 'name: typo\nmodel: {preset: tiny, tokenizer: t.model}\ndata: {train_path: d.jsonl}\ntraining: {lrr: 1e-4}\n' |
  "$cli" submit -f - || true

say "submitting the examples"
for f in deploy/examples/*.yaml; do
  echo "\$ llamafleet submit -f $f"
  "$cli" submit -f "$f"
done

say "submitting the batch again: same idempotency keys, nothing new"
"$cli" submit -f deploy/examples/batch.yaml

say "the queue (llamafleet get jobs)"
"$cli" get jobs

first=$("$cli" get jobs -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][-1]["id"])' 2>/dev/null || true)
if [ -n "$first" ]; then
  say "one job in detail (llamafleet describe job $first)"
  "$cli" describe job "$first"
fi

say "done"
echo "The jobs are QUEUED: workers and the scheduler come next. Try:"
echo "  export LLAMAFLEET_COORDINATOR=$address"
echo "  $cli get jobs -o wide"
echo "  $cli watch <ID>     # then, in another terminal: $cli cancel <ID>"
if [ "$keep" = 1 ]; then
  echo "coordinator running at $address; Ctrl-C stops it"
  wait "$coordinator_pid"
fi
