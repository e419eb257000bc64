#!/usr/bin/env bash
# GPU checks for the sharded trainer, for a machine with an NVIDIA GPU and a CUDA build of
# PyTorch (pip's torch wheel brings LibTorch with CMake files and, through nvidia-nccl,
# nccl.h). One script, one pass:
#   0. the worker's pre-flight and one GPU health sample (llamafleet-worker --check-health,
#      from the main build at $LLAMAFLEET_BIN, default build/bin; skipped, and said so,
#      without one), printed for the record; a failed pre-flight does not stop the rest;
#   1. builds tests/gpu (trainer + sharding engine + driver + benchmark) against the CUDA
#      LibTorch at $(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)'), with
#      the CMake options of tests/cuda/build.sh (which compiles the same code against
#      Debian's CUDA LibTorch 2.6 in CI, and configures tests/gpu there too);
#   2. numeric equivalence on the GPU (world size 1; two NCCL ranks cannot share one GPU):
#        ShardedEngine FULL_SHARD fp32 vs the single-process LocalEngine, fp32:
#          weights within 1e-5 relative (max|a-b| <= 1e-5 max|b| per tensor);
#        bf16 and fp16 (dynamic loss scaling) vs fp32: per-step loss within 1% relative,
#          weights within 0.1 relative (lr 1e-3, 4 steps; Adam turns bf16 rounding into
#          update-sized differences, ~lr per step);
#      and, when >= 2 GPUs are visible, FULL_SHARD on 2 NCCL ranks vs the same reference;
#   3. the throughput benchmark: Llama-2-7B shape, random init, bf16, FULL_SHARD,
#      activation checkpointing, seq 4096, world size 1; prints tokens/s, TFLOP/s, MFU;
#   4. its memory-fit estimate against the measured allocator peak.
# Environment: PYTHON (default python3), BUILD (default build-gpu), JOBS, BENCH_STEPS (6).
# Exits non-zero when a build step or a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
BUILD="${BUILD:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"

command -v nvidia-smi >/dev/null || { echo "run.sh: nvidia-smi not found: no NVIDIA GPU here" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
worker="${LLAMAFLEET_BIN:-build/bin}/llamafleet-worker"
if [ -x "$worker" ]; then
  "$worker" --check-health --log-level warn || echo "run.sh: the pre-flight failed (above)" >&2
else
  echo "gpu health: skipped: no $worker (build the main project's llamafleet-worker)"
fi
prefix="$("$PYTHON" -c 'import torch;print(torch.utils.cmake_prefix_path)')"
cuda_ok="$("$PYTHON" -c 'import torch;print(int(torch.cuda.is_available()))')"
abi="$("$PYTHON" -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
echo "torch $("$PYTHON" -c 'import torch;print(torch.__version__, torch.version.cuda)') at $prefix (cxx11 abi $abi)"
[ "$cuda_ok" = 1 ] || { echo "run.sh: this torch has no usable CUDA" >&2; exit 2; }
nccl_inc="$("$PYTHON" - <<'PY'
import os
try:
    import nvidia.nccl
    d = os.path.join(list(nvidia.nccl.__path__)[0], "include")
    print(d if os.path.exists(os.path.join(d, "nccl.h")) else "")
except Exception:
    print("")
PY
)"
[ -n "$nccl_inc" ] || for d in /usr/include /usr/local/cuda/include; do [ -f "$d/nccl.h" ] && nccl_inc="$d"; done
echo "nccl.h: ${nccl_inc:-not found (Gloo only)}"
if [ "$abi" = 0 ]; then
  echo "run.sh: note: this torch uses the pre-C++11 std::string ABI; the system's absl/CLI11 must" \
       "match it (or use a torch built with the C++11 ABI, e.g. >= 2.7)" >&2
fi

