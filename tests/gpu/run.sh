#!/usr/bin/env bash
# GPU checks and figures for the sharded trainer, in one call sized for one short visit to
# a GPU machine (a compiler, CMake, ninja, nvcc and pip's CUDA PyTorch there; nothing else
# installed): about 3 minutes to build on 16 cores, at most ~5 more to run.
#
#   tests/gpu/run.sh [--json FILE]        # on the GPU machine
#   tests/gpu/run.sh --cpu [--json FILE]  # every step on the CPU, small shapes (CI)
#
#   0. prerequisites, in seconds: torch (CUDA, C++11 ABI), CMake, a compiler, nvcc, the
#      kit (tests/gpu/kit.sh; LLAMAFLEET_GPU_KIT=system uses the system's libraries),
#      nccl.h, transformers + peft; everything missing is named at once;
#   1. builds tests/gpu (trainer, sharding engine, sharded_rank, trainer_gpu_bench) with
#      ninja (make without it), warnings as errors in worker/trainer;
#   2. numerics on the device: ShardedEngine FULL_SHARD against LocalEngine (fp32 weights
#      1e-5; bf16/fp16 loss 1%), two ranks on one device over Gloo; the trainer's fp32
#      losses, gradient norms and weights against Hugging Face transformers (1e-4; bf16
#      loss 1%) from the same initial weights and batches (without transformers:
#      tests/trainer/reference.py);
#   3. the bf16 GEMM rate of this device (the ceiling MFU is also given against);
#   4. trainer_gpu_bench, Llama-2-7B shape, bf16, seq 4096, FULL_SHARD: activation
#      checkpointing full / selective / none, and LoRA; layers from the device's memory
#      (32 from 120 GiB, else 16, else fewer); tokens/s, TFLOP/s, MFU against the datasheet
#      peak and the measured GEMM rate, allocator peak against the memory estimate, and the
#      step-time estimate where the benchmark prints one. A configuration whose option this
#      benchmark lacks is reported as skipped, not failed;
#   5. seconds the step loop is blocked per checkpoint, asynchronous against synchronous;
#   6. every figure into one JSON file: --json FILE, else $LLAMAFLEET_GPU_JSON, else
#      $BUILD/gpu-run.json; a table of them; the last line says how many checks failed.
# Environment: PYTHON (python3), BUILD (build-gpu; build-gpu-cpu with --cpu), JOBS (cores),
# LLAMAFLEET_GPU_KIT (tests/gpu/kit), LLAMAFLEET_BIN (the main build's bin, for the
# worker's GPU pre-flight), BENCH_STEPS (6), LLAMAFLEET_GPU_BUDGET_S (360: no benchmark
# configuration starts later). Exits 2 when a prerequisite is missing, 1 when
# a step failed (the others still run).
set -uo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
cpu=0
json="${LLAMAFLEET_GPU_JSON:-}"
while (($#)); do
  case "$1" in
    --cpu) cpu=1; shift ;;
    --json) json="${2:?--json needs a file}"; shift 2 ;;
    -h | --help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PYTHON="${PYTHON:-python3}"
BUILD="${BUILD:-$( ((cpu)) && echo build-gpu-cpu || echo build-gpu)}"
JOBS="${JOBS:-$(nproc)}"
kit="${LLAMAFLEET_GPU_KIT:-tests/gpu/kit}"
json="${json:-$BUILD/gpu-run.json}"
report=tests/gpu/gpu_report.py
failed=()
say() { echo "run.sh: $*"; }
fail() { failed+=("$1"); say "FAILED: $1"; }
stamp() { echo "== [$((SECONDS - started)) s] $*"; }

# --- 0. prerequisites ----------------------------------------------------------------------
stamp "0. prerequisites"
missing=()
declare -A fact=()
if command -v "$PYTHON" >/dev/null; then
  while IFS='=' read -r k v; do fact[$k]="$v"; done < <("$PYTHON" "$report" facts 2>/dev/null)
else
  missing+=("$PYTHON (a Python with torch; set PYTHON)")
fi
[ -n "${fact[torch]:-}" ] || missing+=("torch in $PYTHON (${fact[torch_error]:-import failed})")
command -v cmake >/dev/null || missing+=("cmake >= 3.22")
command -v "${CXX:-c++}" >/dev/null || missing+=("a C++ compiler (${CXX:-c++})")
generator="Unix Makefiles"
if command -v ninja >/dev/null; then generator=Ninja; else say "note: no ninja; building with make"; fi
if [ "$kit" != system ]; then
  [ -f "$kit/MANIFEST" ] || missing+=("the kit $kit (make it with tests/gpu/kit.sh where Debian's packages are; it travels as an ignored folder)")
