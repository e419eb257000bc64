#!/usr/bin/python3
"""Evaluation every N steps, early stopping and `output.export: best` in llamafleet-train,
checked against the independent Python reference (reference.py's eval).

Usage: /usr/bin/python3 test_early_stopping.py BIN_DIR [unittest args]

  - training.eval_every_steps: an eval line after every N steps, sharded over 2 ranks; the
    values equal a 1-rank run's (the same global batch), and the reference's evaluation of
    the exported weights;
  - training.early_stopping: the run stops after `patience` evaluations without a min_delta
    improvement, says why ("stopped early at step N: eval loss did not improve by ..."),
    and `output.export: best` exports the weights of the lowest eval loss recorded: the
    reference evaluates the export to exactly that minimum, and the checkpoint saved at
    that step records it;
  - a run stopped and resumed keeps its early-stopping state (it stops at the same step);
  - TensorBoard: rank 0's events files (<checkpoint dir>/tensorboard/attempt-<N>, one run
    per attempt) hold every metrics line's and every evaluation's scalars, read back by an
    independent reader of the format (tests/testing/tensorboard_events.py);
  - bad input names the field and writes nothing.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import reference as ref  # noqa: E402
import tensorboard_events as tb  # noqa: E402  (the independent reader of the events files)
from ranks import json_lines, launch_ranks, wait_ranks  # noqa: E402

BIN = None
TOL = 1e-4  # relative, as the other reference tests


def events(out, kind):
    """The trainer's JSON lines of one kind ("eval", or an event name) from rank 0's stdout."""
    lines = json_lines(out)
    if kind == "eval":
        return [j for j in lines if j.get("type") == "eval"]
    return [j for j in lines if j.get("type") == "event" and j.get("event") == kind]


class EarlyStopping(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-early-stop-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--kv-heads", "2", "--seed", 1])
        # Training data the model overfits quickly (a high lr on 8 rows), and different eval
        # data, so the eval loss turns up while the train loss keeps falling.
        self.data = self.path("train.jsonl")
        ref.run_command(["make-data", "--out", self.data, "--vocab", 256, "--rows", 8, "--seed", 5,
                         "--min-len", 20, "--max-len", 60])
        self.eval = self.path("eval.jsonl")
        ref.run_command(["make-data", "--out", self.eval, "--vocab", 256, "--rows", 6, "--seed", 9,
                         "--min-len", 20, "--max-len", 60])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, steps=40, every=2, patience=3, min_delta=0.01, export="best", lr=0.01, extra="", ck=None):
        f = self.path(name + ".yaml")
        early = "early_stopping: {patience: %d, min_delta: %g}," % (patience, min_delta) if patience else ""
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, eval_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 2, global_batch_size: 4, seq_len: 64, batching: PADDING,
           lr: %g, log_every: 1, eval_every_steps: %d, %s
           lr_schedule: {type: CONSTANT}}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32}
checkpoint: {dir: %s, async: false}
output: {export_dir: %s, export_dtype: FP32, export: %s}
%s
""" % (name, self.model, self.data, self.eval, steps, lr, every, early, self.path((ck or name) + "-ck"),
       self.path(name + "-out"), export, extra))
        return f

    def train(self, spec, world, check=True, extra_args=(), attempt=None):
        env = {"LLAMAFLEET_CPU_GEMM": "aten"}
        if attempt is not None:
            env["LLAMAFLEET_ATTEMPT"] = str(attempt)
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec] + list(extra_args),
                             world, local_world=2, env_extra=env)
        codes, outs = wait_ranks(procs)
        if check:
            for code, (_, err) in zip(codes, outs):
                self.assertEqual(code, 0, err[-3000:])
        return codes, outs

    def reference_eval(self, model_dir):
        return ref.run_command(["eval", "--model", model_dir, "--data", self.eval, "--format", "tokens",
                                "--batching", "padding", "--seq-len", 64])

    def test_stops_early_and_exports_the_best(self):
        _, outs = self.train(self.spec("stop"), 2)
        out = outs[0][0]
        evals = events(out, "eval")
        self.assertGreaterEqual(len(evals), 4, out[-3000:])
        self.assertEqual([e["step"] for e in evals], list(range(2, 2 * len(evals) + 1, 2)))
        stopped = events(out, "stopped_early")
        self.assertEqual(len(stopped), 1, "the run did not stop early: " + out[-3000:])
        s = stopped[0]
        self.assertLess(s["step"], 40)
        self.assertEqual(s["step"], evals[-1]["step"])
        self.assertRegex(s["reason"], r"^stopped early at step %d: eval loss did not improve by 0.01 for 3 "
                                      r"evaluations" % s["step"])
        losses = [e["loss"] for e in evals]
        best = min(range(len(losses)), key=lambda i: losses[i])
        self.assertEqual(s["best_step"], evals[best]["step"])
        self.assertAlmostEqual(s["best_loss"], losses[best], delta=1e-12)
        finished = events(out, "finished")
        self.assertEqual(finished[0]["steps"], s["step"])
        # The run must have turned: the best is not the last evaluation (else this test
        # would not exercise reading the best back).
        self.assertLess(evals[best]["step"], s["step"], losses)
        # The export holds the best weights: the reference evaluates it to the minimum.
        want = self.reference_eval(self.path("stop-out"))
        self.assertLess(abs(want["loss"] - losses[best]) / want["loss"], TOL, (want, losses))
        # Its checkpoint is on disk and records that eval loss.
        with open(self.path("stop-ck", "step-%d" % evals[best]["step"], "manifest.json")) as fh:
            manifest = json.load(fh)
        self.assertAlmostEqual(manifest["eval_loss"], losses[best], delta=1e-12)
        saved = [c for c in events(out, "checkpoint_saved") if c["step"] == evals[best]["step"]]
        self.assertEqual(len(saved), 1)
        self.assertAlmostEqual(saved[0]["eval_loss"], losses[best], delta=1e-12)
        self.check_tensorboard(self.path("stop-ck", "tensorboard", "attempt-0"), out)

    def check_tensorboard(self, run_dir, out):
        """Every metrics line and evaluation of rank 0's stdout `out` is in the run's scalars."""
        run = tb.read_events(run_dir)
        self.assertEqual(run.file_version, "brain.Event:2")
        self.assertEqual(run.truncated, [])
        metrics = [j for j in json_lines(out) if j.get("type") == "metrics"]
        self.assertGreater(len(metrics), 0)
        want = {"train/loss": [(m["step"], m["loss"]) for m in metrics],
                "train/lr": [(m["step"], m["lr"]) for m in metrics],
                "train/grad_norm": [(m["step"], m["grad_norm"]) for m in metrics],
                "perf/tokens_per_s": [(m["step"], m["tokens_per_s"]) for m in metrics],
                "memory/peak_gib": [(m["step"], m["peak_mem_bytes"] / 2**30) for m in metrics],
                "eval/loss": [(e["step"], e["loss"]) for e in events(out, "eval")],
                "eval/perplexity": [(e["step"], e["perplexity"]) for e in events(out, "eval")]}
        for tag, points in want.items():
            got = [(step, value) for step, value, _ in run.scalars.get(tag, [])]
            self.assertEqual([p[0] for p in got], [p[0] for p in points], tag)
            for (_, g), (_, w) in zip(got, points):
                self.assertLessEqual(abs(g - w), 1e-6 * max(1.0, abs(w)), tag)  # float precision

    def test_eval_is_the_same_at_any_world_size_and_matches_the_reference(self):
        # No early stopping, export the last weights: 1 rank and 2 ranks evaluate alike, and
        # the last evaluation is the reference's evaluation of the export.
        runs = {}
        for world in (1, 2):
            _, outs = self.train(self.spec("w%d" % world, steps=6, patience=0, export="last"), world)
            runs[world] = events(outs[0][0], "eval")
        self.assertEqual([e["step"] for e in runs[1]], [2, 4, 6])
        self.assertEqual([e["step"] for e in runs[2]], [2, 4, 6])
        for a, b in zip(runs[1], runs[2]):
            self.assertLess(abs(a["loss"] - b["loss"]) / a["loss"], TOL, (runs[1], runs[2]))
            self.assertEqual(a["tokens"], b["tokens"])
        want = self.reference_eval(self.path("w2-out"))
        self.assertLess(abs(want["loss"] - runs[2][-1]["loss"]) / want["loss"], TOL, (want, runs[2]))
        self.assertAlmostEqual(runs[2][-1]["perplexity"], math.exp(runs[2][-1]["loss"]), delta=1e-9)

    def test_eval_rows_that_do_not_split_evenly(self):
        # 5 eval rows on 2 data-parallel ranks, 2 a micro-batch: rank 0 holds 3 rows (2
        # passes), rank 1 holds 2 (1 pass). Rank 1 still joins rank 0's second pass's
        # collectives, and the loss is the 1-rank loss over the same 5 rows. World 4 is the
        # same with tensor parallelism 2: both ranks of a tensor-parallel pair run the pass
        # past their rows (the vocabulary-parallel loss is a collective of the pair).
        ref.run_command(["make-data", "--out", self.eval, "--vocab", 256, "--rows", 5, "--seed", 9,
                         "--min-len", 20, "--max-len", 60])
        runs = {}
        tp = "parallelism: {tensor_parallel: 2}\nresources: {nodes: 2, gpus_per_node: 2}"
        for world, extra in ((1, ""), (2, ""), (4, tp)):
            _, outs = self.train(self.spec("odd%d" % world, steps=2, patience=0, export="last", extra=extra), world,
                                 extra_args=["--collective-timeout-s", "20"])
            runs[world] = events(outs[0][0], "eval")
        for world in (2, 4):
            self.assertEqual([e["step"] for e in runs[world]], [2])
            self.assertEqual(runs[1][0]["tokens"], runs[world][0]["tokens"])
            self.assertLess(abs(runs[1][0]["loss"] - runs[world][0]["loss"]) / runs[1][0]["loss"], TOL, runs)

    def test_resume_keeps_the_early_stopping_state(self):
        _, outs = self.train(self.spec("whole"), 2)
        whole = events(outs[0][0], "stopped_early")[0]
        # The same run cut at step 6 (max_steps), then resumed from its checkpoint with the
        # full step budget: it must stop at the same step with the same best.
        _, cut_outs = self.train(self.spec("cut", steps=6), 2, attempt=1)
        resumed_spec = self.spec("resumed", ck="cut")
        _, outs = self.train(resumed_spec, 2, extra_args=["--resume", self.path("cut-ck", "step-6")], attempt=2)
        again = events(outs[0][0], "stopped_early")
        self.assertEqual(len(again), 1, outs[0][0][-3000:])
        self.assertEqual(again[0]["step"], whole["step"])
        self.assertEqual(again[0]["best_step"], whole["best_step"])
        self.assertLess(abs(again[0]["best_loss"] - whole["best_loss"]) / whole["best_loss"], TOL)
        # One TensorBoard run per attempt, side by side under the job's checkpoint dir.
        runs = tb.read_logdir(self.path("cut-ck", "tensorboard"))
        self.assertEqual(sorted(runs), ["attempt-1", "attempt-2"])
        self.check_tensorboard(self.path("cut-ck", "tensorboard", "attempt-1"), cut_outs[0][0])
        self.check_tensorboard(self.path("cut-ck", "tensorboard", "attempt-2"), outs[0][0])

    def test_bad_input_names_the_field(self):
        cases = [
            ("training: {eval_every_steps: -1}", "training.eval_every_steps"),
            ("training: {early_stopping: {patience: 2}}", "training.early_stopping"),
            ("training: {eval_every_steps: 2, early_stopping: {patience: 2, min_delta: -1}}",
             "training.early_stopping.min_delta"),
            ("output: {export: best}", "output.export"),
            ("output: {export: sometimes}", "output.export"),
        ]
        for i, (snippet, field) in enumerate(cases):
            f = self.path("bad%d.yaml" % i)
            with open(f, "w") as fh:
                fh.write("model: {path: %s}\ndata: {train_path: %s, format: TOKENS}\n%s\n"
                         % (self.model, self.data, snippet))
            p = subprocess.run([os.path.join(BIN, "llamafleet-train"), "train", "--spec", f, "--device", "cpu"],
                               capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0, snippet)
            self.assertIn(field, p.stdout + p.stderr, snippet)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
