#!/usr/bin/python3
"""llamafleet-train with the sharding engine, end to end through the command line.

Ranks are separate llamafleet-train processes started by hand with the torchrun-style
environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) on
loopback, exactly as the worker starts them. Checks: 2 ranks (FULL_SHARD, and HYBRID_SHARD
on 4) equal 1 rank on the same global batch (losses and exported weights within 1e-5
relative, the weights 2e-5: see the test); the checkpoint_saved event carries path, step, bytes, manifest_sha256, loss;
SIGTERM makes every rank checkpoint and exit 0, and `checkpoint.resume: latest` continues
to the uninterrupted run's losses exactly; `export --checkpoint` consolidates a sharded
checkpoint; `--resume` of a truncated checkpoint fails with a clear error; a rank that
reaches the rendezvous before rank 0 listens joins as soon as it does.

Usage: test_sharded_train.py BIN_DIR
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import free_port, json_lines, launch_ranks, max_rel, rank_env, read_weights, wait_ranks  # noqa: E402,F401

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin")
TRAIN = os.path.join(BIN, "llamafleet-train")


class ShardedTrain(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sharded-train-")
        rng = random.Random(3)
        self.data = os.path.join(self.tmp, "d.jsonl")
        with open(self.data, "w") as f:
            for _ in range(32):
                f.write(json.dumps({"input_ids": [rng.randrange(500) for _ in range(rng.randrange(20, 70))]}) + "\n")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spec(self, name, world, extra="", steps=4, sharding="FULL_SHARD"):
        # Global batch: 4 rows = micro 2 x grad_accum (4 / (2 * world)) x world.
        accum = 4 // (2 * world)
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write("""
name: %s
model: {preset: tiny-gqa}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 2, grad_accum: %d, seq_len: 32, lr: 0.001, weight_decay: 0.1,
           grad_clip: 1.0, log_every: 1, batching: PACKING}