fi
nccl_inc="${fact[nccl_include]:-}"
[ -n "$nccl_inc" ] || for d in /usr/include /usr/local/cuda/include; do [ -f "$d/nccl.h" ] && nccl_inc="$d"; done
if ((cpu)); then
  device=cpu
else
  device=cuda
  command -v nvidia-smi >/dev/null || missing+=("nvidia-smi (no NVIDIA driver here)")
  [ "${fact[cuda_ok]:-0}" = 1 ] || missing+=("a usable CUDA device in torch ${fact[torch]:-} (torch.cuda.is_available() is false)")
  [ "$kit" = system ] || [ "${fact[cxx11_abi]:-1}" = 1 ] ||
    missing+=("a torch built with the C++11 std::string ABI (the kit's is; pip's torch >= 2.7 is)")
  if ! command -v nvcc >/dev/null; then
    if [ -x /usr/local/cuda/bin/nvcc ]; then export CUDACXX=/usr/local/cuda/bin/nvcc; else
      missing+=("nvcc (LibTorch's CMake package enables CUDA; add /usr/local/cuda/bin to PATH)"); fi
  fi
  [ -n "$nccl_inc" ] || say "note: nccl.h not found (pip's nvidia-nccl): ranks use Gloo only"
fi
[ -n "${fact[transformers]:-}" ] && [ -n "${fact[peft]:-}" ] ||
  say "note: transformers/peft not importable: numerics compare against tests/trainer/reference.py instead"
