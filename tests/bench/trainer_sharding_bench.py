#!/usr/bin/python3
"""trainer_sharding_bench: the sharding engine on 2 Gloo ranks vs PyTorch DDP.

Usage: tests/bench/trainer_sharding_bench.py --bin-dir build/bin [--runs 3]

For each strategy (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD) it starts 2 `sharded_rank`
processes (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT on loopback, OMP_NUM_THREADS=1 each),
and, as the baseline, 2 ranks of trainer_sharding_ddp.py (PyTorch's own
DistributedDataParallel on Gloo, Debian's /usr/bin/python3) training the same model shape
on the same synthetic data with AdamW. Runs alternate (baseline, strategies) so drift on
a shared machine hits all of them; figures are medians over --runs. Prints tokens/s,
per-rank peak RSS and per-rank persistent engine bytes, and each strategy's ratio to the
DDP baseline. Targets: NO_SHARD >= 1.0x DDP, FULL_SHARD >= 0.8x with per-rank state <= 1/N.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import launch_ranks  # noqa: E402


def launch(argvs, world=2, timeout=600):
    procs = launch_ranks(argvs, world)
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            sys.exit(f"rank failed ({p.returncode}): {' '.join(argvs)}\n{err[-3000:]}")
        outs.append(out)
    return outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    shape = ["--hidden", "256", "--layers", "4", "--heads", "8", "--kv-heads", "4", "--ffn", "688",
             "--vocab", "4096", "--seq-len", "256", "--global-rows", "4"]
    common = shape + ["--steps", str(a.steps), "--warmup", str(a.warmup)]
    rank_bin = os.path.join(a.bin_dir, "sharded_rank")
    strategies = ["NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD"]
    tps = {k: [] for k in ["DDP"] + strategies}
    rss = {k: [] for k in tps}
    state = {k: [] for k in strategies}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(a.runs):
            out = launch(["/usr/bin/python3", os.path.join(HERE, "trainer_sharding_ddp.py")] + common)
            d = json.loads(out[0].strip().splitlines()[-1])
            tps["DDP"].append(d["tokens_per_s"])
            rss["DDP"].append(max(d["peak_rss_bytes"]))
            for s in strategies:
                od = os.path.join(tmp, f"{s}-{run}")
                launch([rank_bin, "--strategy", s, "--micro-batch", "2", "--grad-accum", "1", "--clip", "0",
                        "--lr", "1e-3", "--weight-decay", "0", "--out", od] + common)
                reps = [json.load(open(os.path.join(od, f"rank-{r}.json"))) for r in range(2)]
                tps[s].append(reps[0]["tokens_per_s"])
                rss[s].append(max(r["peak_rss_bytes"] for r in reps))
                state[s].append(max(r["persistent_bytes"] for r in reps))
            print(f"run {run + 1}/{a.runs}: " + ", ".join(f"{k} {v[-1]:.0f} tok/s" for k, v in tps.items()),
                  file=sys.stderr, flush=True)
    base = statistics.median(tps["DDP"])
    print(f"trainer_sharding_bench: 2 Gloo ranks, 1 thread each; model h256 L4 H8/KV4 ffn688 V4096, "
          f"seq 256, global batch 4 rows; medians of {a.runs} runs")
    print(f"{'engine':<16}{'tokens/s':>10}{'vs DDP':>9}{'peak RSS/rank':>16}{'state/rank':>14}")
    print(f"{'PyTorch DDP':<16}{base:>10.0f}{1.0:>8.2f}x{statistics.median(rss['DDP']) / 2**20:>13.0f} MiB{'':>14}")
    for s in strategies:
        m = statistics.median(tps[s])
        print(f"{s:<16}{m:>10.0f}{m / base:>8.2f}x{statistics.median(rss[s]) / 2**20:>13.0f} MiB"
              f"{statistics.median(state[s]) / 2**20:>10.1f} MiB")
    full, none = statistics.median(state["FULL_SHARD"]), statistics.median(state["NO_SHARD"])
    print(f"FULL_SHARD state / NO_SHARD state = {full / none:.3f} (1/N = 0.5 plus padding)")
    print(f"targets: NO_SHARD >= 1.0x DDP: {statistics.median(tps['NO_SHARD']) / base:.2f}x; "
          f"FULL_SHARD >= 0.8x: {statistics.median(tps['FULL_SHARD']) / base:.2f}x")


if __name__ == "__main__":
    main()