# The options tests/cuda/build.sh builds the trainer with on every CI run (there against
# Debian's CUDA LibTorch 2.6, without a GPU), so what compiles there compiles here.
mkdir -p "$BUILD"
cmake -S tests/gpu -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLAMAFLEET_WERROR_TRAINER=ON \
  -DCMAKE_PREFIX_PATH="$prefix" ${nccl_inc:+-DNCCL_INCLUDE_DIR="$nccl_inc"} >"$BUILD/configure.log" 2>&1 ||
  { tail -30 "$BUILD/configure.log" >&2; exit 1; }
grep -E "llamafleet: (CUDA|NCCL)" "$BUILD/configure.log" || true
cmake --build "$BUILD" -j"$JOBS" --target sharded_rank trainer_gpu_bench
bin="$BUILD/bin"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
common=(--steps 4 --global-rows 8 --micro-batch 2 --lr 1e-3 --device cuda --hidden 256 --heads 8
        --kv-heads 4 --ffn 688 --layers 2 --vocab 1000 --seq-len 128)
"$bin/sharded_rank" --engine local "${common[@]}" --out "$out/ref"
"$bin/sharded_rank" --strategy FULL_SHARD "${common[@]}" --out "$out/full"
"$bin/sharded_rank" --strategy FULL_SHARD --dtype bf16 "${common[@]}" --out "$out/bf16"
"$bin/sharded_rank" --strategy FULL_SHARD --dtype fp16 "${common[@]}" --out "$out/fp16"
ngpu="$(nvidia-smi -L | wc -l)"
if [ "$ngpu" -ge 2 ]; then
  port=$((20000 + RANDOM % 20000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin/sharded_rank" --strategy FULL_SHARD "${common[@]}" --out "$out/nccl2" &
  done
  wait
fi

"$PYTHON" - "$out" <<'PY'
import glob, json, os, struct, sys
import torch
out = sys.argv[1]
sys.path.insert(0, os.path.join("tests", "trainer"))  # run.sh runs from the repository root
from ranks import max_rel as rel, read_weights
def weights(d):
    return read_weights(os.path.join(d, "weights"))
def losses(d):
    return json.load(open(os.path.join(d, "rank-0.json")))["losses"]
ref_w, ref_l = weights(os.path.join(out, "ref")), losses(os.path.join(out, "ref"))
failed = False
for name, wtol, ltol in [("full", 1e-5, 1e-5), ("nccl2", 1e-5, 1e-5), ("bf16", 0.1, 0.01), ("fp16", 0.1, 0.01)]:
    d = os.path.join(out, name)
    if not os.path.exists(os.path.join(d, "rank-0.json")):
        continue
    w = rel(weights(d), ref_w)
    l = max(abs(x - y) / abs(y) for x, y in zip(losses(d), ref_l))
    ok = w <= wtol and l <= ltol
    failed |= not ok
    print(f"gpu equivalence {name:6s}: weights rel {w:.3g} (tol {wtol}), loss rel {l:.3g} (tol {ltol}) "
          f"{'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
PY

bench_line="$("$bin/trainer_gpu_bench" --preset llama2-7b --seq-len 4096 --micro-batch 1 --dtype bf16 \
  --strategy FULL_SHARD --activation-checkpointing --device cuda --steps "${BENCH_STEPS:-6}" --warmup 2)"
echo "$bench_line"
# 4. the memory-fit estimate (jobspec/memory_estimate.h) against the measured allocator peak.
"$PYTHON" - "$bench_line" <<'PY'
import json, sys
b = json.loads(sys.argv[1])
gib = lambda x: x / 2**30
est, meas = b["memory_estimate_bytes"], b["peak_device_memory_bytes"]
print(f"memory estimate {gib(est):.1f} GiB (peak at the end of {b['memory_estimate_phase']}) vs measured "
      f"allocator peak {gib(meas):.1f} GiB: estimate / measured {est / max(meas, 1):.2f} "
      f"(the estimate adds 1 GiB + 10% for the CUDA context, libraries and fragmentation)")
PY