if ((${#missing[@]})); then
  for m in "${missing[@]}"; do say "missing: $m"; done
  exit 2
fi
say "torch ${fact[torch]} (CUDA ${fact[torch_cuda]:-none}, C++11 ABI ${fact[cxx11_abi]}), device $device" \
  "${fact[device_name]:-} ${fact[device_mib]:+${fact[device_mib]} MiB}, transformers ${fact[transformers]:-none}," \
  "peft ${fact[peft]:-none}, kit $kit, nccl.h ${nccl_inc:-none}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
parts="$work/parts"
mkdir -p "$parts"
if ((!cpu)); then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  worker="${LLAMAFLEET_BIN:-build/bin}/llamafleet-worker"
  if [ -x "$worker" ]; then
    "$worker" --check-health --log-level warn || say "the worker's pre-flight failed (above)"
  else
    say "gpu health: skipped: no $worker (the main project's llamafleet-worker)"
  fi
fi

# --- 1. build ------------------------------------------------------------------------------
stamp "1. build ($generator, $JOBS jobs)"
t_build=$SECONDS
kit_opt=()
[ "$kit" = system ] || kit_opt=(-DLLAMAFLEET_GPU_KIT="$(cd "$kit" && pwd)")
prefix_opt=()
[ -d "${fact[cmake_prefix]:-}" ] && prefix_opt=(-DCMAKE_PREFIX_PATH="${fact[cmake_prefix]}")
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$BUILD"
# The options tests/cuda/build.sh builds the trainer with on every CI run.
if ! cmake -S tests/gpu -B "$BUILD" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLLAMAFLEET_WERROR_TRAINER=ON "${kit_opt[@]}" "${prefix_opt[@]}" "${launcher[@]}" \
  ${nccl_inc:+-DNCCL_INCLUDE_DIR="$nccl_inc"} ${LLAMAFLEET_GPU_CMAKE_ARGS:-} >"$BUILD/configure.log" 2>&1; then
  tail -30 "$BUILD/configure.log" >&2
  say "done in $((SECONDS - started)) s: the configure step failed ($BUILD/configure.log)"
  exit 1
fi
grep -E "llamafleet: (CUDA|NCCL)" "$BUILD/configure.log" || true
if ! cmake --build "$BUILD" -j"$JOBS" --target sharded_rank trainer_gpu_bench; then
  say "done in $((SECONDS - started)) s: the build failed"
  exit 1
fi
bin="$BUILD/bin"
echo "{\"build\": {\"seconds\": $((SECONDS - t_build)), \"generator\": \"$generator\", \"jobs\": $JOBS}}" >"$parts/build.json"

# --- 2. numerics ---------------------------------------------------------------------------
stamp "2. numerics on $device"
if ((cpu)); then
  shape=(--hidden 64 --heads 4 --kv-heads 2 --ffn 172 --layers 2 --vocab 256 --seq-len 32)
else
  shape=(--hidden 256 --heads 8 --kv-heads 4 --ffn 688 --layers 2 --vocab 1000 --seq-len 128)
fi
steps=3 rows=8 lr=1e-3
common=(--steps $steps --global-rows $rows --micro-batch 2 --lr $lr --device "$device" "${shape[@]}")
eq="$work/eq"
rank() { timeout 300 "$bin/sharded_rank" "$@" >/dev/null; }
rank --engine local "${common[@]}" --out "$eq/ref" || fail "sharded_rank LocalEngine fp32"
rank --engine local "${common[@]}" --steps 0 --out "$eq/init" || fail "sharded_rank initial weights"
rank --strategy FULL_SHARD "${common[@]}" --out "$eq/full" || fail "sharded_rank FULL_SHARD fp32"
rank --strategy FULL_SHARD --dtype bf16 "${common[@]}" --out "$eq/bf16" || fail "sharded_rank FULL_SHARD bf16"
((cpu)) || rank --strategy FULL_SHARD --dtype fp16 "${common[@]}" --out "$eq/fp16" || fail "sharded_rank FULL_SHARD fp16"
# World size 2 on one device: Gloo with the device's tensors (NCCL refuses two ranks on one
# GPU); with two GPUs, NCCL as well.
two_ranks() {
  local name="$1" port=$((20000 + RANDOM % 20000)) r pids=() ok=0
  shift
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$((${SHARE_DEVICE:-1} ? 0 : r)) MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$bin/sharded_rank" --strategy FULL_SHARD "${common[@]}" "$@" --out "$eq/$name" >/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  return $ok
}
two_ranks gloo2 --backend gloo || fail "two ranks on one $device over Gloo"
if ((!cpu)) && [ "${fact[device_count]:-1}" -ge 2 ] && [ -n "$nccl_inc" ]; then
  SHARE_DEVICE=0 two_ranks nccl2 --backend nccl || fail "two ranks over NCCL"
fi
"$PYTHON" "$report" equivalence --dir "$eq" --out "$parts/equivalence.json" || fail "engine equivalence"
runs=()
[ -f "$eq/full/rank-0.json" ] && runs+=(--run "fp32=$eq/full")
[ -f "$eq/bf16/rank-0.json" ] && runs+=(--run "bf16=$eq/bf16")
"$PYTHON" "$report" hf --init "$eq/init/weights" "${runs[@]}" --device "$device" --steps $steps --rows $rows \
  --seq-len "${shape[-1]}" --lr $lr --weight-decay 0.1 --clip 1.0 --out "$parts/numerics.json" ||
  fail "numerics against transformers"
echo '{"skipped": ["LoRA numerics against PEFT: sharded_rank has no LoRA; tests/trainer/test_lora.py covers LoRA against a reference on the CPU"]}' \
  >"$parts/skipped-lora-numerics.json"

# --- 3. the GEMM rate ----------------------------------------------------------------------
stamp "3. GEMM rate"
if ((cpu)); then gemm_n=512; else gemm_n=8192; fi
"$PYTHON" "$report" gemm --device "$device" --n $gemm_n --out "$parts/gemm.json" || fail "GEMM rate"

# --- 4. throughput, MFU, memory --------------------------------------------------------------
if ((cpu)); then
  model=(--preset tiny --seq-len 64 --micro-batch 1)
  bench_steps=3 warmup=1
else
  mib="${fact[device_mib]:-0}"
  # Full finetuning holds ~16 bytes of state per parameter (bf16 compute over fp32 master
  # weights and AdamW moments): 7B's 108 GB fits 139 GiB, not 78 GiB.
  if ((mib >= 120000)); then layers=32; elif ((mib >= 70000)); then layers=16; else layers=$((mib / 5000)); fi
  ((layers >= 1)) || layers=1
  model=(--preset llama2-7b --layers $layers --seq-len 4096 --micro-batch 1)
  bench_steps="${BENCH_STEPS:-6}" warmup=2
fi
stamp "4. trainer_gpu_bench ${model[*]}"
# A configuration starts only while the run is within its budget (default 6 of the 8
# minutes a visit allows it), so the figures are written before a device's time runs out.
budget="${LLAMAFLEET_GPU_BUDGET_S:-360}"
base=(--dtype bf16 --strategy FULL_SHARD --device "$device" --steps "$bench_steps" --warmup "$warmup" "${model[@]}")
# bench NAME ARGS...: one configuration; its JSON line joins the figures. Exit codes 100 to
# 115 are CLI11's parse errors (an unknown or malformed option): the benchmark predates
# that option. (124 is timeout's.)
bench() {
  local name="$1" rc=0
  shift
  if ((SECONDS - started > budget)); then
    echo "{\"bench\": [{\"name\": \"$name\", \"skipped\": \"over the run's time budget of $budget s\"}]}" >"$parts/bench-$name.json"
    say "$name: skipped: over the run's time budget ($budget s; LLAMAFLEET_GPU_BUDGET_S)"
    return 0
  fi
  timeout 240 "$bin/trainer_gpu_bench" "${base[@]}" "$@" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  if ((rc == 0)); then
    "$PYTHON" - "$name" "$work/$name.out" "$parts/bench-$name.json" <<'PY' || rc=1
import json, sys
name, src, dst = sys.argv[1:]
line = [l for l in open(src) if l.startswith("{")][-1]
b = json.loads(line)
b["name"] = name
est = b.get("step_time_estimate_s")
if est:
    b["step_time_measured_over_estimate"] = b["seconds_per_step"] / est
json.dump({"bench": [b]}, open(dst, "w"))
PY
    return $rc
  fi
  if ((rc >= 100 && rc <= 115)); then
    echo "{\"bench\": [{\"name\": \"$name\", \"skipped\": \"trainer_gpu_bench does not take: $*\"}]}" >"$parts/bench-$name.json"
    say "$name: this trainer_gpu_bench does not take '$*' ($(head -c 120 "$work/$name.err" | tr '\n' ' '))"
    return 3
  fi
  tail -5 "$work/$name.err" >&2
  return 1
}
for mode in full selective none; do
  bench "checkpointing-$mode" --activation-checkpointing-mode $mode
  rc=$?
  ((rc == 0 || rc == 3)) || fail "trainer_gpu_bench checkpointing $mode"
done
bench lora-r16 --activation-checkpointing-mode full --lora-rank 16
rc=$?
((rc == 0 || rc == 3)) || fail "trainer_gpu_bench LoRA"
grep -qs step_time_estimate_s "$parts"/bench-*.json ||
  echo '{"skipped": ["the step-time estimate against the measured step time: trainer_gpu_bench prints no step_time_estimate_s"]}' \
    >"$parts/skipped-estimate.json"

# --- 5. checkpoint blocking ----------------------------------------------------------------
stamp "5. checkpoints, asynchronous against synchronous"
if ((cpu)); then
  ckpt_shape=(--hidden 64 --heads 4 --kv-heads 2 --ffn 172 --layers 2 --vocab 256 --seq-len 32)
else
  ckpt_shape=(--hidden 2048 --heads 16 --kv-heads 16 --ffn 5504 --layers 2 --vocab 8000 --seq-len 512)
fi
for kind in async sync; do
  flags=()
  [ $kind = sync ] && flags=(--sync-checkpoint)
  if timeout 300 "$bin/sharded_rank" --strategy FULL_SHARD --steps 4 --global-rows 2 --micro-batch 1 --device "$device" \
    "${ckpt_shape[@]}" --checkpoint-dir "$work/ckpt-$kind" --checkpoint-every 2 "${flags[@]}" \
    --out "$work/ckpt-$kind-out" >"$work/ckpt-$kind.log"; then
    "$PYTHON" - "$kind" "$work/ckpt-$kind-out/rank-0.json" "$work/ckpt-$kind.log" "$parts/ckpt-$kind.json" <<'PY' || fail "checkpoint $kind figures"
import json, sys
kind, rank, log, dst = sys.argv[1:]
r = json.load(open(rank))
saved = [json.loads(l) for l in open(log) if l.startswith("{") and "checkpoint_saved" in l]
n = len(saved)
json.dump({"checkpoint": {kind: {"checkpoint_blocked_seconds": r["checkpoint_blocked_seconds"], "checkpoints": n,
           "blocked_per_checkpoint_s": r["checkpoint_blocked_seconds"] / max(n, 1),
           "bytes": saved[-1]["bytes"] if saved else 0,
           "write_seconds": [s.get("write_seconds") for s in saved]}}}, open(dst, "w"))
PY
  else
    fail "sharded_rank checkpoints ($kind)"
  fi
  rm -rf "$work/ckpt-$kind"
done

# --- 6. the figures --------------------------------------------------------------------------
stamp "6. figures"
mkdir -p "$(dirname "$json")"
cat >"$parts/run.json" <<EOF
{"run": {"mode": "$( ((cpu)) && echo cpu || echo gpu)", "device": "${fact[device_name]:-cpu}",
 "device_mib": ${fact[device_mib]:-0}, "torch": "${fact[torch]}", "torch_cuda": "${fact[torch_cuda]:-}",
 "transformers": "${fact[transformers]:-}", "peft": "${fact[peft]:-}", "seconds": $((SECONDS - started)),
 "failed": $(printf '%s\n' "${failed[@]}" | "$PYTHON" -c 'import json,sys;print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')}}
EOF
"$PYTHON" "$report" summary --parts "$parts" --out "$json" || fail "the figures' summary"
if ((${#failed[@]})); then
  say "done in $((SECONDS - started)) s: ${#failed[@]} checks failed: $(printf '%s; ' "${failed[@]}")"
  exit 1
fi
say "done in $((SECONDS - started)) s: every check passed"
