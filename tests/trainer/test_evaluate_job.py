#!/usr/bin/python3
"""Evaluation jobs (`kind: evaluate`) in llamafleet-train, against `llamafleet-train eval`
(the independent path: one process, no engine, no process group) and the Python reference.

Usage: /usr/bin/python3 test_evaluate_job.py BIN_DIR [unittest args]

  - a model directory scored on two eval sets gives, per set, the loss and target-token
    count `llamafleet-train eval` gives on that set (and reference.py's loss), on 1 rank
    and on 2 Gloo ranks (FULL_SHARD with an odd row count; NO_SHARD), as "eval" lines at
    step 0 followed by "finished" at step 0; no checkpoint and no export are written;
  - with peft.adapter_path the loss is that of the merged model a LoRA run exported;
  - a training-only field is refused naming it, before anything runs.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

BIN = None
TOL = 1e-5  # relative: the same float32 math, summed in another order over ranks
REF_TOL = 1e-4  # against the Python reference, as the other reference tests


class EvaluateJob(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-evaluate-job-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--kv-heads", "2", "--seed", 1])
        # 5 rows: on 2 ranks with micro-batches of 2 the ranks run unequal passes.
        self.sets = {"short": self.path("short.jsonl"), "long": self.path("long.jsonl")}
        ref.run_command(["make-data", "--out", self.sets["short"], "--vocab", 256, "--rows", 5, "--seed", 9,
                         "--min-len", 10, "--max-len", 30])
        ref.run_command(["make-data", "--out", self.sets["long"], "--vocab", 256, "--rows", 4, "--seed", 11,
                         "--min-len", 30, "--max-len", 60])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, model, sharding="FULL_SHARD", extra=""):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
kind: evaluate
model: {path: %s}
data: {eval: [{name: short, path: %s}, {name: long, path: %s}], format: TOKENS}
training: {micro_batch_size: 2, seq_len: 64, batching: PADDING}
fsdp: {sharding: %s, mixed_precision: FP32}
checkpoint: {dir: %s}
%s
""" % (name, model, self.sets["short"], self.sets["long"], sharding, self.path(name + "-ck"), extra))
        return f

    def run_job(self, spec, world):
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec], world,
                             env_extra={"LLAMAFLEET_CPU_GEMM": "aten"})
        codes, outs = wait_ranks(procs)
        for code, (_, err) in zip(codes, outs):
            self.assertEqual(code, 0, err[-3000:])
        return json_lines(outs[0][0])

    def eval_cli(self, model, data):
        """`llamafleet-train eval` of `model` on one set: the independent path."""
        p = subprocess.run([os.path.join(BIN, "llamafleet-train"), "eval", "--model", model, "--data", data,
                            "--format", "tokens", "--batching", "padding", "--seq-len", "64", "--micro-batch", "2"],
                           capture_output=True, text=True, env=dict(os.environ, LLAMAFLEET_CPU_GEMM="aten"))
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return json_lines(p.stdout)[-1]

    def check_scores(self, lines, model, ck_dir):
        evals = {e["set"]: e for e in lines if e.get("type") == "eval"}
        self.assertEqual(sorted(evals), ["long", "short"], lines)
        for name, data in self.sets.items():
            want = self.eval_cli(model, data)
            got = evals[name]
            self.assertEqual(got["step"], 0)
            self.assertEqual(got["tokens"], want["tokens"], name)
            self.assertLess(abs(got["loss"] - want["loss"]) / want["loss"], TOL, (name, got, want))
            self.assertLess(abs(got["perplexity"] - want["perplexity"]) / want["perplexity"], 10 * TOL)
        finished = [j for j in lines if j.get("event") == "finished"]
        self.assertEqual(len(finished), 1, lines)
        self.assertEqual(finished[0]["steps"], 0)
        self.assertEqual([j for j in lines if j.get("type") == "metrics"], [])
        # No checkpoint (TensorBoard's events are all the job's directory holds) and no export.
        left = sorted(os.listdir(ck_dir)) if os.path.isdir(ck_dir) else []
        self.assertEqual([n for n in left if n != "tensorboard"], [], left)
        return evals

    def test_scores_every_set_as_eval_does_on_any_world(self):
        for world, sharding in ((1, "FULL_SHARD"), (2, "FULL_SHARD"), (2, "NO_SHARD")):
            name = "w%d-%s" % (world, sharding.lower())
            with self.subTest(world=world, sharding=sharding):
                lines = self.run_job(self.spec(name, self.model, sharding), world)
                evals = self.check_scores(lines, self.model, self.path(name + "-ck"))
        # The Python reference agrees too (the last run's).
        for name, data in self.sets.items():
            want = ref.run_command(["eval", "--model", self.model, "--data", data, "--format", "tokens",
                                    "--batching", "padding", "--seq-len", 64])
            self.assertLess(abs(evals[name]["loss"] - want["loss"]) / want["loss"], REF_TOL, (name, want))

    def test_an_adapter_scores_as_the_merged_model(self):
        # A LoRA run of 2 steps on the short set exports its adapter and the merged model.
        out = self.path("lora-out")
        train = self.path("lora.yaml")
        with open(train, "w") as fh:
            fh.write("""
name: lora
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: 2, micro_batch_size: 2, seq_len: 64, batching: PADDING, lr: 0.05}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32}
peft: {method: lora, r: 4, dropout: 0, target_modules: [q_proj, v_proj, down_proj]}
output: {export_dir: %s, export_dtype: FP32, merge: true}
""" % (self.model, self.sets["long"], out))
        self.run_job(train, 1)
        lines = self.run_job(self.spec("adapter", self.model, extra="peft: {method: lora, adapter_path: %s}" % out), 2)
        evals = self.check_scores(lines, os.path.join(out, "merged"), self.path("adapter-ck"))
        # The adapter changed the model: the base's loss is another.
        base = self.eval_cli(self.model, self.sets["long"])
        self.assertGreater(abs(evals["long"]["loss"] - base["loss"]), 1e-3)

    def test_a_training_field_is_refused_by_name(self):
        spec = self.spec("bad", self.model, extra="output: {export_dir: %s}" % self.path("bad-out"))
        p = subprocess.run([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("output.export_dir applies only to kind train", p.stderr)
        self.assertFalse(os.path.exists(self.path("bad-out")))
        self.assertFalse(os.path.exists(self.path("bad-ck")))


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
