#!/usr/bin/python3
"""tensor_parallel_bench: tensor parallelism against FULL_SHARD on the same ranks, same run.

Usage: tests/bench/tensor_parallel_bench.py --bin-dir build/bin [--runs 3] [--steps 10]

4 Gloo ranks of llamafleet-train on one "node", fp32, one seeded model (dim 512, 8 heads,
4 layers, vocab 2000), global batch 8 rows x 256 tokens in micro-batches of 2. Layouts,
run in turn --runs times: T=1 (FULL_SHARD over 4), T=2 x DP=2, T=4 x DP=1. Prints per
layout (medians): tokens/s after the first two steps and its ratio to T=1, and rank 0's
peak RSS against the trainer's memory estimate.
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

LAYOUTS = (1, 2, 4)


def run_once(binary, tmp, tp, model, data, steps):
    d = os.path.join(tmp, "tp%d" % tp)
    os.makedirs(d, exist_ok=True)
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write("""
name: bench
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 2, global_batch_size: 8, seq_len: 256, lr: 0.0001, log_every: 1}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
resources: {nodes: 1, gpus_per_node: 4}
parallelism: {tensor_parallel: %d}
""" % (model, data, steps, tp))
    codes, outs = wait_ranks(launch_ranks([binary, "train", "--spec", spec], 4, local_world=4), timeout=1800)
    for c, (_, err) in zip(codes, outs):
        if c != 0:
            sys.exit("T=%d failed:\n%s" % (tp, err[-3000:]))
    lines = json_lines(outs[0][0])
    metrics = [l for l in lines if l.get("type") == "metrics"]
    started = next(l for l in lines if l.get("event") == "started")
    return {"tokens_per_s": statistics.median(m["tokens_per_s"] for m in metrics[2:]),
            "peak": metrics[-1]["peak_mem_bytes"], "estimate": started["memory_estimate"]["total_bytes"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    binary = os.path.join(a.bin_dir, "llamafleet-train")
    results = {t: [] for t in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="lf-tp-bench-") as tmp:
        model = os.path.join(tmp, "model")
        ref.run_command(["make-model", "--out", model, "--layers", 4, "--hidden", 512, "--heads", 8, "--kv-heads", 8,
                         "--ffn", 1376, "--vocab", 2000, "--seed", 1])
        data = os.path.join(tmp, "data.jsonl")
        ref.run_command(["make-data", "--out", data, "--vocab", 2000, "--rows", 400, "--min-len", 200,
                         "--max-len", 256, "--seed", 2])
        for run in range(a.runs):
            for t in LAYOUTS:
                results[t].append(run_once(binary, tmp, t, model, data, a.steps))
                print("run %d T=%d %.0f tokens/s" % (run + 1, t, results[t][-1]["tokens_per_s"]), file=sys.stderr)
    med = lambda t, k: statistics.median(r[k] for r in results[t])
    base = med(1, "tokens_per_s")
    mib = lambda b: b / 2**20
    print("| layout (4 ranks) | tokens/s | vs T=1 | peak RSS rank 0 | estimate |")
    print("|---|---|---|---|---|")
    for t in LAYOUTS:
        name = "FULL_SHARD x 4" if t == 1 else "T=%d x DP=%d" % (t, 4 // t)
        print("| %s | %.0f | %.2fx | %.0f MiB | %.0f MiB |" % (
            name, med(t, "tokens_per_s"), med(t, "tokens_per_s") / base, mib(med(t, "peak")), mib(med(t, "estimate"))))


if __name__ == "__main__":
    main()
