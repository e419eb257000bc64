#!/usr/bin/python3
"""Tensor parallelism in llamafleet-train against the independent single-process reference.

Usage: /usr/bin/python3 test_tensor_parallel.py BIN_DIR [unittest args]

A GQA model (8 heads, 4 KV heads) trained K AdamW steps on one global batch by
llamafleet-train with `parallelism.tensor_parallel` T and a data-parallel world DP, every
rank a separate process over Gloo:
  - T=2 x DP=1, T=2 x DP=2 (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD on two
    "nodes" of four ranks, activation checkpointing), T=4 x DP=1 give the reference's
    per-step losses (1e-5) and its exported weights (1e-4, max|a-b|/max|b| per tensor),
    and the export is the full HF model;
  - LoRA on all seven projections at T=2 x DP=2 gives the PEFT reference's adapter;
  - QLoRA at T=2 x DP=1 gives the reference's adapter on the base dequantized whole;
  - a checkpoint written at T=2 x DP=2 resumes at T=1 x DP=4 and T=4 x DP=1 to the
    uninterrupted run's weights, and `llamafleet-train export` joins its slices;
  - a T that does not divide the model or the node is one error line naming the field.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lora_reference as lref  # noqa: E402
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, max_rel, read_weights, wait_ranks  # noqa: E402

BIN = None
TOL = 1e-4
ALL = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


class TensorParallel(unittest.TestCase):
    K = 3

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lf-tp-test-")
        cls.model = os.path.join(cls.tmp, "base")
        ref.run_command(["make-model", "--out", cls.model, "--heads", 8, "--kv-heads", 4, "--hidden", 64,
                         "--ffn", 176, "--vocab", 256, "--seed", 1])
        # Exactly one global batch (4 rows): every step sees every row, whatever the order.
        cls.data = os.path.join(cls.tmp, "d.jsonl")
        ref.run_command(["make-data", "--out", cls.data, "--vocab", 256, "--rows", 4, "--seed", 5,
                         "--min-len", 10, "--max-len", 60])
        cls.want = ref.run_command(cls.reference_args() + ["--out", os.path.join(cls.tmp, "ref")])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def reference_args(cls, steps=None):
        return ["train", "--model", cls.model, "--data", cls.data, "--steps", steps or cls.K, "--micro-batch", 2,
                "--grad-accum", 2, "--lr", 1e-3, "--weight-decay", 0.01, "--grad-clip", 1.0, "--warmup", 1,
                "--schedule", "cosine", "--batching", "padding", "--seq-len", 64, "--format", "tokens"]

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, tp, world, local, sharding="FULL_SHARD", steps=None, extra="", ac=False, merge=False):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 1, global_batch_size: 4, seq_len: 64, batching: PADDING,
           lr: 0.001, weight_decay: 0.01, grad_clip: 1.0, log_every: 1,
           lr_schedule: {type: COSINE, warmup_steps: 1}}
resources: {nodes: %d, gpus_per_node: %d}
fsdp: {sharding: %s, mixed_precision: FP32, activation_checkpointing: %s}
parallelism: {tensor_parallel: %d}
output: {export_dir: %s, export_dtype: FP32%s}
%s
""" % (name, self.model, self.data, steps or self.K, world // local, local, sharding, str(ac).lower(), tp,
       self.path(name + "-out"),
       ", merge: true" if merge else "", extra))
        return f

    def train(self, spec, world, local_world, check=True):
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec], world,
                             local_world=local_world, env_extra={"LLAMAFLEET_CPU_GEMM": "aten"})
        codes, outs = wait_ranks(procs)
        if check:
            for code, (_, err) in zip(codes, outs):
                self.assertEqual(code, 0, err[-3000:])
        return codes, outs

    def assert_close(self, got_dir, want_dir, what):
        got, want = read_weights(got_dir), read_weights(want_dir)
        self.assertEqual(sorted(got), sorted(want), what)
        for k in want:
            self.assertEqual(list(got[k].shape), list(want[k].shape), "%s %s" % (what, k))
        diff = max_rel(got, want)
        sys.stderr.write("  %s %s: max_rel %.2e\n" % (self.id().split(".")[-1], what, diff))
        self.assertLessEqual(diff, TOL, what)

    def assert_losses(self, out, want, what):
        losses = [l["loss"] for l in json_lines(out) if l.get("type") == "metrics"]
        self.assertEqual(len(losses), len(want), what)
        for s, (a, b) in enumerate(zip(losses, want)):
            self.assertAlmostEqual(a, b, delta=1e-5, msg="%s loss at step %d" % (what, s + 1))

    def test_layouts_match_the_reference(self):
        # (T, sharding, world, ranks per node, activation checkpointing)
        runs = ((2, "FULL_SHARD", 2, 2, False), (2, "FULL_SHARD", 4, 2, False), (2, "SHARD_GRAD_OP", 4, 2, False),
                (2, "NO_SHARD", 4, 2, False), (2, "HYBRID_SHARD", 8, 4, False), (2, "FULL_SHARD", 4, 2, True),
                (4, "FULL_SHARD", 4, 4, False))
        for tp, sharding, world, local, ac in runs:
            name = "tp%d-dp%d-%s%s" % (tp, world // tp, sharding.lower(), "-ac" if ac else "")
            _, outs = self.train(self.spec(name, tp, world, local, sharding, ac=ac), world, local)
            self.assert_losses(outs[0][0], self.want["losses"], name)
            self.assert_close(self.path(name + "-out"), self.path("ref"), name)
            started = next(l for l in json_lines(outs[0][0]) if l.get("event") == "started")
            self.assertEqual(started["world_size"], world)

    def test_lora_follows_the_base_split(self):
        start = self.path("adapter")
        lref.run_command(["make-adapter", "--model", self.model, "--out", start, "--r", 4, "--alpha", 8,
                          "--targets", ALL, "--seed", 3, "--b-std", 0.05])
        out = self.path("lora-ref")
        want = lref.run_command(["train", "--model", self.model, "--data", self.data, "--adapter", start,
                                 "--adapter-out", out + "-adapter", "--merged-out", out + "-merged",
                                 "--steps", self.K, "--micro-batch", 2, "--grad-accum", 2, "--lr", 1e-3,
                                 "--weight-decay", 0.01, "--grad-clip", 1.0, "--warmup", 1, "--schedule", "cosine",
                                 "--batching", "padding", "--seq-len", 64, "--format", "tokens"])
        spec = self.spec("lora", 2, 4, 2, merge=True, extra="peft: {method: lora, dropout: 0, adapter_path: %s}" % start)
        _, outs = self.train(spec, 4, 2)
        self.assert_losses(outs[0][0], want["losses"], "lora")
        self.assert_close(self.path("lora-out"), out + "-adapter", "lora adapter")
        self.assert_close(self.path("lora-out", "merged"), out + "-merged", "lora merged")

    def test_qlora_slices_the_dequantized_whole_tensors(self):
        # QLoRA quantizes each whole tensor before it is sliced: T = 2 trains on the base the
        # reference dequantizes (nf4_reference.py), the same as one rank would.
        start = self.path("adapter")
        lref.run_command(["make-adapter", "--model", self.model, "--out", start, "--r", 4, "--alpha", 8,
                          "--targets", "q_proj,o_proj,down_proj", "--seed", 3, "--b-std", 0.05])
        out = self.path("qlora-ref")
        want = lref.run_command(["train", "--model", self.model, "--data", self.data, "--adapter", start,
                                 "--adapter-out", out + "-adapter", "--merged-out", out + "-merged",
                                 "--steps", self.K, "--micro-batch", 2, "--grad-accum", 2, "--lr", 1e-3,
                                 "--weight-decay", 0.01, "--grad-clip", 1.0, "--warmup", 1, "--schedule", "cosine",
                                 "--batching", "padding", "--seq-len", 64, "--format", "tokens", "--qlora"])
        spec = self.spec("qlora", 2, 2, 2, merge=True,
                         extra="peft: {method: qlora, dropout: 0, adapter_path: %s}" % start)
        _, outs = self.train(spec, 2, 2)
        self.assert_losses(outs[0][0], want["losses"], "qlora")
        self.assert_close(self.path("qlora-out"), out + "-adapter", "qlora adapter")
        self.assert_close(self.path("qlora-out", "merged"), out + "-merged", "qlora merged")

    def test_checkpoint_resumes_on_other_layouts(self):
        steps = 4
        whole = self.spec("whole", 2, 4, 2, steps=steps, extra="checkpoint: {dir: %s, every_steps: 2}" % self.path("ck"))
        self.train(whole, 4, 2)
        step2 = self.path("ck", "step-2")
        with open(os.path.join(step2, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["tensor_parallel"], manifest["shard_group_size"]), (2, 2))
        # `llamafleet-train export` joins the slices of a tensor-parallel checkpoint.
        exported = self.path("exported")
        subprocess.run([os.path.join(BIN, "llamafleet-train"), "export", "--checkpoint", self.path("ck", "step-4"),
                        "--out", exported, "--dtype", "fp32"], check=True, capture_output=True)
        self.assert_close(exported, self.path("whole-out"), "export of a T=2 checkpoint")
        for tp, world, local in ((1, 4, 2), (4, 4, 4)):
            name = "resume-tp%d" % tp
            spec = self.spec(name, tp, world, local, steps=steps, extra="checkpoint: {resume: %s}" % step2)
            _, outs = self.train(spec, world, local)
            self.assertIn("resumed from", "".join(e for _, e in outs))
            self.assert_close(self.path(name + "-out"), self.path("whole-out"), name)

    def test_bad_tensor_parallel_is_one_clear_error(self):
        # The model's shape is known to the trainer (from config.json); the node's to the spec.
        for tp, world, local, want in ((3, 3, 3, "parallelism.tensor_parallel (3) must divide the model's 8 heads, "
                                                  "4 KV heads, 176 MLP width and 256 vocabulary (1, 2, 4 would)"),
                                       (4, 4, 2, "parallelism.tensor_parallel (4) must divide resources.gpus_per_node 2")):
            codes, outs = self.train(self.spec("bad%d" % tp, tp, world, local), world, local, check=False)
            self.assertTrue(all(c != 0 for c in codes))
            self.assertIn(want, outs[0][1])
            self.assertFalse(os.path.exists(self.path("bad%d-out" % tp)))


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
