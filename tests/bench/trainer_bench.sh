#!/usr/bin/env bash
# Trainer throughput: llamafleet-train against the Python reference's training loop
# (tests/trainer/reference.py, plain PyTorch eager, Debian's python3-torch), same model,
# same data, same thread count, in the same run. Not part of ctest.
#
#   tests/bench/trainer_bench.sh [BIN_DIR]      (default: build/bin)
#   env: RUNS=3 STEPS=4 MICRO_BATCH=2 SEQ=256 VOCAB=32000 THREADS=2
#        BASELINE_BIN=DIR   also run DIR/llamafleet-train (an older build), alternated
#                           with the others in the same runs
#
# Model: 4 layers, dim 256, 8 heads / 4 kv heads, SwiGLU 688, fp32, AdamW, packing.
# Each run trains STEPS optimizer steps; the first step is warm-up and not timed. Figures
# are medians over RUNS runs of the per-step tokens/s; runs alternate between the
# programs so machine noise hits both. Also measured: llamafleet-train with LibTorch's
# own GEMM (LLAMAFLEET_CPU_GEMM=aten), the same kernels the Python loop uses, to show
# how much of the ratio is the oneDNN GEMM and how much the rest; and the host
# synchronisations per optimizer step that llamafleet-train counts (worker/trainer/
# host_sync.h: where a GPU run's host would wait for the device).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$(cd "${1:-$ROOT/build/bin}" && pwd)"
RUNS="${RUNS:-3}" STEPS="${STEPS:-4}" MB="${MICRO_BATCH:-2}" SEQ="${SEQ:-256}"
VOCAB="${VOCAB:-32000}" THREADS="${THREADS:-2}"
PY=/usr/bin/python3
REF="$ROOT/tests/trainer/reference.py"
TMP="$(mktemp -d /tmp/lf-trainer-bench-XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS="$THREADS"

"$PY" "$REF" make-model --out "$TMP/model" --layers 4 --hidden 256 --heads 8 --kv-heads 4 \
  --ffn 688 --vocab "$VOCAB" --max-pos 512 --seed 0 >/dev/null
"$PY" "$REF" make-data --out "$TMP/data.jsonl" --vocab "$VOCAB" --rows $((STEPS * MB)) \
  --min-len "$SEQ" --max-len "$SEQ" --seed 1 >/dev/null
cat > "$TMP/job.yaml" <<YAML
name: trainer-bench
model: {path: $TMP/model}
data: {train_path: $TMP/data.jsonl, format: TOKENS}
training: {max_steps: $STEPS, micro_batch_size: $MB, seq_len: $SEQ, batching: PACKING, lr: 0.0001, log_every: 1}
fsdp: {mixed_precision: FP32}
YAML

cpp_run() {  # GEMM BIN_DIR: prints per-step tokens/s of steps 2..N, one per line
  LLAMAFLEET_CPU_GEMM="$1" "$2/llamafleet-train" train --spec "$TMP/job.yaml" 2>"$TMP/stderr" |
    "$PY" -c 'import sys, json
m = [json.loads(l) for l in sys.stdin if "\"metrics\"" in l]
print("\n".join(str(x["tokens_per_s"]) for x in m[1:]))'
  # "host synchronisations: X per optimizer step (...)", from builds that count them
  sed -n 's/.*host synchronisations: \([0-9.]*\) per optimizer step.*/\1/p' "$TMP/stderr" > "$TMP/syncs-$3"
}
py_run() {
  "$PY" "$REF" train --model "$TMP/model" --data "$TMP/data.jsonl" --steps "$STEPS" \
    --micro-batch "$MB" --batching packing --seq-len "$SEQ" --format tokens --lr 1e-4 \
    --threads "$THREADS" |
    "$PY" -c 'import sys, json
r = json.loads(sys.stdin.read())
print("\n".join(str(t / s) for t, s in list(zip(r["step_tokens"], r["step_seconds"]))[1:]))'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: > "$TMP/cpp" ; : > "$TMP/py" ; : > "$TMP/aten" ; : > "$TMP/base"
BASE_BIN=""
[ -n "${BASELINE_BIN:-}" ] && BASE_BIN="$(cd "$BASELINE_BIN" && pwd)"
for ((r = 1; r <= RUNS; r++)); do
  cpp_run onednn "$BIN" cpp >> "$TMP/cpp"
  [ -n "$BASE_BIN" ] && cpp_run onednn "$BASE_BIN" base >> "$TMP/base"
  py_run >> "$TMP/py"
  cpp_run aten "$BIN" aten >> "$TMP/aten"
  echo "run $r/$RUNS done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done
CPP=$(median < "$TMP/cpp"); PYT=$(median < "$TMP/py"); ATEN=$(median < "$TMP/aten")
printf 'trainer benchmark: 4 layers, dim 256, 8/4 heads, ffn 688, vocab %s, seq %s, micro-batch %s, fp32, %s threads\n' \
  "$VOCAB" "$SEQ" "$MB" "$THREADS"
printf '  %-44s %10.1f tokens/s (median of %d steps)\n' "llamafleet-train (oneDNN GEMM, default)" "$CPP" "$(wc -l < "$TMP/cpp")"
printf '  %-44s %10.1f tokens/s\n' "llamafleet-train (LLAMAFLEET_CPU_GEMM=aten)" "$ATEN"
if [ -n "$BASE_BIN" ]; then
  BASE=$(median < "$TMP/base")
  printf '  %-44s %10.1f tokens/s (%s)\n' "baseline llamafleet-train (oneDNN GEMM)" "$BASE" "$BASE_BIN"
  awk -v c="$CPP" -v b="$BASE" 'BEGIN { printf "  ratio llamafleet-train / baseline: %.3fx\n", c / b }'
fi
printf '  %-44s %10s per optimizer step\n' "host synchronisations" "$(cat "$TMP/syncs-cpp")"
[ -n "$BASE_BIN" ] && printf '  %-44s %10s per optimizer step\n' "host synchronisations (baseline)" \
  "$(cat "$TMP/syncs-base" | grep . || echo 'not counted')"
printf '  %-44s %10.1f tokens/s\n' "Python reference loop (PyTorch eager)" "$PYT"
awk -v c="$CPP" -v a="$ATEN" -v p="$PYT" 'BEGIN {
  printf "  ratio llamafleet-train / Python: %.2fx (target >= 1.10x); same-GEMM ratio: %.2fx\n", c / p, a / p }'