fsdp: {sharding: %s, mixed_precision: FP32, activation_checkpointing: false}
%s
""" % (name, self.data, steps, accum, sharding, extra))
        return path

    def launch(self, world, args, env_extra=None):
        # HYBRID_SHARD on 4 ranks: two "nodes" of two local ranks each.
        return launch_ranks([TRAIN] + args, world, local_world=2,
                            env_extra=dict(env_extra or {}, LLAMAFLEET_CPU_GEMM="onednn"))

    def run_ranks(self, world, args, check=True):
        codes, outs = wait_ranks(self.launch(world, args))
        if check:
            for code, (o, e) in zip(codes, outs):
                self.assertEqual(code, 0, e[-3000:])
        return codes, outs

    def metrics(self, out):
        return [l["loss"] for l in json_lines(out) if l.get("type") == "metrics"]

    def test_rendezvous_joins_as_soon_as_rank_0_listens(self):
        # Rank 1 reaches the rendezvous well before rank 0 listens. It must join as soon as
        # rank 0 does, not after the TCPStore client's one-second back-off: rank 0's own
        # rendezvous (listen, then wait for every rank) stays short.
        port = free_port()
        argv = [TRAIN, "train", "--spec", self.spec("late0", 2), "--device", "cpu"]
        start = lambda r: subprocess.Popen(argv, env=rank_env(r, 2, port), stdout=subprocess.PIPE,  # noqa: E731
                                           stderr=subprocess.PIPE, text=True)
        early = start(1)
        time.sleep(0.5)
        codes, outs = wait_ranks([start(0), early])
        for code, (_, e) in zip(codes, outs):
            self.assertEqual(code, 0, e[-3000:])
        took = [l["seconds"] for l in json_lines(outs[0][0]) if l.get("phase") == "rendezvous"]
        self.assertEqual(len(took), 1)
        self.assertLess(took[0], 0.4)

    def test_ranks_equal_single_process_and_checkpoint_events(self):
        ck1, ck2 = os.path.join(self.tmp, "c1"), os.path.join(self.tmp, "c2")
        ex1, ex2, ex4 = (os.path.join(self.tmp, n) for n in ("e1", "e2", "e4"))
        _, one = self.run_ranks(1, ["train", "--spec", self.spec("one", 1,
                                "checkpoint: {dir: %s, every_steps: 2}\noutput: {export_dir: %s, export_dtype: FP32}" % (ck1, ex1))])
        _, two = self.run_ranks(2, ["train", "--spec", self.spec("two", 2,
                                "checkpoint: {dir: %s, every_steps: 2}\noutput: {export_dir: %s, export_dtype: FP32}" % (ck2, ex2))])
        _, four = self.run_ranks(4, ["train", "--spec", self.spec("four", 2, "output: {export_dir: %s, export_dtype: FP32}" % ex4,
                                                                 sharding="HYBRID_SHARD")])
        l1, l2 = self.metrics(one[0][0]), self.metrics(two[0][0])
        self.assertEqual(len(l1), 4)
        for a, b in zip(l2, l1):
            self.assertLess(abs(a - b) / abs(b), 1e-5)
        w1 = read_weights(ex1)
        # Weights within 2e-5: the embedding rows a few tokens use get gradients near 1e-11
        # whose last bits depend on the order ranks sum them, and Adam's first steps turn
        # that into updates of lr * 1e-3 (every other tensor agrees within 2e-6).
        self.assertLess(max_rel(read_weights(ex2), w1), 2e-5)
        self.assertEqual(len(self.metrics(four[0][0])), 4)
        # Only rank 0 prints the stream.
        self.assertEqual(self.metrics(two[1][0]), [])
        events = [l for l in json_lines(two[0][0]) if l.get("event") == "checkpoint_saved"]
        self.assertEqual([e["step"] for e in events], [2, 4])
        for e in events:
            self.assertEqual(set(e), {"type", "event", "path", "step", "bytes", "manifest_sha256", "loss"})
            self.assertTrue(os.path.exists(os.path.join(e["path"], "manifest.json")))
            self.assertEqual(len(e["manifest_sha256"]), 64)
            self.assertGreater(e["bytes"], 0)
        # export consolidates a sharded checkpoint; the result equals the run's own export.
        out = os.path.join(self.tmp, "exported")
        subprocess.run([TRAIN, "export", "--checkpoint", events[-1]["path"], "--out", out, "--dtype", "fp32"],
                       check=True, capture_output=True)
        self.assertEqual(max_rel(read_weights(out), read_weights(ex2)), 0.0)

    def test_sigterm_checkpoints_and_resume_latest_is_exact(self):
        ck = os.path.join(self.tmp, "ck")
        whole_ck = os.path.join(self.tmp, "whole")
        _, whole = self.run_ranks(2, ["train", "--spec", self.spec("whole", 2, "checkpoint: {dir: %s}" % whole_ck, steps=12)])
        want = self.metrics(whole[0][0])
        spec = self.spec("pre", 2, "checkpoint: {dir: %s, resume: latest}" % ck, steps=12)
        procs = self.launch(2, ["train", "--spec", spec])
        # Wait for the first metrics line, then preempt every rank as the worker does.
        seen = []
        while True:
            line = procs[0].stdout.readline()
            self.assertTrue(line, "trainer ended before its first step")
            seen.append(line)
            if '"metrics"' in line:
                break
        for p in procs:
            p.send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (o, e) in zip(procs, outs):
            self.assertEqual(p.returncode, 0, e[-2000:])
        first = json_lines("".join(seen) + outs[0][0])
        pre = [l for l in first if l.get("event") == "preempted"]
        self.assertEqual(len(pre), 1)
        saved = [l for l in first if l.get("event") == "checkpoint_saved"]
        self.assertEqual(saved[-1]["step"], pre[0]["step"])
        stopped = pre[0]["step"]
        self.assertLess(stopped, 12)
        # A restarted attempt resumes from the newest complete checkpoint.
        _, rest = self.run_ranks(2, ["train", "--spec", spec])
        got = [l["loss"] for l in first if l.get("type") == "metrics"] + self.metrics(rest[0][0])
        self.assertEqual(got, want)

    def test_truncated_checkpoint_is_refused(self):
        ck = os.path.join(self.tmp, "ck")
        self.run_ranks(2, ["train", "--spec", self.spec("t", 2, "checkpoint: {dir: %s}" % ck, steps=2)])
        shard = os.path.join(ck, "step-2", "shard-00000-of-00002.safetensors")
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) - 64)
        codes, outs = self.run_ranks(2, ["train", "--spec", self.spec("t2", 2), "--resume", os.path.join(ck, "step-2")],
                                     check=False)
        self.assertTrue(all(c != 0 for c in codes), codes)
        # Every rank checks every file the manifest lists; the first to find the short one
        # exits, and a rank still joining the process group may then fail there instead
        # ("Connection closed by peer"): which rank says "truncated" is a race.
        self.assertTrue(any("truncated" in e for _, e in outs), [e[-500:] for _, e in outs])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
