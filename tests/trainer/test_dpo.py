#!/usr/bin/python3
"""DPO (training.objective: dpo) in llamafleet-train against dpo_reference.py.

Usage: /usr/bin/python3 test_dpo.py BIN_DIR [unittest args]

  - from an adapter with non-zero B (so the policy differs from the base from step 1),
    4 steps of 4 pairs on 1 rank and on 2 ranks (FULL_SHARD, grad_accum 2) give the
    reference's loss and TRL rewards at every step and its adapter, within 1e-5; the
    step-1 rewards are non-zero, and they equal the reference's only when the trainer's
    reference log-probabilities (the adapter switched off) are the base model's alone;
  - the same 4 steps with tensor parallelism 2 (DP 1) give the reference's loss, rewards
    and adapter within 1e-5;
  - a run resumed from its step-2 checkpoint, on 2 ranks and shrunk to 1, gives the
    uninterrupted run's loss and rewards at steps 3 and 4 and its adapter within 1e-5;
  - bad preference lines are listed as FILE:LINE: why; bad DPO specs name the field.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dpo_reference as dref  # noqa: E402
import lora_reference as lref  # noqa: E402
import reference as ref  # noqa: E402
from ranks import json_lines, max_rel, read_weights, train_ranks  # noqa: E402

BIN = None
TOL = 1e-5


class Dpo(unittest.TestCase):
    K = 4

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-dpo-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--kv-heads", "2", "--seed", 1])
        self.data = self.path("pairs.jsonl")
        dref.run_command(["make-data", "--out", self.data, "--pairs", 4, "--seed", 7])
        self.start = self.path("start")
        lref.run_command(["make-adapter", "--model", self.model, "--out", self.start, "--r", 4, "--alpha", 8,
                          "--targets", "q_proj,v_proj,down_proj", "--seed", 3, "--b-std", 0.05])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, data=None, dpo="beta: 0.2, label_smoothing: 0.1", peft=None, batching="PADDING", extra=""):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, format: PREFERENCE}
training: {objective: dpo, dpo: {%s}, max_steps: %d, micro_batch_size: 1,
           global_batch_size: 4, seq_len: 64, batching: %s, lr: 0.001, weight_decay: 0.01, grad_clip: 1.0,
           log_every: 1, lr_schedule: {type: COSINE, warmup_steps: 2}}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
%s
output: {export_dir: %s, export_dtype: FP32}
%s
""" % (name, self.model, data or self.data, dpo, self.K, batching,
       peft if peft is not None else "peft: {method: lora, dropout: 0, adapter_path: %s}" % self.start,
       self.path(name + "-out"), extra))
        return f

    def train(self, spec, world, check=True):
        return train_ranks(self, BIN, spec, world, {"LLAMAFLEET_TOKEN_CACHE_DIR": self.path("tokens")}, check)

    def reference(self):
        """dpo_reference.py's losses and rewards per step; its adapter in ref-adapter."""
        want = dref.run_command(["train", "--model", self.model, "--adapter", self.start, "--data", self.data,
                                 "--adapter-out", self.path("ref-adapter"), "--steps", self.K,
                                 "--pairs-per-step", 4, "--beta", 0.2, "--label-smoothing", 0.1, "--lr", 1e-3,
                                 "--weight-decay", 0.01, "--grad-clip", 1.0, "--warmup", 2, "--schedule", "cosine"])
        self.assertGreater(abs(want["rewards_chosen"][0]), 1e-3, "the start adapter changes the model")
        return want

    def assert_steps(self, out, want, name, first_step=1):
        """The metrics lines of rank 0's stdout `out` equal want's steps first_step..K."""
        metrics = [l for l in json_lines(out) if l.get("type") == "metrics"]
        self.assertEqual([m["step"] for m in metrics], list(range(first_step, self.K + 1)), name)
        for m in metrics:
            s = m["step"] - 1
            self.assertAlmostEqual(m["loss"], want["losses"][s], delta=TOL, msg="%s loss step %d" % (name, s + 1))
            for key in ("rewards_chosen", "rewards_rejected", "rewards_accuracies", "rewards_margins"):
                self.assertAlmostEqual(m[key], want[key][s], delta=TOL, msg="%s %s step %d" % (name, key, s + 1))

    def assert_adapter(self, got_dir, want_dir, what):
        diff = max_rel(read_weights(got_dir), read_weights(want_dir))
        sys.stderr.write("  %s adapter max_rel %.2e\n" % (what, diff))
        self.assertLessEqual(diff, TOL, what)

    def test_loss_rewards_and_adapter_match_the_reference_on_1_and_2_ranks(self):
        want = self.reference()
        for world in (1, 2):
            name = "w%d" % world
            _, outs = self.train(self.spec(name), world)
            self.assert_steps(outs[0][0], want, name)
            self.assert_adapter(self.path(name + "-out"), self.path("ref-adapter"), name)

    def test_tensor_parallel_2_matches_the_reference(self):
        # Both ranks hold half of every head and MLP column; each pair's log-probabilities
        # are the group's, counted once in the loss and the rewards.
        want = self.reference()
        extra = "resources: {nodes: 1, gpus_per_node: 2}\nparallelism: {tensor_parallel: 2}"
        _, outs = self.train(self.spec("tp2", extra=extra), 2)
        self.assert_steps(outs[0][0], want, "tp2")
        self.assert_adapter(self.path("tp2-out"), self.path("ref-adapter"), "tp2")

    def test_resume_and_shrink_match_the_uninterrupted_run(self):
        # The uninterrupted run keeps its step-2 checkpoint; runs of the same spec resumed
        # from it (on 2 ranks, and on 1 with grad_accum 4) must continue it exactly.
        whole = self.spec("whole", extra="checkpoint: {dir: %s, every_steps: 2}" % self.path("ck"))
        _, outs = self.train(whole, 2)
        metrics = [l for l in json_lines(outs[0][0]) if l.get("type") == "metrics"]
        want = {"losses": [m["loss"] for m in metrics]}
        for key in ("rewards_chosen", "rewards_rejected", "rewards_accuracies", "rewards_margins"):
            want[key] = [m[key] for m in metrics]
        for world in (2, 1):
            name = "resumed%d" % world
            spec = self.spec(name, extra="checkpoint: {dir: %s, resume: %s}" % (self.path(name + "-ck"),
                                                                               self.path("ck", "step-2")))
            _, outs = self.train(spec, world)
            self.assertIn("resumed from", outs[0][1])
            self.assert_steps(outs[0][0], want, name, first_step=3)
            self.assert_adapter(self.path(name + "-out"), self.path("whole-out"), name)

    def test_bad_preference_lines_are_listed(self):
        bad = self.path("bad.jsonl")
        lines = [
            '{"prompt_input_ids": [1, 2], "chosen_input_ids": [3], "rejected_input_ids": [4]}',
            '{"prompt": "hi", "rejected": "no"}',
            '{"prompt": "hi", "chosen": "", "rejected": "no"}',
            '[1, 2]',
            '{"prompt_input_ids": [1], "chosen_input_ids": [], "rejected_input_ids": [4]}',
            '{"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "user", "content": "a"}],'
            ' "rejected": "b"}',
            '{"prompt_input_ids": [1], "chosen_input_ids": [3, 9999], "rejected_input_ids": [4]}',
        ]
        with open(bad, "w") as f:
            f.write("\n".join(lines) + "\n")
        codes, outs = self.train(self.spec("bad", data=bad), 1, check=False)
        self.assertNotEqual(codes[0], 0)
        err = outs[0][1]
        for lineno, why in ((2, 'missing field "chosen"'), (3, 'field "chosen" is empty'), (4, "not a JSON object"),
                            (5, 'field "chosen_input_ids" is empty'), (6, 'chosen[0].role "user" must be assistant'),
                            (7, "token id 9999 is outside the vocabulary (vocab_size 256)")):
            self.assertIn("%s:%d: %s" % (bad, lineno, why), err, "line %d" % lineno)
        self.assertNotIn("%s:1:" % bad, err)

    def test_bad_dpo_specs_name_the_field(self):
        cases = [("peft.method", dict(peft="")),
                 ("training.batching", dict(batching="PACKING")),
                 ("training.dpo.beta", dict(dpo="beta: -1")),
                 ("training.dpo.label_smoothing", dict(dpo="label_smoothing: 0.5")),
                 ("peft.dropout", dict(peft="peft: {method: lora, dropout: 0.1}"))]
        for field, kw in cases:
            codes, outs = self.train(self.spec("badspec", **kw), 1, check=False)
            self.assertNotEqual(codes[0], 0, field)
            self.assertIn(field, outs[0][0] + outs[0][1], field)

if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
