#!/usr/bin/python3
"""step_time_bench: the step-time estimate against llamafleet-train's measured CPU step time.

Usage: tests/bench/step_time_bench.py [--bin-dir build/bin] [--steps 5] [--json OUT]

Not part of ctest (a few minutes on a shared 2-core machine). For each shape (strategies,
activation checkpointing on and off, LoRA, tensor parallelism, gradient accumulation) it
  1. measures this machine as the estimate's "GPU", in CPU time, with as many concurrent
     one-thread processes as the run has ranks: the fp32 GEMM rate of the model's
     linear-layer shapes through oneDNN (Debian's python3-torch; the trainer's default CPU
     GEMM), that of attention's batched products through ATen's bmm (Debian builds it on
     a generic BLAS, ~15x slower), and the memory bandwidth (a copy); for 2 ranks also Gloo
     over loopback in wall time: all-reduce bus bandwidth (16 MiB), latency (4 bytes);
  2. runs llamafleet-train on 1 or 2 ranks (tests/trainer/ranks.py) for --steps
     steps and takes the median step time of steps 2.. (tokens of the step / tokens_per_s),
     and the share of a core each rank got (its CPU time / wall time / ranks): the machine
     is shared, so the rates the trainer could use are the one-core rates times that share;
  3. prints the estimate (step_time_estimate, built from jobspec/step_time_estimate.cc)
     with those rates in place of the GPU's, and the ratio estimate / measured.
Run it niced (`nice -n 5`): every process it starts inherits the same priority. Load
averages are printed beside each row.
"""
import argparse
import resource
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

PY = "/usr/bin/python3"
REF = os.path.join(ROOT, "tests", "trainer", "reference.py")
SHAPE = dict(hidden=256, ffn=688, layers=4, heads=8, kv_heads=4, vocab=4096, seq_len=256)

# Runs in a child process: prints {"gemm_flops_per_s", "memory_bytes_per_s"}.
MEASURE_DEVICE = r"""
import json, sys, time, torch
torch.set_num_threads(1)
h, f, v, t, kv, heads, seq = (int(x) for x in sys.argv[1:8])
# The trainer's linear layers run through oneDNN (its default CPU GEMM), attention's
# batched products through ATen's bmm.
lin = [(torch.randn(t, i).to_mkldnn(), torch.randn(o, i).to_mkldnn()) for i, o in ((h, h), (h, kv), (h, f), (f, h), (h, v))]
d = h // heads
q, k, p = torch.randn(t // seq * heads, seq, d), torch.randn(t // seq * heads, d, seq), torch.randn(t // seq * heads, seq, seq)
def linears():
    n = 0
    for x, w in lin:
        torch._C._nn.mkldnn_linear(x, w)
        n += 2 * t * x.size(1) * w.size(0)
    return n
def attention():
    torch.bmm(q, k); torch.bmm(p, q)
    return 2 * 2 * q.size(0) * seq * seq * d
def rate(fn):
    fn(); best = 0
    for _ in range(3):
        t0 = time.process_time(); n = fn() + fn() + fn()
        best = max(best, n / (time.process_time() - t0))
    return best
x = torch.randn(8 << 20); y = torch.empty_like(x)
y.copy_(x)
t0 = time.process_time()
for _ in range(5): y.copy_(x)
bw = 5 * 2 * x.numel() * 4 / (time.process_time() - t0)
print(json.dumps({"gemm_flops_per_s": rate(linears), "attention_flops_per_s": rate(attention), "memory_bytes_per_s": bw}))
"""

# Runs as two Gloo ranks over loopback: rank 0 prints {"link_bytes_per_s", "latency_s"}.
MEASURE_LINK = r"""
import json, os, time, torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
big, small = torch.ones(4 << 20), torch.ones(1)
for _ in range(3): dist.all_reduce(big); dist.all_reduce(small)
t0 = time.perf_counter()
for _ in range(5): dist.all_reduce(big)
per = (time.perf_counter() - t0) / 5
t0 = time.perf_counter()
for _ in range(50): dist.all_reduce(small)
lat = (time.perf_counter() - t0) / 50
n = dist.get_world_size()
if dist.get_rank() == 0:
    print(json.dumps({"link_bytes_per_s": 2 * big.numel() * 4 * (n - 1) / n / per, "latency_s": lat}))
"""

