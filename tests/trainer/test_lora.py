#!/usr/bin/python3
"""LoRA in llamafleet-train against the independent PEFT-convention reference.

Usage: /usr/bin/python3 test_lora.py BIN_DIR [unittest args]

  - from an existing adapter with non-zero B on all seven projections, K AdamW steps on 2
    ranks (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD) and 4 (HYBRID_SHARD, two "nodes") give the
    reference's adapter and merged weights within 1e-4 (max|a-b|/max|b| per tensor) and its
    per-step losses; the exported adapter with the base evaluates to the merged model's loss;
  - a run resumed from a LoRA checkpoint equals the uninterrupted run, on the same world
    and after shrinking 2 -> 1 rank (training.global_batch_size); the checkpoint holds
    only the adapter;
  - bad peft input: one error line naming the field, nothing written;
  - QLoRA (peft.method qlora): on 2 ranks (FULL_SHARD, NO_SHARD) equals the reference with
    each targeted base weight replaced by its NF4 round trip (nf4_reference.py), adapter,
    merged model (folded into the dequantized base) and losses; resume and a 2 -> 1 shrink
    equal the uninterrupted run, as for LoRA.
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
from ranks import json_lines, max_rel, read_weights, train_ranks  # noqa: E402

BIN = None
TOL = 1e-4
ALL = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


class Lora(unittest.TestCase):
    K = 4

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-lora-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--kv-heads", "2", "--seed", 1])
        # Exactly one global batch (4 rows): every step sees every row, whatever the order.
        self.data = self.path("d.jsonl")
        ref.run_command(["make-data", "--out", self.data, "--vocab", 256, "--rows", 4, "--seed", 5,
                         "--min-len", 10, "--max-len", 60])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, sharding="FULL_SHARD", peft="", steps=None, extra="", schedule="COSINE", ac=False,
             method="lora"):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 1, global_batch_size: 4, seq_len: 64, batching: PADDING,
           lr: 0.001, weight_decay: 0.01, grad_clip: 1.0, log_every: 1,
           lr_schedule: {type: %s, warmup_steps: 2}}
fsdp: {sharding: %s, mixed_precision: FP32, activation_checkpointing: %s}
peft: {method: %s%s}
output: {export_dir: %s, export_dtype: FP32, merge: true}
%s
""" % (name, self.model, self.data, steps or self.K, schedule, sharding, str(ac).lower(), method,
       peft if "dropout" in peft else ", dropout: 0" + peft, self.path(name + "-out"), extra))
        return f

    def train(self, spec, world, check=True):
        return train_ranks(self, BIN, spec, world, None, check)

    def reference(self, adapter, steps=None, schedule="cosine", qlora=False):
        out = self.path(("qref-" if qlora else "ref-") + os.path.basename(adapter))
        want = lref.run_command(["train", "--model", self.model, "--data", self.data, "--adapter", adapter,
                                 "--adapter-out", out + "-adapter", "--merged-out", out + "-merged",
                                 "--steps", steps or self.K, "--micro-batch", 2, "--grad-accum", 2,
                                 "--lr", 1e-3, "--weight-decay", 0.01, "--grad-clip", 1.0, "--warmup", 2,
                                 "--schedule", schedule, "--batching", "padding", "--seq-len", 64,
                                 "--format", "tokens"] + (["--qlora"] if qlora else []))
        return want, out + "-adapter", out + "-merged"

    def assert_close(self, got_dir, want_dir, what):
        got, want = read_weights(got_dir), read_weights(want_dir)
        self.assertEqual(sorted(got), sorted(want), what)
        diff = max_rel(got, want)
        sys.stderr.write("  %s %s: max_rel %.2e\n" % (self.id().split(".")[-1], what, diff))
        self.assertLessEqual(diff, TOL, what)

    def test_strategies_match_reference_from_an_adapter(self):
        start = self.path("start")
        lref.run_command(["make-adapter", "--model", self.model, "--out", start, "--r", 4, "--alpha", 8,
                          "--targets", ALL, "--seed", 3, "--b-std", 0.05])
        want, want_adapter, want_merged = self.reference(start)
        self.assertGreater(max_rel(read_weights(want_adapter), lref.read_adapter(start)[1]), 1e-3)
        runs = (("FULL_SHARD", 2, False), ("SHARD_GRAD_OP", 2, False), ("NO_SHARD", 2, False),
                ("HYBRID_SHARD", 4, False), ("FULL_SHARD", 2, True))
        for sharding, world, ac in runs:
            name = sharding.lower() + ("-ac" if ac else "")
            spec = self.spec(name, sharding, peft=", adapter_path: %s" % start, ac=ac)
            _, outs = self.train(spec, world)
            lines = json_lines(outs[0][0])
            losses = [l["loss"] for l in lines if l.get("type") == "metrics"]
            self.assertEqual(len(losses), self.K, sharding)
            for s, (a, b) in enumerate(zip(losses, want["losses"])):
                self.assertAlmostEqual(a, b, delta=1e-5, msg="%s loss at step %d" % (sharding, s + 1))
            started = next(l for l in lines if l.get("event") == "started")
            self.assertEqual(started["trainable_parameters"], want["trainable"])
            self.assert_close(self.path(name + "-out"), want_adapter, sharding + " adapter")
            self.assert_close(self.path(name + "-out", "merged"), want_merged, sharding + " merged")
        # The adapter as PEFT reads it, and base + adapter = the merged model.
        out = self.path("full_shard-out")
        with open(os.path.join(out, "adapter_config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["peft_type"], cfg["task_type"], cfg["r"], cfg["lora_alpha"], cfg["bias"]),
                         ("LORA", "CAUSAL_LM", 4, 8.0, "none"))
        self.assertEqual(sorted(cfg["target_modules"]), sorted(ALL.split(",")))
        args = ["--data", self.data, "--format", "tokens", "--batching", "padding", "--seq-len", 64]
        with_adapter = lref.run_command(["eval", "--model", self.model, "--adapter", out] + args)
        merged = json_lines(subprocess.run([os.path.join(BIN, "llamafleet-train"), "eval", "--model",
                                            os.path.join(out, "merged")] + [str(a) for a in args],
                                           capture_output=True, text=True, check=True).stdout)[-1]
        self.assertAlmostEqual(merged["loss"], with_adapter["loss"], delta=1e-5)
        self.assertEqual(merged["tokens"], with_adapter["tokens"])

    def resume_and_shrink(self, method):
        # Fresh adapters (A seeded, B zero) on q and v; a constant schedule so that a run
        # stopped at step 2 and resumed continues the same learning rates.
        peft = ", r: 8, alpha: 16, target_modules: [q_proj, v_proj]"
        ckpt = "checkpoint: {dir: %s, every_steps: 2}"
        whole = self.spec("whole", peft=peft, schedule="CONSTANT", extra=ckpt % self.path("ck-whole"), method=method)
        self.train(whole, 2)
        first = self.spec("first", peft=peft, steps=2, schedule="CONSTANT", extra=ckpt % self.path("ck"),
                          method=method)
        self.train(first, 2)
        shards = [f for f in os.listdir(self.path("ck", "step-2")) if f.endswith(".safetensors")]
        saved = sum(os.path.getsize(self.path("ck", "step-2", f)) for f in shards)
        adapter = 2 * (8 * (64 + 64) + 8 * (64 + 32))  # layers x (q + v) x r x (in + out)
        self.assertLess(saved, 3 * 4 * adapter + 4096, "a LoRA checkpoint holds the adapter and its moments only")
        for world in (2, 1):
            name = "resumed%d" % world
            spec = self.spec(name, peft=peft, schedule="CONSTANT", method=method,
                             extra="checkpoint: {dir: %s, resume: %s}" % (self.path("ck"), self.path("ck", "step-2")))
            _, outs = self.train(spec, world)
            self.assertIn("resumed from", outs[0][1])
            self.assert_close(self.path(name + "-out"), self.path("whole-out"), "resumed on %d" % world)
            self.assert_close(self.path(name + "-out", "merged"), self.path("whole-out", "merged"),
                              "resumed on %d, merged" % world)

    def test_resume_and_shrink_match_the_uninterrupted_run(self):
        self.resume_and_shrink("lora")

    def test_qlora_resume_and_shrink_match_the_uninterrupted_run(self):
        # The base is re-quantized on load at every world size: the same codes, the same run.
        self.resume_and_shrink("qlora")

    def test_qlora_matches_the_reference_on_an_nf4_base(self):
        start = self.path("start")
        lref.run_command(["make-adapter", "--model", self.model, "--out", start, "--r", 4, "--alpha", 8,
                          "--targets", "q_proj,v_proj,down_proj", "--seed", 3, "--b-std", 0.05])
        want, want_adapter, want_merged = self.reference(start, qlora=True)
        plain, plain_adapter, _ = self.reference(start)
        self.assertGreater(max_rel(read_weights(want_adapter), read_weights(plain_adapter)), 10 * TOL,
                           "the NF4 base changes the training")
        for sharding in ("FULL_SHARD", "NO_SHARD"):
            name = "q-" + sharding.lower()
            _, outs = self.train(self.spec(name, sharding, peft=", adapter_path: %s" % start, method="qlora"), 2)
            self.assertIn("QLoRA (NF4 base)", outs[0][1])
            losses = [l["loss"] for l in json_lines(outs[0][0]) if l.get("type") == "metrics"]
            self.assertEqual(len(losses), self.K, sharding)
            for s, (a, b) in enumerate(zip(losses, want["losses"])):
                self.assertAlmostEqual(a, b, delta=1e-5, msg="%s loss at step %d" % (sharding, s + 1))
            self.assert_close(self.path(name + "-out"), want_adapter, "qlora " + sharding + " adapter")
            self.assert_close(self.path(name + "-out", "merged"), want_merged, "qlora " + sharding + " merged")

    def test_dropout_draws_the_same_masks_under_activation_checkpointing(self):
        # Backward recomputes a checkpointed layer; its dropout masks must be the forward's.
        peft = ", dropout: 0.2, target_modules: [q_proj, v_proj, down_proj]"
        for ac in (False, True):
            self.train(self.spec("ac-%s" % ac, peft=peft, ac=ac), 1)
        self.assert_close(self.path("ac-True-out"), self.path("ac-False-out"), "dropout with and without AC")
        plain = self.path("plain")
        self.train(self.spec("plain", peft=", dropout: 0, target_modules: [q_proj, v_proj, down_proj]"), 1)
        self.assertGreater(max_rel(read_weights(self.path("ac-True-out")), read_weights(self.path("plain-out"))),
                           1e-4, "dropout 0.2 changes the result")

    def test_bad_peft_input_names_the_field(self):
        start = self.path("start")
        lref.run_command(["make-adapter", "--model", self.model, "--out", start, "--r", 4, "--targets", "q_proj"])
        cases = [
            (", r: 0", "peft.r"),
            (", alpha: -1", "peft.alpha"),
            (", dropout: 1.5", "peft.dropout"),
            (", target_modules: [q_proj, attn]", "peft.target_modules"),
            (", adapter_path: %s, r: 8" % start, "disagrees with"),
            (", adapter_path: %s" % self.path("missing"), "adapter_config.json"),
        ]
        for peft, want in cases:
            spec = self.spec("bad", peft=peft)
            codes, outs = self.train(spec, 1, check=False)
            self.assertNotEqual(codes[0], 0, peft)
            self.assertIn(want, outs[0][0] + outs[0][1], peft)
            self.assertFalse(os.path.exists(self.path("bad-out")), peft)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
