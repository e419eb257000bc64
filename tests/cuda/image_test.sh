#!/usr/bin/env bash
# The CUDA worker image on a machine without a GPU: deploy/containers/build.sh --cuda
# builds it from build-cuda/ (tests/cuda/build.sh, everything built), deploy/podman/up.sh
# starts a coordinator (the image of the bookworm build in BIN's build directory) and two
# workers from the CUDA image, the workers register, a 2-node FULL_SHARD CPU job runs on
# them to SUCCEEDED, and the image's trainer says what it is and refuses --device cuda
# with a message. Everything it made is removed at the end (images tagged cudatest).
#
#   tests/cuda/image_test.sh [BIN]      # BIN: a bookworm build's bin (default build/bin)
#
# LLAMAFLEET_CUDA_IMAGE=IMAGE tests it instead of building one (e.g. the
# localhost/llamafleet-worker-cuda:latest that build.sh --cuda made).
#
# Not in ctest or CI: it needs the whole CUDA build (~3.5 GB of image, minutes to stage).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
cli="$bin/llamafleet"
name="lfcuda$$"
tag=cudatest
work="$(mktemp -d /tmp/llamafleet-cuda-image.XXXXXX)"
export LLAMAFLEET_PODMAN_STATE="$work/state"
shared="$work/shared"
start=$(date +%s)
step() { echo "[$(($(date +%s) - start)) s] $*"; }
fail() {
  echo "FAIL: $*" >&2
  for c in $(podman ps -a --format '{{.Names}}' --filter "label=io.llamafleet.cluster=$name"); do
    echo "---- $c (last 25 lines)" >&2
    podman logs "$c" 2>&1 | tail -25 >&2 || true
  done
  exit 1
}
image="${LLAMAFLEET_CUDA_IMAGE:-}"
built_image=0
cleanup() {
  "$root/deploy/podman/down.sh" --name "$name" >/dev/null 2>&1 || true
  podman rmi "localhost/llamafleet-coordinator:$tag" >/dev/null 2>&1 || true
  ((built_image == 0)) || podman rmi "localhost/llamafleet-worker-cuda:$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (rootful podman)"; exit 77; }
command -v podman >/dev/null || { echo "SKIP: podman is not installed"; exit 77; }

if [ -z "$image" ]; then
  image="localhost/llamafleet-worker-cuda:$tag"
  step "building $image"
  built_image=1
  "$root/deploy/containers/build.sh" --cuda --tag "$tag" || fail "build.sh --cuda failed"
fi
podman image exists "$image" || fail "no image $image"
podman image inspect --format '{{.Size}}' "$image" |
  awk '{printf "image size %.2f GB\n", $1 / 1e9}'
step "building localhost/llamafleet-coordinator:$tag from $bin"
"$root/deploy/containers/build.sh" --build-dir "$(dirname "$bin")" --only coordinator --tag "$tag" >/dev/null ||
  fail "build.sh --only coordinator failed"

step "the image's trainer without a GPU"
# shellcheck source=../../deploy/containers/podman-env.sh
. "$root/deploy/containers/podman-env.sh"
run_image() {
  podman run --rm "${podman_runtime_opts[@]}" "${podman_ulimit_opts[@]}" --network none \
    --entrypoint "$1" "$image" "${@:2}" 2> >(grep -v 'level=error msg="Removing timer' >&2)
}
run_image ldd /opt/llamafleet/bin/llamafleet-train | grep -E 'libtorch_cuda|libnccl' || fail "the image's trainer links no CUDA LibTorch / NCCL"
run_image ldd /opt/llamafleet/bin/llamafleet-train | grep -q 'libcuda\.so' && fail "the image carries a libcuda.so (the driver is the host's)"
ls_cuda=$(run_image sh -c 'ls /opt/llamafleet/lib | grep -E "^libcuda\.so|^libnvidia-" || true')
[ -z "$ls_cuda" ] || fail "the image carries driver libraries: $ls_cuda"

step "up.sh --workers 2 --worker-image $image"
out=$("$root/deploy/podman/up.sh" --name "$name" --workers 2 --shared "$shared" --tag "$tag" \
  --worker-image "$image") || fail "up.sh failed"
echo "$out"
export LLAMAFLEET_COORDINATOR="$(sed -n 's/^coordinator //p' <<<"$out")"
LLAMAFLEET_TOKEN="$(cat "$(sed -n 's/^admin-token //p' <<<"$out")")"
export LLAMAFLEET_TOKEN
shared="$(sed -n 's/^shared //p' <<<"$out")"
json() { /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
ready=$("$cli" workers -o json | json 'sum(w.get("state") == "WORKER_READY" for w in j.get("workers", []))')
[ "$ready" = 2 ] || fail "$ready of 2 CUDA-image workers registered and ready"

mkdir -p "$shared/data"
/usr/bin/python3 - "$shared/data/train.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(48):
        f.write(json.dumps({"input_ids": [3 + rng.randrange(500) for _ in range(33)]}) + "\n")
PY
cat >"$work/job.yaml" <<YAML
name: cuda-image-cpu
model: {preset: tiny}
data: {train_path: $shared/data/train.jsonl, format: tokens}
training: {max_steps: 8, micro_batch_size: 2, seq_len: 32, lr: 3.0e-3, log_every: 1, seed: 11}
fsdp: {sharding: FULL_SHARD, mixed_precision: fp32, activation_checkpointing: false}
resources: {nodes: 2, gpus_per_node: 1}
checkpoint: {dir: $shared/ckpt, every_steps: 4}
output: {export_dir: $shared/export, export_dtype: fp32}
YAML
step "a 2-node FULL_SHARD CPU job on the CUDA image's trainers"
job=$("$cli" submit -f "$work/job.yaml" -o json | json 'j["jobs"][0]["job"]["id"]')
deadline=$(($(date +%s) + 300))
state=""
while [ "$(date +%s)" -lt "$deadline" ]; do
  state=$("$cli" get job "$job" -o json | json 'j.get("state")') || true
  case "$state" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  sleep 2
done
"$cli" logs "$job" >"$work/job.log" 2>&1 || true
[ "$state" = SUCCEEDED ] || { tail -30 "$work/job.log" >&2; fail "the job ended ${state:-in no terminal state}"; }
ls "$shared/export" | grep -q safetensors || fail "the job exported no model"
grep -m1 -E 'device cpu' "$work/job.log" || true
step "job $job SUCCEEDED on $("$cli" get job "$job" -o json | json '" ".join(sorted(j["workers"]))')"

step "--device cuda without a GPU: a message, not a crash"
cp "$work/job.yaml" "$shared/job.yaml"
msg=$(podman exec "$name-worker-1" /opt/llamafleet/bin/llamafleet-train train --spec "$shared/job.yaml" \
  --device cuda --set output.export_dir="$shared/export-cuda" 2>&1 || true)
grep -q "no CUDA device is usable here" <<<"$msg" || { echo "$msg" | tail -5 >&2; fail "no clear message for --device cuda"; }
echo "$msg" | grep -m1 "no CUDA device"
step "1 passed, 0 failed"
