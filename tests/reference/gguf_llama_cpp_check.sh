#!/usr/bin/env bash
# The GGUF export against Debian sid's llama.cpp and python3-gguf (not part of ctest: CI has
# no sid root). Makes small random Llama and Qwen2 models in the sid root, exports each with
# `llamafleet-train export --gguf {f16,bf16,q8_0}`, evaluates the HF model with
# `llamafleet-train eval`, then checks in the sid root that python3-gguf reads every key
# and tensor and that llama.cpp's loss on the same tokens agrees (gguf_consumer.py).
#
#   tests/reference/gguf_llama_cpp_check.sh [BUILD_DIR]     # default build; 1-4 minutes
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
train="$build/bin/llamafleet-train"
work=build/gguf-check  # under the checkout: the sid root sees it as /src/build/gguf-check
rm -rf "$work" && mkdir -p "$work"
tests/reference/sid_root.sh python3 tests/reference/gguf_consumer.py make "/src/$work"
for model in llama qwen2; do
  "$train" eval --model "$work/$model" --data "$work/$model/tokens.jsonl" --format tokens --batching padding \
    --device cpu | tail -1 >"$work/$model.eval.json"
  echo "$model: llamafleet-train eval $(cat "$work/$model.eval.json")"
  for dtype in f16 bf16 q8_0; do
    "$train" export --checkpoint "$work/$model" --out "$work/$model-$dtype" --dtype fp32 --gguf "$dtype" 2>/dev/null
  done
done
tests/reference/sid_root.sh python3 tests/reference/gguf_consumer.py check "/src/$work"
