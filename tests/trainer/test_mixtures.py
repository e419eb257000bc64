#!/usr/bin/python3
"""Weighted dataset mixtures (data.train) and named eval sets (data.eval) in llamafleet-train,
checked against independent references.

Usage: /usr/bin/python3 test_mixtures.py BIN_DIR [unittest args]

  - the rows of a 2-source mixture are those of mixture_sampler.h's definition, computed
    here on its own (MixtureOrder below): the reference (reference.py) trained on exactly
    those rows, step by step, reaches the trainer's losses and weights (1 and 2 ranks);
  - each eval set gets its own eval line ("set": its name) and TensorBoard tags
    (eval/<name>/loss, eval/<name>/perplexity); each loss is the reference's evaluation of
    the exported weights on that set's file;
  - 1 and 2 ranks see the same rows (the same losses and eval losses).
About 20 s on this 2-core machine.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import reference as ref  # noqa: E402
import tensorboard_events as tb  # noqa: E402
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

BIN = None
TOL = 1e-4  # relative, as the other reference tests
M64 = (1 << 64) - 1


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def key(seed, stream, a, b, c):
    return mix64((mix64((mix64((mix64(seed ^ stream) + a) & M64) + b) & M64) + c) & M64)


DRAW, PERM = 0x6D69787475726531, 0x7065726D75746531


class MixtureOrder:
    """mixture_sampler.h's global rows, written from its header comment."""

    def __init__(self, sizes, weights, seed):
        self.sizes, self.seed = sizes, seed
        total, running, self.cum = sum(weights), 0.0, []
        for w in weights:
            running += w
            self.cum.append(running / total)
        self.cum[-1] = 1.0

    def source(self, epoch, i):
        u = (key(self.seed, DRAW, epoch, i, 0) >> 11) * 2.0 ** -53
        return next(k for k, c in enumerate(self.cum) if u < c)

    def permutation(self, k, epoch, cycle):
        n = self.sizes[k]
        perm = list(range(n))
        counter = key(self.seed, PERM, k, epoch, cycle)
        for i in range(n - 1, 0, -1):
            bound = i + 1
            limit = M64 - M64 % bound
            while True:
                counter = (counter + 1) & M64
                r = mix64(counter)
                if r < limit:
                    break
            j = r % bound
            perm[i], perm[j] = perm[j], perm[i]
        return perm

    def epoch(self, e):
        drawn, perms, out = [0] * len(self.sizes), [None] * len(self.sizes), []
        for i in range(sum(self.sizes)):
            k = self.source(e, i)
            j = drawn[k]
            drawn[k] += 1
            if j % self.sizes[k] == 0:
                perms[k] = self.permutation(k, e, j // self.sizes[k])
            out.append((k, perms[k][j % self.sizes[k]]))
        return out


def read_jsonl(path):
    with open(path) as f:
        return [line for line in f.read().splitlines() if line.strip()]


class Mixtures(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-mixture-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--kv-heads", "2", "--seed", 1])
        self.sources = [self.path("a.jsonl"), self.path("b.jsonl")]
        for f, rows, seed in ((self.sources[0], 6, 5), (self.sources[1], 10, 7)):
            ref.run_command(["make-data", "--out", f, "--vocab", 256, "--rows", rows, "--seed", seed,
                             "--min-len", 10, "--max-len", 60])
        self.evals = {"first": self.path("e1.jsonl"), "second-set": self.path("e2.jsonl")}
        for (name, f), seed in zip(self.evals.items(), (9, 11)):
            ref.run_command(["make-data", "--out", f, "--vocab", 256, "--rows", 5, "--seed", seed,
                             "--min-len", 10, "--max-len", 60])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, steps):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data:
  format: TOKENS
  train: [{path: %s, weight: 3}, {path: %s}]
  eval: [{name: first, path: %s}, {name: second-set, path: %s}]
training: {max_steps: %d, micro_batch_size: 2, global_batch_size: 4, seq_len: 64, batching: PADDING,
           lr: 0.001, weight_decay: 0, grad_clip: 0, log_every: 1, eval_every_steps: 2, seed: 42,
           lr_schedule: {type: CONSTANT}}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32}
