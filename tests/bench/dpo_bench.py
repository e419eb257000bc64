#!/usr/bin/python3
"""dpo_bench: a DPO step against an SFT step on the same pairs, same run.

Usage: tests/bench/dpo_bench.py --bin-dir build/bin [--runs 3] [--steps 8]

1 rank of llamafleet-train, fp32, one seeded model (dim 256, 4 layers, vocab 2000), LoRA
r 16 on q_proj/v_proj, 64 pre-tokenized pairs (prompt 64-128 tokens, answers 32-96). DPO:
micro-batch 4 pairs. SFT: the same 8 rows per step (prompt + chosen, prompt + rejected as
TOKENS records, every token a target), micro-batch 8 rows, padding. Prints the median
seconds per step after the first two steps of each, and their ratio.
"""
import argparse
import json
import os
import random
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

PEFT = "peft: {method: lora, r: 16, alpha: 32, dropout: 0, target_modules: [q_proj, v_proj]}"


def make_data(tmp, pairs=64, vocab=2000, seed=3):
    rng = random.Random(seed)
    pref, sft = os.path.join(tmp, "pairs.jsonl"), os.path.join(tmp, "rows.jsonl")
    with open(pref, "w") as fp, open(sft, "w") as fs:
        for _ in range(pairs):
            p = [rng.randrange(vocab) for _ in range(rng.randint(64, 128))]
            c = [rng.randrange(vocab) for _ in range(rng.randint(32, 96))]
            r = [rng.randrange(vocab) for _ in range(rng.randint(32, 96))]
            fp.write(json.dumps({"prompt_input_ids": p, "chosen_input_ids": c, "rejected_input_ids": r}) + "\n")
            fs.write(json.dumps({"input_ids": p + c}) + "\n" + json.dumps({"input_ids": p + r}) + "\n")
    return pref, sft


def run_once(binary, tmp, name, model, data, fmt, training, steps):
    spec = os.path.join(tmp, name + ".yaml")
    with open(spec, "w") as f:
        f.write("""
name: bench
model: {path: %s}
data: {train_path: %s, format: %s}
training: {max_steps: %d, grad_accum: 1, seq_len: 256, batching: PADDING, lr: 0.0001, log_every: 1, %s}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
%s
""" % (model, data, fmt, steps, training, PEFT))
    env = {"LLAMAFLEET_TOKEN_CACHE_DIR": os.path.join(tmp, "tokens")}
    codes, outs = wait_ranks(launch_ranks([binary, "train", "--spec", spec], 1, env_extra=env), timeout=1800)
    if codes[0] != 0:
        sys.exit("%s failed:\n%s" % (name, outs[0][1][-3000:]))
    metrics = [l for l in json_lines(outs[0][0]) if l.get("type") == "metrics"]
    # Each line covers one step: its tokens over its tokens/s.
    seconds, prev = [], 0
    for m in metrics:
        seconds.append((m["tokens"] - prev) / m["tokens_per_s"])
        prev = m["tokens"]
    return statistics.median(seconds[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    binary = os.path.join(a.bin_dir, "llamafleet-train")
    with tempfile.TemporaryDirectory(prefix="lf-dpo-bench-") as tmp:
        model = os.path.join(tmp, "model")
        ref.run_command(["make-model", "--out", model, "--hidden", 256, "--heads", 4, "--kv-heads", 4, "--ffn", 688,
                         "--layers", 4, "--vocab", 2000, "--max-pos", 512, "--seed", 1])
        pref, rows = make_data(tmp)
        got = {"sft": [], "dpo": []}
        for _ in range(a.runs):
            got["sft"].append(run_once(binary, tmp, "sft", model, rows, "TOKENS", "micro_batch_size: 8", a.steps))
            got["dpo"].append(run_once(binary, tmp, "dpo", model, pref, "PREFERENCE",
                                       "micro_batch_size: 4, objective: dpo", a.steps))
        sft, dpo = statistics.median(got["sft"]), statistics.median(got["dpo"])
        print("SFT step (8 rows, 4 pairs): %.3f s" % sft)
        print("DPO step (4 pairs):         %.3f s" % dpo)
        print("DPO / SFT:                  %.2fx" % (dpo / sft))


if __name__ == "__main__":
    main()
