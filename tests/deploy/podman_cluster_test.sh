#!/usr/bin/env bash
# The podman cluster test: builds the images (deploy/containers/build.sh), starts
# a coordinator and three CPU workers as containers (deploy/podman/up.sh), and from the host
# CLI with the printed admin token
#   1. runs a 2-node FULL_SHARD job to SUCCEEDED on two worker containers (Gloo between
#      containers: MASTER_ADDR is a container name, not loopback);
#   2. runs a second job, `podman kill`s one of its worker containers mid-job, and checks the
#      job resumes from its checkpoint on the third worker and succeeds;
# then down.sh, after which no container, network, volume or secret of the cluster is left.
# Exit 77 (ctest: skipped) only when this machine cannot run podman containers at all.
#
#   tests/deploy/podman_cluster_test.sh BUILD_DIR/bin
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:?usage: podman_cluster_test.sh BUILD_DIR/bin}" && pwd)"
build_dir="$(dirname "$bin")"
cli="$bin/llamafleet"

if ! command -v podman >/dev/null; then echo "SKIP: podman is not installed"; exit 77; fi
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (rootful podman with runc)"; exit 77; fi

name="lfdeploy$$"
work="$(mktemp -d /tmp/llamafleet-deploy.XXXXXX)"
export LLAMAFLEET_PODMAN_STATE="$work/state"
export LLAMAFLEET_IMAGE_TAG=ctest
shared="$work/shared"
artifacts="${ARTIFACT_DIR:-$work/artifacts}"
start=$(date +%s)
step() { echo "[$(($(date +%s) - start)) s] $*"; }
fail() {
  echo "FAIL: $*" >&2
  mkdir -p "$artifacts"
  for c in $(podman ps -a --format '{{.Names}}' --filter "label=io.llamafleet.cluster=$name"); do
    podman logs "$c" >"$artifacts/$c.log" 2>&1 || true
    echo "---- $c (last 25 lines; all in $artifacts/$c.log)" >&2
    tail -25 "$artifacts/$c.log" >&2
  done
  exit 1
}
cleanup() {
  "$root/deploy/podman/down.sh" --name "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "building the images"
"$root/deploy/containers/build.sh" --build-dir "$build_dir" >/dev/null || fail "build.sh failed"
step "images: $(podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep ":ctest" | tr '\n' ';')"

step "up.sh --workers 3"
out=$("$root/deploy/podman/up.sh" --name "$name" --workers 3 --shared "$shared" \
  --coordinator-args "--heartbeat-timeout 5 --cancel-grace 5" --worker-args "--heartbeat-interval 1") ||
  fail "up.sh failed"
echo "$out"
address=$(sed -n 's/^coordinator //p' <<<"$out")
portal=$(sed -n 's/^portal //p' <<<"$out")
token_file=$(sed -n 's/^admin-token //p' <<<"$out")
printed_shared=$(sed -n 's/^shared //p' <<<"$out")
[[ "$address" =~ ^127\.0\.0\.1:[0-9]+$ ]] || fail "up.sh printed no coordinator 127.0.0.1:PORT"
[[ "$portal" =~ ^http://127\.0\.0\.1:[0-9]+/ui/$ ]] || fail "up.sh printed no portal URL"
[ -s "$token_file" ] || fail "up.sh printed no admin-token file"
[ "$printed_shared" = "$(cd "$shared" && pwd -P)" ] || fail "up.sh printed shared '$printed_shared'"
shared="$printed_shared"
for c in coordinator worker-1 worker-2 worker-3; do
  [ "$(podman inspect -f '{{.State.Running}}' "$name-$c")" = true ] || fail "$name-$c is not running"
done
# Published on loopback only.
podman port "$name-coordinator" | grep -v '127\.0\.0\.1:' && fail "a port is published beyond 127.0.0.1"
/usr/bin/python3 - "$portal" <<'PY' || fail "the portal does not answer at $portal"
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].replace("/ui/", "/healthz"), timeout=10).read()
PY

export LLAMAFLEET_COORDINATOR="$address"
LLAMAFLEET_TOKEN="$(cat "$token_file")"
export LLAMAFLEET_TOKEN
json() {  # json EXPR: evaluates EXPR on the JSON object read from stdin (as j)
  /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}
ready=$("$cli" workers -o json | json 'sum(w.get("state") == "WORKER_READY" for w in j.get("workers", []))')
[ "$ready" = 3 ] || fail "$ready of 3 workers ready, seen from the host CLI"

# Pre-tokenized data (no tokenizer needed), written from the host into the shared dir.
mkdir -p "$shared/data"
/usr/bin/python3 - "$shared/data/train.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(48):
        f.write(json.dumps({"input_ids": [3 + rng.randrange(500) for _ in range(33)]}) + "\n")
PY

submit() {  # submit NAME MAX_STEPS: prints the job id
  cat >"$work/$1.yaml" <<YAML
name: $1
model: {preset: tiny}
data: {train_path: $shared/data/train.jsonl, format: tokens}
training: {max_steps: $2, micro_batch_size: 2, seq_len: 32, lr: 3.0e-3, log_every: 1, seed: 11}
fsdp: {sharding: FULL_SHARD, mixed_precision: fp32, activation_checkpointing: false}
resources: {nodes: 2, gpus_per_node: 1}
checkpoint: {dir: $shared/ckpt-$1, every_steps: 4}
output: {export_dir: $shared/export-$1, export_dtype: fp32}
run_policy: {max_restarts: 2, restart_backoff_seconds: 1}
YAML
  "$cli" submit -f "$work/$1.yaml" -o json | json 'j["jobs"][0]["job"]["id"]'
}
get() { "$cli" get job "$1" -o json; }
wait_for() {  # wait_for JOB SECONDS PYTHON-CONDITION-ON-j
  local deadline=$(($(date +%s) + $2)) job
  while [ "$(date +%s)" -lt "$deadline" ]; do
    job=$(get "$1") || true
    [ "$(json "bool($3)" <<<"$job" 2>/dev/null)" = True ] && return 0
    sleep 1
  done
  fail "job $1: timed out waiting for $3; last: $(json 'j.get("state"), j.get("status_reason")' <<<"$job" 2>/dev/null)"
}
terminal='j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED")'

step "job 1: 2-node FULL_SHARD across containers"
job1=$(submit first 12)
wait_for "$job1" 240 "$terminal"
state=$(get "$job1" | json 'j["state"]')
[ "$state" = SUCCEEDED ] || fail "job 1 ended $state: $(get "$job1" | json 'j.get("status_reason")')"
workers1=$(get "$job1" | json '" ".join(sorted(j["workers"]))')
echo "job 1 ran on: $workers1"
[[ "$workers1" =~ ^$name-worker-[1-3]\ $name-worker-[1-3]$ ]] || fail "job 1 was not placed on two worker containers: $workers1"
compgen -G "$shared/export-first/*safetensors*" >/dev/null || fail "job 1 exported no model into $shared/export-first"
"$cli" logs "$job1" >"$work/job1.log" 2>&1 || true

step "job 2: a worker container is killed mid-job"
job2=$(submit second 40)
wait_for "$job2" 240 'j.get("state") == "RUNNING" and int(j.get("latest_metrics", {}).get("step", 0)) >= 10'
read -r -a placed <<<"$(get "$job2" | json '" ".join(j["workers"])')"
[ "${#placed[@]}" = 2 ] || fail "job 2 runs on ${#placed[@]} workers"
victim="${placed[1]}"
spare=""
for i in 1 2 3; do
  [[ " ${placed[*]} " == *" $name-worker-$i "* ]] || spare="$name-worker-$i"
done
step "killing $victim (job 2 on ${placed[*]}; spare $spare)"
podman kill "$victim" >/dev/null
wait_for "$job2" 300 "$terminal"
final=$(get "$job2")
state=$(json 'j["state"]' <<<"$final")
[ "$state" = SUCCEEDED ] || fail "job 2 ended $state: $(json 'j.get("status_reason")' <<<"$final")"
[ "$(json 'j["attempts"]' <<<"$final")" = 2 ] || fail "job 2: $(json 'j["attempts"]' <<<"$final") attempts, expected 2"
[ "$(json 'j["restarts"]' <<<"$final")" = 1 ] || fail "job 2: expected one restart"
workers2=$(json '" ".join(j["workers"])' <<<"$final")
[[ " $workers2 " == *" $spare "* ]] || fail "job 2's second attempt ran on '$workers2', not on the spare $spare"
[[ " $workers2 " != *" $victim "* ]] || fail "job 2's second attempt ran on the killed $victim"
"$cli" logs "$job2" >"$work/job2.log" 2>&1 || true
resumed=$(grep -o 'resumed from [^ ]* at step [0-9]*' "$work/job2.log" | head -1)
[ -n "$resumed" ] || fail "job 2's log has no 'resumed from ... at step N' line"
[[ "$resumed" =~ at\ step\ ([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 4)) || fail "job 2 did not resume from a checkpoint: $resumed"
echo "job 2 $resumed; final workers $workers2"

step "down.sh"
"$root/deploy/podman/down.sh" --name "$name" || fail "down.sh failed"
label="io.llamafleet.cluster=$name"
[ -z "$(podman ps -a -q --filter "label=$label")" ] || fail "containers left: $(podman ps -a --filter "label=$label" --format '{{.Names}}')"
podman network ls --format '{{.Name}}' | grep -qx "$name" && fail "network $name left"
[ -z "$(podman volume ls -q --filter "label=$label")" ] || fail "volumes left: $(podman volume ls -q --filter "label=$label")"
podman secret ls --format '{{.Name}}' | grep -qx "$name-join-token" && fail "secret $name-join-token left"
[ ! -e "$LLAMAFLEET_PODMAN_STATE/$name/admin-token" ] || fail "admin token left"
step "passed"
