#!/usr/bin/python3
"""Packing with document masking, end to end, against the independent reference.

`batching: packing` puts whole records into rows; within a row, positions restart at each
record and attention is block-diagonal causal. reference.py knows nothing of masks: it runs
every record of a packed row alone (its own batch of one). So a trainer whose packed batch
gives each record the loss and gradients it has alone matches it, and one that lets a
record see its neighbours, or counts positions on, does not.

  - 2 ranks FULL_SHARD, without and with activation checkpointing: 3 AdamW steps over
    rows of several records each, losses within 1e-5 and exported weights within 1e-5
    relative of the reference's (records alone); and the other ways of running a layer
    (SHARD_GRAD_OP with selective checkpointing, NO_SHARD, tensor parallelism 2), alike;
  - the same records trained padded (one record a row) reach the same weights as packed,
    within the same 1e-5: every row holds whole records, so only the batching differs.

Usage: /usr/bin/python3 test_document_packing.py BIN_DIR   (about 40 s on 2 cores)
"""
import json
import os
import random
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, max_rel, read_weights, wait_ranks  # noqa: E402

BIN = None
SEQ_LEN = 32
# Next fit into rows of 32: [10 12 7] [20 9] [5 6 7 8] [30]: 4 rows, 10 records.
LENGTHS = [10, 12, 7, 20, 9, 5, 6, 7, 8, 30]
PACKED_ROWS = 4
STEPS = 3


def attention():
    """The trainer's attention kernel on rows of one record: fused on LibTorch 2.x."""
    return "sdpa" if int(ref.torch.__version__.split(".")[0]) >= 2 else "eager"


class DocumentPacking(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lf-docpack-")
        cls.model = os.path.join(cls.tmp, "model")
        ref.run_command(["make-model", "--out", cls.model, "--layers", 2, "--hidden", 32, "--heads", 4,
                         "--kv-heads", 2, "--ffn", 64, "--vocab", 128, "--max-pos", 64, "--seed", 4])
        rng = random.Random(5)
        cls.data = os.path.join(cls.tmp, "d.jsonl")
        with open(cls.data, "w") as f:
            for n in LENGTHS:
                f.write(json.dumps({"input_ids": [rng.randrange(128) for _ in range(n)]}) + "\n")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def train2(self, name, batching, rows, checkpointing, sharding="FULL_SHARD", extra=""):
        """2 ranks, one row per micro-step, every row in every step."""
        if name in self.runs:
            return self.runs[name]
        out = os.path.join(self.tmp, name + "-out")
        spec = os.path.join(self.tmp, name + ".yaml")
        with open(spec, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 1, global_batch_size: %d, seq_len: %d, batching: %s,
           lr: 0.0001, weight_decay: 0.01, grad_clip: 1.0, log_every: 1}
fsdp: {sharding: %s, mixed_precision: FP32, activation_checkpointing: %s}
output: {export_dir: %s, export_dtype: FP32}
%s
""" % (name, self.model, self.data, STEPS, rows, SEQ_LEN, batching, sharding, str(checkpointing).lower(), out,
       extra))
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec], 2, local_world=2,
                             env_extra={"LLAMAFLEET_CPU_GEMM": "aten"})
        codes, outs = wait_ranks(procs)
        for code, (_, err) in zip(codes, outs):
            self.assertEqual(code, 0, err[-3000:])
        losses = [l["loss"] for l in json_lines(outs[0][0]) if l.get("type") == "metrics"]
        self.assertEqual(len(losses), STEPS)
        self.runs[name] = (losses, read_weights(out))
        return self.runs[name]

    def reference(self):
        if "ref" not in self.runs:
            out = os.path.join(self.tmp, "ref-out")
            want = ref.run_command(["train", "--attention", attention(), "--model", self.model, "--out", out,
                                    "--data", self.data, "--format", "tokens", "--batching", "packing",
                                    "--seq-len", SEQ_LEN, "--steps", STEPS, "--micro-batch", 1,
                                    "--grad-accum", PACKED_ROWS, "--lr", 1e-4, "--weight-decay", 0.01,
                                    "--grad-clip", 1.0])
            self.runs["ref"] = (want["losses"], read_weights(out))
        return self.runs["ref"]

    def test_packed_rows_train_as_records_alone(self):
        rows = ref.pack([(list(range(n)), list(range(n))) for n in LENGTHS], SEQ_LEN)
        self.assertEqual([[len(d[0]) for d in r] for r in rows], [[10, 12, 7], [20, 9], [5, 6, 7, 8], [30]])
        want_losses, want = self.reference()
        for checkpointing in (False, True):
            with self.subTest(activation_checkpointing=checkpointing):
                losses, got = self.train2("packed-ckpt" if checkpointing else "packed", "PACKING", PACKED_ROWS,
                                          checkpointing)
                for s, (a, b) in enumerate(zip(losses, want_losses)):
                    self.assertAlmostEqual(a, b, delta=1e-5, msg="loss at step %d" % (s + 1))
                self.assertEqual(sorted(got), sorted(want))
                diff = max_rel(got, want)
                sys.stderr.write("  packed, checkpointing %s: max_rel %.2e vs records alone\n" % (checkpointing, diff))
                self.assertLessEqual(diff, 1e-5)

    def test_every_strategy_carries_the_documents(self):
        want_losses, want = self.reference()
        for name, sharding, checkpointing, extra in (
                ("sgo-selective", "SHARD_GRAD_OP", "selective", ""),
                ("noshard", "NO_SHARD", False, ""),
                ("tp2", "FULL_SHARD", True, "parallelism: {tensor_parallel: 2}\nresources: {nodes: 1, gpus_per_node: 2}")):
            with self.subTest(name):
                losses, got = self.train2(name, "PACKING", PACKED_ROWS, checkpointing, sharding, extra)
                for s, (a, b) in enumerate(zip(losses, want_losses)):
                    self.assertAlmostEqual(a, b, delta=1e-5, msg="%s loss at step %d" % (name, s + 1))
                diff = max_rel(got, want)
                sys.stderr.write("  packed, %s: max_rel %.2e vs records alone\n" % (name, diff))
                self.assertLessEqual(diff, 1e-5)

    def test_padded_and_packed_reach_the_same_weights(self):
        packed_losses, packed = self.train2("packed", "PACKING", PACKED_ROWS, False)
        padded_losses, padded = self.train2("padded", "PADDING", len(LENGTHS), False)
        for s, (a, b) in enumerate(zip(packed_losses, padded_losses)):
            self.assertAlmostEqual(a, b, delta=1e-5, msg="loss at step %d" % (s + 1))
        diff = max_rel(packed, padded)
        sys.stderr.write("  packed vs padded: max_rel %.2e\n" % diff)
        self.assertLessEqual(diff, 1e-5)


if __name__ == "__main__":
    BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "bin")
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:])
