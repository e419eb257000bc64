#!/usr/bin/python3
"""training.global_batch_size makes the result independent of the world size.

llamafleet-train ranks are started by hand with the torchrun-style environment on loopback,
as the worker starts them. With global_batch_size 12 and micro_batch_size 1 the trainer
derives grad_accum = 12 / ranks; each step takes the same 12 rows of the one global
permutation and the loss is normalised by the global target count, so:
  - the exported weights after K steps on 2, 3 and 4 ranks equal a single-process run's
    (losses within 1e-5 relative, weights 2e-5: see WEIGHT_TOLERANCE; AdamW eps 1e-6,
    cosine schedule with warmup);
  - resizing mid-run (a step-2 checkpoint of 3 ranks resumed on 2, and of 2 resumed on 3)
    ends at the same weights;
  - a world size that does not divide the global batch, and resuming with a different
    global batch, are refused with errors naming the field.

Usage: test_world_size_invariance.py BIN_DIR
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import free_port, json_lines, launch_ranks, max_rel, read_weights, wait_ranks  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin")
TRAIN = os.path.join(BIN, "llamafleet-train")
STEPS = 4
TOLERANCE = 1e-5
# The embedding rows a few tokens use get gradients near 1e-11 whose last bits depend on the
# order ranks sum them, and Adam's first steps at lr 2e-3 turn that into updates of
# lr * 1e-3: one element of model.embed_tokens reaches 1.5e-5 (packed rows of whole records,
# seq_len 32), every other tensor agrees within 4e-6, the losses within 1e-8.
WEIGHT_TOLERANCE = 2e-5


class WorldSizeInvariance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="world-invariance-")
        rng = random.Random(5)
        cls.data = os.path.join(cls.tmp, "d.jsonl")
        with open(cls.data, "w") as f:
            for _ in range(70):
                f.write('{"input_ids": %s}\n' % [rng.randrange(500) for _ in range(rng.randrange(20, 70))])
        cls.reference = cls("test_1_reference_is_nontrivial").train("ref", 1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def spec(self, name, global_batch=12):
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write("""
name: %s
model: {preset: tiny-gqa}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, global_batch_size: %d, micro_batch_size: 1, seq_len: 32, lr: 0.002, eps: 1.0e-6,
           weight_decay: 0.1, grad_clip: 1.0, log_every: 1, lr_schedule: {type: COSINE, warmup_steps: 2}}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
checkpoint: {dir: %s, every_steps: 2}
output: {export_dir: %s, export_dtype: FP32}
""" % (name, self.data, STEPS, global_batch, os.path.join(self.tmp, name + "-ck"),
                os.path.join(self.tmp, name + "-export")))
        return path

    def launch(self, world, args, extra_env=None):
        return wait_ranks(launch_ranks([TRAIN] + args, world, env_extra=extra_env))

    def train(self, name, world, resume=None, spec_name=None):
        args = ["train", "--spec", self.spec(spec_name or name)]
        if resume:
            args += ["--resume", resume]
        codes, outs = self.launch(world, args)
        for code, (_, err) in zip(codes, outs):
            assert code == 0, err[-3000:]
        lines = json_lines(outs[0][0])
        started = [l for l in lines if l.get("event") == "started"][0]
        return {"losses": {l["step"]: l["loss"] for l in lines if l.get("type") == "metrics"},
                "started": started,
                "weights": read_weights(os.path.join(self.tmp, (spec_name or name) + "-export")),
                "ck": os.path.join(self.tmp, (spec_name or name) + "-ck")}

    def assert_same_run(self, got, what):
        want = self.reference
        for step, loss in got["losses"].items():
            self.assertLess(abs(loss - want["losses"][step]) / abs(want["losses"][step]), TOLERANCE, (what, step))
        diff = max_rel(got["weights"], want["weights"])
        print("%s: max relative weight difference %.3g" % (what, diff))
        self.assertLess(diff, WEIGHT_TOLERANCE, what)

    def test_1_reference_is_nontrivial(self):
        self.assertEqual(sorted(self.reference["losses"]), list(range(1, STEPS + 1)))
        self.assertEqual(self.reference["started"]["grad_accum"], 12)
        self.assertEqual(self.reference["started"]["global_batch"], 12)

    def test_2_3_4_ranks_equal_one_process(self):
        for world in (2, 3, 4):
            run = self.train("w%d" % world, world)
            self.assertEqual(run["started"]["grad_accum"], 12 // world)
            self.assertEqual(run["started"]["world_size"], world)
            self.assert_same_run(run, "%d ranks" % world)

    def test_resize_mid_run(self):
        three = self.train("r3", 3)
        two = self.train("r2", 2)
        # 3 -> 2: the step-2 checkpoint of 3 ranks continues on 2 (and 2 -> 3).
        for source, world, name in ((three, 2, "r3to2"), (two, 3, "r2to3")):
            resumed = self.train(name, world, resume=os.path.join(source["ck"], "step-2"))
            self.assertEqual(sorted(resumed["losses"]), [3, 4], name)
            self.assert_same_run(resumed, name)

    def test_refusals_name_the_field(self):
        # 12 rows per step cannot be split over 5 ranks of 1 row.
        codes, outs = self.launch(1, ["train", "--spec", self.spec("five")],
                                  {"RANK": "0", "WORLD_SIZE": "5", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(free_port())})
        self.assertNotEqual(codes[0], 0)
        self.assertIn("training.global_batch_size (12) is not a multiple of micro_batch_size (1) x world size (5); "
                      "world sizes that work: 1, 2, 3, 4, 6, 12", outs[0][1])
        # A checkpoint written with 12 rows per step does not continue with 8.
        codes, outs = self.launch(1, ["train", "--spec", self.spec("eight", global_batch=8), "--resume",
                                      os.path.join(self.reference["ck"], "step-2")])
        self.assertNotEqual(codes[0], 0)
        self.assertIn("checkpoint was written with 12 rows per step, this run takes 8", outs[0][1])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