# name, ranks, spec fields, estimate arguments
CASES = [
    ("1 rank", 1, {}, {}),
    ("1 rank, checkpointing", 1, {"ac": True}, {"checkpointing": 1}),
    ("1 rank, grad_accum 2", 1, {"global_rows": 4}, {"grad_accum": 2}),
    ("FULL_SHARD x2", 2, {}, {"strategy": 0}),
    ("FULL_SHARD x2, checkpointing", 2, {"ac": True}, {"strategy": 0, "checkpointing": 1}),
    ("SHARD_GRAD_OP x2", 2, {"sharding": "SHARD_GRAD_OP"}, {"strategy": 1}),
    ("NO_SHARD x2", 2, {"sharding": "NO_SHARD"}, {"strategy": 3}),
    ("FULL_SHARD x2, LoRA r8 q,v", 2, {"lora": True}, {"strategy": 0, "lora_r": 8}),
    ("tensor_parallel 2", 2, {"tp": 2, "global_rows": 2}, {"tp": 2}),
]


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def measure_device(ranks, tokens):
    kv = SHAPE["kv_heads"] * SHAPE["hidden"] // SHAPE["heads"]
    args = [PY, "-c", MEASURE_DEVICE] + [str(x) for x in (SHAPE["hidden"], SHAPE["ffn"], SHAPE["vocab"], tokens, kv,
                                                          SHAPE["heads"], SHAPE["seq_len"])]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
             for _ in range(ranks)]
    out = [json.loads(p.communicate()[0]) for p in procs]
    return {k: statistics.median(o[k] for o in out) for k in out[0]}


def measure_link():
    procs = launch_ranks([PY, "-c", MEASURE_LINK], 2)
    codes, outs = wait_ranks(procs)
    if any(codes):
        sys.exit("link measurement failed: " + outs[0][1][-2000:])
    return json.loads(outs[0][0])


