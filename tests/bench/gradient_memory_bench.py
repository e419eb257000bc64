#!/usr/bin/python3
"""gradient_memory_bench: peak memory per rank in backward, deep narrow models, with the
engine's bound on reductions in flight (the default, 2) and without it (every unit's
reduce-scatter input held until the end of backward, as the engine did before the bound).

Usage: tests/bench/gradient_memory_bench.py --bin-dir build/bin [--runs 3]

2 Gloo ranks of `sharded_rank`, FULL_SHARD, fp32, layer counts 12, 24 and 48 of one
narrow shape; bounded and unbounded runs alternate, medians over --runs. Prints the
engine's peak bytes of gradient reductions in flight (unsharded inputs, outputs and Gloo's
all-to-all receive buffers: the "communication" term of the memory estimate), peak RSS per
rank, and the estimate's communication term for the same shape. Bounded, the
communication term must not grow with the layer count.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import launch_ranks  # noqa: E402

H, FFN, HEADS, KV, VOCAB = 256, 688, 8, 4, 512


def unit_params(layers):
    kv = KV * (H // HEADS)
    layer = 2 * H + 2 * H * H + 2 * H * kv + 3 * H * FFN
    embed = VOCAB * H
    return layer, max(layer, embed, H + embed), embed + layers * layer + H + embed


def run(rank_bin, out, layers, inflight):
    argv = [rank_bin, "--strategy", "FULL_SHARD", "--hidden", str(H), "--ffn", str(FFN), "--heads", str(HEADS),
            "--kv-heads", str(KV), "--vocab", str(VOCAB), "--layers", str(layers), "--seq-len", "64",
            "--micro-batch", "2", "--grad-accum", "1", "--steps", "2", "--inflight-reduces", str(inflight),
            "--out", out]
    procs = launch_ranks(argv, 2)
    for p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            sys.exit(f"rank failed ({p.returncode}): {' '.join(argv)}\n{err[-3000:]}")
    reps = [json.load(open(os.path.join(out, f"rank-{r}.json"))) for r in range(2)]
    return max(r["peak_reduce_bytes"] for r in reps), max(r["peak_rss_bytes"] for r in reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", default="12,24,48")
    a = ap.parse_args()
    rank_bin = os.path.join(a.bin_dir, "sharded_rank")
    layer_counts = [int(x) for x in a.layers.split(",")]
    modes = {"bounded (K=2)": 2, "unbounded": 1 << 20}
    results = {(m, L): [] for m in modes for L in layer_counts}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            for L in layer_counts:
                for m, k in modes.items():
                    results[(m, L)].append(run(rank_bin, os.path.join(tmp, f"{i}-{L}-{k}"), L, k))
            print(f"run {i + 1}/{a.runs} done", file=sys.stderr, flush=True)
    mib = lambda b: b / 2**20
    print(f"gradient_memory_bench: 2 Gloo ranks, FULL_SHARD fp32, h{H} ffn{FFN} H{HEADS}/KV{KV} V{VOCAB}, "
          f"micro-batch 2 x 64 tokens; medians of {a.runs} runs")
    print(f"{'layers':>6} {'mode':<15}{'reductions in flight':>22}{'peak RSS/rank':>15}{'estimate comm':>15}")
    for L in layer_counts:
        _, U, P = unit_params(L)
        for m, k in modes.items():
            comm = statistics.median(r[0] for r in results[(m, L)])
            rss = statistics.median(r[1] for r in results[(m, L)])
            inflight = min((k + 1) * U, P)
            est = inflight * 4 * 2 + (inflight * 4 + 1) // 2
            print(f"{L:>6} {m:<15}{mib(comm):>18.1f} MiB{mib(rss):>11.0f} MiB{mib(est):>11.1f} MiB")


if __name__ == "__main__":
    main()