checkpoint: {dir: %s, async: false}
output: {export_dir: %s, export_dtype: FP32}
""" % (name, self.model, self.sources[0], self.sources[1], self.evals["first"], self.evals["second-set"], steps,
       self.path(name + "-ck"), self.path(name + "-out")))
        return f

    def train(self, spec, world):
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec], world, local_world=2,
                             env_extra={"LLAMAFLEET_CPU_GEMM": "aten"})
        codes, outs = wait_ranks(procs)
        for code, (_, err) in zip(codes, outs):
            self.assertEqual(code, 0, err[-3000:])
        return json_lines(outs[0][0])

    def test_mixture_rows_losses_and_each_eval_set_match_the_references(self):
        steps = 4  # one epoch: 16 rows in all, 4 a step
        runs = {world: self.train(self.spec("w%d" % world, steps), world) for world in (1, 2)}
        # The rows the definition gives, one global batch a step, as one file the reference
        # trains on in order.
        order = MixtureOrder([6, 10], [3, 1], 42).epoch(0)
        lines = [read_jsonl(f) for f in self.sources]
        mixed = self.path("mixed.jsonl")
        with open(mixed, "w") as f:
            for k, row in order[:steps * 4]:
                f.write(lines[k][row] + "\n")
        self.assertEqual({k for k, _ in order[:steps * 4]}, {0, 1}, "both sources drawn")
        attention = "sdpa" if int(ref.torch.__version__.split(".")[0]) >= 2 else "eager"
        want = ref.run_command(["train", "--attention", attention, "--model", self.model, "--data", mixed,
                                "--out", self.path("ref"), "--steps", steps, "--micro-batch", 2, "--grad-accum", 2,
                                "--lr", 0.001, "--batching", "padding", "--seq-len", 64, "--format", "tokens"])
        for world, lines_out in runs.items():
            losses = [j["loss"] for j in lines_out if j.get("type") == "metrics"]
            self.assertEqual(len(losses), steps)
            for s, (a, b) in enumerate(zip(losses, want["losses"])):
                self.assertAlmostEqual(a, b, delta=1e-5, msg="world %d, loss at step %d" % (world, s + 1))
            cmp = ref.run_command(["compare", "--a", self.path("w%d-out" % world), "--b", self.path("ref"),
                                   "--rtol", 1e-4])
            self.assertEqual(cmp["problems"], [], cmp)
        # One eval line per set and evaluation, named; the same at both world sizes; the last
        # equals the reference's evaluation of the export on that set's file.
        for world, lines_out in runs.items():
            evals = [j for j in lines_out if j.get("type") == "eval"]
            self.assertEqual([(e["step"], e["set"]) for e in evals],
                             [(2, "first"), (2, "second-set"), (4, "first"), (4, "second-set")])
            for name, f in self.evals.items():
                last = [e for e in evals if e["set"] == name][-1]
                want_eval = ref.run_command(["eval", "--model", self.path("w%d-out" % world), "--data", f,
                                             "--format", "tokens", "--batching", "padding", "--seq-len", 64])
                self.assertLess(abs(want_eval["loss"] - last["loss"]) / want_eval["loss"], TOL, (name, want_eval, last))
                self.assertEqual(want_eval["tokens"], last["tokens"])
        first = [e["loss"] for e in runs[1] if e.get("type") == "eval"]
        second = [e["loss"] for e in runs[2] if e.get("type") == "eval"]
        for a, b in zip(first, second):
            self.assertLess(abs(a - b) / a, TOL, (first, second))
        # TensorBoard: each set under its own tags.
        run = tb.read_events(self.path("w1-ck", "tensorboard", "attempt-0"))
        for name in self.evals:
            got = [(step, value) for step, value, _ in run.scalars.get("eval/%s/loss" % name, [])]
            want_points = [(e["step"], e["loss"]) for e in runs[1] if e.get("type") == "eval" and e["set"] == name]
            self.assertEqual([p[0] for p in got], [2, 4], name)
            for (_, g), (_, w) in zip(got, want_points):
                self.assertLessEqual(abs(g - w), 1e-6 * max(1.0, abs(w)))
            self.assertIn("eval/%s/perplexity" % name, run.scalars)
        self.assertNotIn("eval/loss", run.scalars)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
