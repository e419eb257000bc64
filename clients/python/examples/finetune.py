#!/usr/bin/env python3
"""Finetune the `tiny` Llama-2 preset from Python, the way a notebook would: each `# %%`
cell runs on its own in Jupyter or VS Code, or the whole file as a script.

    export LLAMAFLEET_COORDINATOR=127.0.0.1:7070   # and LLAMAFLEET_TOKEN when auth is on
    PYTHONPATH=build/python python3 clients/python/examples/finetune.py [DATA_DIR]

DATA_DIR (default ./var/demo, the root deploy/local/demo.sh --keep gives its coordinator)
must be inside one of the coordinator's --path-root directories and readable by its
workers: the script writes a small token dataset there. The job is the demo's: the tiny
preset (2 layers, dim 64, seeded random init), FULL_SHARD over one CPU rank per worker
(up to two), a checkpoint every 10 steps. It finishes in seconds on CPUs.
"""

# %% Connect: the address, token and TLS CA come from the same variables the CLI reads.
import json
import os
import random
import sys

import llamafleet

client = llamafleet.Client()
me = client.whoami()
print("coordinator %s, calling as %s (%s)" % (client.address, me.user, llamafleet.job_pb2.Role.Name(me.role)))
ready = [w for w in client.workers() if w.state == llamafleet.worker_pb2.WORKER_READY]
print("%d workers ready: %s" % (len(ready), ", ".join(w.name for w in ready)))
if not ready:
    sys.exit("no worker is ready: start one (deploy/local/demo.sh --keep starts two)")

# %% Data: 64 sequences of 33 token ids, used exactly as given (data.format: tokens).
data_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join("var", "demo"))
os.makedirs(data_dir, exist_ok=True)
train_path = os.path.join(data_dir, "python-example-train.jsonl")
rng = random.Random(7)
with open(train_path, "w") as f:
    for _ in range(64):
        f.write(json.dumps({"input_ids": [3 + rng.randrange(500) for _ in range(33)]}) + "\n")

# %% The job, as a dict in the job file's shape (a YAML path or a JobSpec work too).
spec = {
    "name": "python-example",
    "labels": {"example": "finetune-py"},
    "model": {"preset": "tiny"},
    "data": {"train_path": train_path, "format": "tokens"},
    "training": {"max_steps": 30, "micro_batch_size": 2, "seq_len": 32, "lr": 3e-3,
                 "lr_schedule": {"type": "cosine", "warmup_steps": 3}, "log_every": 5},
    "fsdp": {"sharding": "full_shard", "mixed_precision": "fp32", "activation_checkpointing": False},
    "resources": {"nodes": min(2, len(ready)), "gpus_per_node": 1},
    "checkpoint": {"every_steps": 10, "keep_last": 2},
    "run_policy": {"max_restarts": 1, "restart_backoff_seconds": 2},
}
preview = client.submit(spec, dry_run=True)
estimate = preview.memory_estimate
print("valid; about %.1f MiB per rank at its peak" % (estimate.total_bytes / 2**20))

# %% Submit, and watch it train: a progress bar on a terminal, a line per change elsewhere.
job = client.submit(spec)
print("job %s submitted" % job.id)
job = client.wait(job.id, timeout=600)
print("job %s %s: %s" % (job.id, llamafleet.state_name(job.state), job.status_reason))

# %% Its logs: rank 0's last lines, less the trainer's JSON event records. follow=True (the
# default) streams until the job ends: here at once, since it has.
for line in client.logs(job.id, rank=0, tail_lines=20):
    if not line.text.startswith("{"):
        print("  rank %d | %s" % (line.rank, line.text))

# %% Its metrics: a pandas DataFrame when pandas is installed, else a list of MetricsPoint.
points = client.metrics(job.id, as_frame=False)
for p in points:
    print("  step %3d/%d  loss %.4f  lr %.2e  %8.0f tok/s" % (p.step, p.total_steps, p.loss, p.lr,
                                                             p.tokens_per_second))

# %% Checkpoints and attempts.
for c in client.checkpoints(job.id):
    print("  checkpoint step %d (%d bytes): %s" % (c.step, c.bytes, c.path))
for a in client.attempts(job.id):
    print("  attempt %d %s on %s" % (a.attempt, llamafleet.job_pb2.AttemptState.Name(a.state),
                                     ", ".join(t.worker for t in a.tasks)))

# %% GPU time and cost: every attempt's ranks (CPU ranks here) x its wall time, priced by the
# coordinator's `pricing` per instance-hour of the workers' instance types (None: not priced).
usage = llamafleet.usage_of(job)
print("GPU time: %.1f GPU-seconds (failed attempts %.1f)" % (usage.gpu_seconds, usage.failed_gpu_seconds))
print("cost: %s" % ("%.4f" % usage.cost if usage.cost is not None else "not priced (no pricing for these workers)"))

sys.exit(0 if job.state == llamafleet.JobState.Value("SUCCEEDED") else 1)