def write_spec(tmp, name, ranks, micro_batch, steps, sharding="FULL_SHARD", ac=False, lora=False, tp=1,
               global_rows=None):
    f = os.path.join(tmp, name.replace(" ", "_").replace(",", "") + ".yaml")
    rows = global_rows or micro_batch * (ranks // tp)
    with open(f, "w") as fh:
        fh.write(f"""name: step-time-bench
model: {{path: {tmp}/model}}
data: {{train_path: {tmp}/data.jsonl, format: TOKENS}}
training: {{max_steps: {steps}, micro_batch_size: {micro_batch}, global_batch_size: {rows}, seq_len: {SHAPE['seq_len']},
           batching: PACKING, lr: 0.0001, log_every: 1}}
resources: {{nodes: 1, gpus_per_node: {ranks}}}
fsdp: {{sharding: {sharding}, mixed_precision: FP32, reduce_precision: FP32, activation_checkpointing: {str(ac).lower()}}}
parallelism: {{tensor_parallel: {tp}}}
""")
        if lora:
            fh.write("peft: {method: lora, r: 8, alpha: 16, target_modules: [q_proj, v_proj]}\n")
    return f


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measured_step_s(bin_dir, spec, ranks):
    """(median step seconds, steps, the share of a core each rank got over the run)."""
    cpu0, wall0 = children_cpu_s(), time.perf_counter()
    procs = launch_ranks([os.path.join(bin_dir, "llamafleet-train"), "train", "--spec", spec], ranks)
    codes, outs = wait_ranks(procs, timeout=600)
    share = (children_cpu_s() - cpu0) / (time.perf_counter() - wall0) / ranks
    if any(codes):
        sys.exit(f"llamafleet-train failed on {spec}: {outs[0][1][-3000:]}")
    m = [x for x in json_lines(outs[0][0]) if x.get("type") == "metrics"]
    steps = []
    for prev, cur in zip(m, m[1:]):
        steps.append((cur["tokens"] - prev["tokens"]) / cur["tokens_per_s"])
    return statistics.median(steps), len(steps), min(1.0, share)


def estimate(bin_dir, dev, link, ranks, micro_batch, extra):
    args = dict(SHAPE, world=ranks, micro_batch=micro_batch, compute_bytes=4, reduce_bytes=4,
                peak_flops=dev["gemm_flops_per_s"], attention_flops=dev["attention_flops_per_s"], sustained=1, memory_bw=dev["memory_bytes_per_s"],
                link_bw=link["link_bytes_per_s"], latency=link["latency_s"], devices_per_node=64)
    args.update(extra)
    out = subprocess.run([os.path.join(bin_dir, "step_time_estimate")] + [f"{k}={v}" for k, v in args.items()],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lf-step-time-")
    subprocess.run([PY, REF, "make-model", "--out", f"{tmp}/model", "--layers", str(SHAPE["layers"]), "--hidden",
                    str(SHAPE["hidden"]), "--heads", str(SHAPE["heads"]), "--kv-heads", str(SHAPE["kv_heads"]),
                    "--ffn", str(SHAPE["ffn"]), "--vocab", str(SHAPE["vocab"]), "--max-pos", "512", "--seed", "0"],
                   check=True, capture_output=True)
    subprocess.run([PY, REF, "make-data", "--out", f"{tmp}/data.jsonl", "--vocab", str(SHAPE["vocab"]), "--rows",
                    "256", "--min-len", str(SHAPE["seq_len"]), "--max-len", str(SHAPE["seq_len"]), "--seed", "1"],
                   check=True, capture_output=True)
    link = measure_link()
    print(f"loopback Gloo: all-reduce bus bandwidth {link['link_bytes_per_s'] / 1e9:.2f} GB/s, "
          f"latency {link['latency_s'] * 1e6:.0f} us")
    rows = []
    print(f"{'shape':32} {'share':>5} {'GEMM GF/s':>9} {'bmm GF/s':>8} {'mem GB/s':>8} {'link GB/s':>9} {'estimate s':>10} {'measured s':>10} {'ratio':>6}  load")
    for name, ranks, spec_fields, est_fields in CASES:
        if a.only and a.only not in name:
            continue
        tp = spec_fields.get("tp", 1)
        micro_batch = a.micro_batch
        spec = write_spec(tmp, name, ranks, micro_batch, a.steps, **spec_fields)
        dev = measure_device(ranks, micro_batch * SHAPE["seq_len"])
        if ranks > 1:
            link = measure_link()
        measured, n, share = measured_step_s(a.bin_dir, spec, ranks)
        # The machine is shared: the trainer's ranks got `share` of a core each, so the
        # rates it could use are the one-core rates (measured in CPU time) times that.
        dev = dict(dev, share=share, **{k: dev[k] * share for k in
                                        ("gemm_flops_per_s", "attention_flops_per_s", "memory_bytes_per_s")})
        e = estimate(a.bin_dir, dev, link, ranks, micro_batch, est_fields)
        ratio = e["step_s"] / measured
        rows.append(dict(shape=name, ranks=ranks, tensor_parallel=tp, device=dev, link=link, estimate=e,
                         measured_step_s=measured, measured_steps=n, ratio=ratio, load=loadavg()))
        print(f"{name:32} {share:5.2f} {dev['gemm_flops_per_s'] / 1e9:9.2f} {dev['attention_flops_per_s'] / 1e9:8.2f} "
              f"{dev['memory_bytes_per_s'] / 1e9:8.2f} {link['link_bytes_per_s'] / 1e9 if ranks > 1 else 0:9.2f} "
              f"{e['step_s']:10.3f} {measured:10.3f} {ratio:6.2f}  {loadavg()}", flush=True)
    within = sum(1 for r in rows if 0.7 <= r["ratio"] <= 1.3)
    print(f"{within} of {len(rows)} shapes within +-30%")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(link=link, shape=SHAPE, rows=rows), fh, indent=1)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
