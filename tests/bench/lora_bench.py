#!/usr/bin/python3
"""lora_bench: LoRA against full finetuning of the same model and batch, same run.

Usage: tests/bench/lora_bench.py --bin-dir build/bin [--runs 3] [--steps 12] [--only NAME,NAME]

2 Gloo ranks of llamafleet-train, FULL_SHARD, fp32, one seeded model (dim 512, 4 layers,
vocab 2000), micro-batch 4 x 256 tokens. Configurations, run in turn --runs times:
full finetuning, LoRA r 16 on q_proj/v_proj, LoRA r 16 on all seven projections, QLoRA
(an NF4 base) r 16 on all seven (--only picks some; ratios are then to the first). Prints
per configuration (medians): tokens/s after the first two steps and its ratio to full
finetuning, peak RSS per rank against the trainer's memory estimate, the trainable
parameters, and the bytes of the checkpoint written at the end.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

CONFIGS = {
    "full": "",
    "LoRA r16 q,v": "peft: {method: lora, r: 16, alpha: 32, dropout: 0, target_modules: [q_proj, v_proj]}",
    "LoRA r16 all 7": "peft: {method: lora, r: 16, alpha: 32, dropout: 0, target_modules: "
                      "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}",
    "QLoRA r16 all 7": "peft: {method: qlora, r: 16, alpha: 32, dropout: 0, target_modules: "
                       "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}",
}


def run_once(binary, tmp, name, peft, model, data, steps):
    d = os.path.join(tmp, name.replace(" ", "_").replace(",", ""))
    os.makedirs(d, exist_ok=True)
    spec = os.path.join(d, "job.yaml")
    with open(spec, "w") as f:
        f.write("""
name: bench
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 4, grad_accum: 1, seq_len: 256, lr: 0.0001, log_every: 1}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
checkpoint: {dir: %s, async: false}
%s
""" % (model, data, steps, os.path.join(d, "ck"), peft))
    codes, outs = wait_ranks(launch_ranks([binary, "train", "--spec", spec], 2), timeout=1800)
    for c, (_, err) in zip(codes, outs):
        if c != 0:
            sys.exit("%s failed:\n%s" % (name, err[-3000:]))
    lines = json_lines(outs[0][0])
    metrics = [l for l in lines if l.get("type") == "metrics"]
    started = next(l for l in lines if l.get("event") == "started")
    saved = [l for l in lines if l.get("event") == "checkpoint_saved"]
    return {"tokens_per_s": statistics.median(m["tokens_per_s"] for m in metrics[2:]),
            "peak": metrics[-1]["peak_mem_bytes"], "estimate": started["memory_estimate"]["total_bytes"],
            "trainable": started["trainable_parameters"], "checkpoint_bytes": saved[-1]["bytes"] if saved else 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--only", default="", help="comma-separated configuration names")
    a = ap.parse_args()
    configs = {n: p for n, p in CONFIGS.items() if not a.only or n in a.only.split(",")}
    binary = os.path.join(a.bin_dir, "llamafleet-train")
    results = {n: [] for n in configs}
    with tempfile.TemporaryDirectory(prefix="lf-lora-bench-") as tmp:
        model = os.path.join(tmp, "model")
        ref.run_command(["make-model", "--out", model, "--layers", 4, "--hidden", 512, "--heads", 8, "--kv-heads", 8,
                         "--ffn", 1376, "--vocab", 2000, "--seed", 1])
        data = os.path.join(tmp, "data.jsonl")
        ref.run_command(["make-data", "--out", data, "--vocab", 2000, "--rows", 400, "--min-len", 200,
                         "--max-len", 256, "--seed", 2])
        for run in range(a.runs):
            for name, peft in configs.items():
                results[name].append(run_once(binary, tmp, name, peft, model, data, a.steps))
                print("run %d %-15s %.0f tokens/s" % (run + 1, name, results[name][-1]["tokens_per_s"]),
                      file=sys.stderr)
    med = lambda n, k: statistics.median(r[k] for r in results[n])
    base = med(next(iter(configs)), "tokens_per_s")
    mib = lambda b: b / 2**20
    print("| configuration | tokens/s | vs %s | trainable params | peak RSS/rank | estimate | checkpoint |"
          % next(iter(configs)))
    print("|---|---|---|---|---|---|---|")
    for n in configs:
        print("| %s | %.0f | %.2fx | %d | %.0f MiB | %.0f MiB | %.2f MiB |" % (
            n, med(n, "tokens_per_s"), med(n, "tokens_per_s") / base, med(n, "trainable"), mib(med(n, "peak")),
            mib(med(n, "estimate")), mib(med(n, "checkpoint_bytes"))))


if __name__ == "__main__":
    main()
