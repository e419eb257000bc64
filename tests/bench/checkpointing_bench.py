#!/usr/bin/python3
"""checkpointing_bench: the trainer's activation checkpointing modes on the CPU.

Usage: tests/bench/checkpointing_bench.py --bin-dir build/bin [--runs 3] [--world 1]

Trains the same model on the same synthetic data with `sharded_rank` (FULL_SHARD,
fp32, one OpenMP thread per rank; --world ranks on Gloo) under
fsdp.activation_checkpointing none, full and selective. Runs alternate between the modes
so drift on a shared machine hits all of them; figures are medians over --runs of the
timed steps' tokens/s (after --warmup steps) and of each run's largest per-rank peak RSS.
Not part of ctest.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import launch_ranks, wait_ranks  # noqa: E402

MODES = ["none", "full", "selective"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--world", type=int, default=1)
    a = ap.parse_args()
    shape = ["--hidden", "256", "--layers", "4", "--heads", "8", "--kv-heads", "4", "--ffn", "688",
             "--vocab", "4096", "--seq-len", "256", "--micro-batch", "4", "--grad-accum", "1",
             "--global-rows", str(4 * a.world)]
    common = shape + ["--strategy", "FULL_SHARD", "--steps", str(a.steps), "--warmup", str(a.warmup),
                      "--clip", "0", "--lr", "1e-3"]
    rank_bin = os.path.join(a.bin_dir, "sharded_rank")
    tps = {m: [] for m in MODES}
    rss = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            for m in MODES:
                od = os.path.join(tmp, f"{m}-{run}")
                codes, outs = wait_ranks(launch_ranks(
                    [rank_bin, "--activation-checkpointing-mode", m, "--out", od] + common, a.world), timeout=900)
                if any(codes):
                    sys.exit(f"{m}: rank failed {codes}\n{outs[0][1][-3000:]}")
                reps = [json.load(open(os.path.join(od, f"rank-{r}.json"))) for r in range(a.world)]
                tps[m].append(reps[0]["tokens_per_s"])
                rss[m].append(max(r["peak_rss_bytes"] for r in reps))
            print(f"run {run + 1}/{a.runs}: " + ", ".join(f"{m} {v[-1]:.0f} tok/s" for m, v in tps.items()),
                  file=sys.stderr, flush=True)
    print(f"checkpointing_bench: FULL_SHARD, {a.world} Gloo rank(s), 1 thread each; model h256 L4 H8/KV4 "
          f"ffn688 V4096, seq 256, 4 rows per rank; medians of {a.runs} runs")
    base = statistics.median(tps["none"])
    print(f"{'mode':<12}{'tokens/s':>10}{'vs none':>9}{'peak RSS/rank':>16}")
    for m in MODES:
        t = statistics.median(tps[m])
        print(f"{m:<12}{t:>10.0f}{t / base:>8.2f}x{statistics.median(rss[m]) / 2**20:>13.0f} MiB")


if __name__ == "__main__":
    main()
