#!/usr/bin/python3
"""eval.samples in llamafleet-train: generations at every evaluation, checked against an
independent path (llamafleet-train generate on the exported or base weights).

Usage: /usr/bin/python3 test_eval_samples.py BIN_DIR [unittest args]

  - 2 ranks (FULL_SHARD, Gloo), an evaluation every 2 steps of 4, from_eval 3 of a CHAT eval
    set: three "sample" lines follow each evaluation's "eval" line (steps 2 and 4), prompt =
    the turns before the last assistant turn through the llama3 template with its
    generation prompt, reference = that turn; at the last step the texts, token counts and
    stop reasons equal greedy `generate --chat` on the export; scores follow their
    definition; TensorBoard holds one "samples" text summary per evaluation (the text
    plugin's, read by tests/testing/tensorboard_events.py) listing every sample;
  - a prompts file with known references (the base model's greedy texts, training at lr
    1e-20 so the weights stay the base's): exact_match and contains are 1/1, 0/1 and 0/0;
  - LoRA (2 ranks): the samples equal greedy `generate --chat` on the merged export;
  - seeded sampling (temperature 1) gives the same samples in two runs;
  - a scored prompt without a reference fails at start naming the file and line.
8 train and 6 generate runs of a 2-layer model: about 80 s at load 10.
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
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import reference as ref  # noqa: E402
import tensorboard_events as tb  # noqa: E402
from ranks import train_ranks  # noqa: E402

BIN = None
TOKENIZER = os.path.join(HERE, "fixtures", "chat", "tokenizer")
WORDS = ["apple", "river", "stone", "cloud", "seven", "green", "table", "light", "north", "music"]


def conversation(i):
    a, b = WORDS[i % len(WORDS)], WORDS[(3 * i + 1) % len(WORDS)]
    return {"messages": [{"role": "system", "content": "Answer briefly."},
                         {"role": "user", "content": "Say %s and %s." % (a, b)},
                         {"role": "assistant", "content": "%s %s" % (a, b)},
                         {"role": "user", "content": "Now only %s." % b},
                         {"role": "assistant", "content": b}]}


def json_lines(text):
    """The JSON lines of `text`, split at "\n" only: model text in a line may hold U+2028
    or U+0085 unescaped, where str.splitlines() would cut it."""
    return [json.loads(line) for line in text.split("\n") if line.strip().startswith("{")]


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


ASCII_SPACE = " \t\n\v\f\r"


def scores(text, reference):
    """The scores' definition (surrounding ASCII whitespace stripped)."""
    ref = reference.strip(ASCII_SPACE)
    return {"exact_match": 1.0 if text.strip(ASCII_SPACE) == ref else 0.0,
            "contains": 1.0 if ref in text else 0.0}


class EvalSamples(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-eval-samples-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = self.path("base")
        ref.run_command(["make-model", "--out", self.model, "--vocab", 3328, "--max-pos", 256, "--kv-heads", 2,
                         "--seed", 1, "--std", 0.2])
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(TOKENIZER, name), self.model)
        self.train_data = self.path("train.jsonl")
        write_jsonl(self.train_data, [conversation(i) for i in range(8)])
        self.eval_data = self.path("eval.jsonl")
        write_jsonl(self.eval_data, [conversation(i) for i in range(20, 24)])

    def path(self, *p):
        return os.path.join(self.tmp, *p)

    def spec(self, name, samples, steps=4, every=2, lr=0.01, extra=""):
        f = self.path(name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s, tokenizer: %s}
data: {train_path: %s, eval: [{name: dev, path: %s}], format: CHAT, chat_template: llama3}
training: {max_steps: %d, micro_batch_size: 2, global_batch_size: 4, seq_len: 192, batching: PADDING,
           lr: %g, log_every: 1, eval_every_steps: %d, seed: 11, lr_schedule: {type: CONSTANT}}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32}
checkpoint: {dir: %s, async: false}
output: {export_dir: %s, export_dtype: FP32}
eval: {samples: %s}
%s
""" % (name, self.model, self.model, self.train_data, self.eval_data, steps, lr, every,
       self.path(name + "-ck"), self.path(name + "-out"), samples, extra))
        return f

    def train(self, spec, world, check=True):
        return train_ranks(self, BIN, spec, world, {"LLAMAFLEET_TOKEN_CACHE_DIR": self.path("tokens")}, check)

    def generate(self, model_dir, prompts, n, chat):
        args = [os.path.join(BIN, "llamafleet-train"), "generate", "--model", model_dir, "--prompts", prompts,
                "--max-new-tokens", n, "--batch-size", 64, "--device", "cpu"]
        if chat:
            args += ["--chat", "--chat-template", "llama3"]
        p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return {j["index"]: j for j in json_lines(p.stdout) if "token" not in j}

    def test_greedy_samples_at_every_evaluation_equal_generate_on_the_export(self):
        _, outs = self.train(self.spec("greedy", "{from_eval: 3, max_new_tokens: 12, score: [exact_match, contains]}"), 2)
        lines = json_lines(outs[0][0])
        self.assertEqual([j for j in json_lines(outs[1][0]) if j.get("type") == "sample"], [])  # rank 0 only
        kinds = [(j["type"], j["step"]) for j in lines if j.get("type") in ("eval", "sample")]
        self.assertEqual(kinds, [("eval", 2)] + [("sample", 2)] * 3 + [("eval", 4)] + [("sample", 4)] * 3)
        samples = [j for j in lines if j.get("type") == "sample"]
        for s in samples:
            c = conversation(20 + s["index"])["messages"]
            self.assertEqual(s["reference"], c[-1]["content"])
            self.assertTrue(s["prompt"].endswith("<|start_header_id|>assistant<|end_header_id|>\n\n"), s["prompt"])
            self.assertIn(c[-2]["content"], s["prompt"])
            self.assertNotIn("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" + c[-1]["content"],
                             s["prompt"])
            self.assertEqual(s["scores"], scores(s["text"], s["reference"]))
            self.assertIn(s["stop_reason"], ("eos", "length"))
            self.assertLessEqual(s["tokens"], 12)
        self.assertEqual([s["index"] for s in samples], [0, 1, 2, 0, 1, 2])
        # The independent path: greedy generate on the exported (last step's) weights.
        prompts = self.path("chat-prompts.jsonl")
        write_jsonl(prompts, [{"messages": conversation(20 + i)["messages"][:-1]} for i in range(3)])
        want = self.generate(self.path("greedy-out"), prompts, 12, chat=True)
        last = [s for s in samples if s["step"] == 4]
        for s in last:
            w = want[s["index"]]
            self.assertEqual((s["text"], s["tokens"], s["stop_reason"]), (w["text"], w["tokens"], w["stop_reason"]))
        # TensorBoard: one Markdown table per evaluation, the text plugin's.
        run = tb.read_events(self.path("greedy-ck", "tensorboard", "attempt-0"))
        tables = run.texts.get("samples", [])
        self.assertEqual([t[0] for t in tables], [2, 4])
        for step, table, _ in tables:
            self.assertTrue(table.startswith("| # | prompt | text | reference | exact_match | contains |\n"), table)
            rows = table.rstrip("\n").split("\n")[2:]
            self.assertEqual(len(rows), 3)
            for row, s in zip(rows, [s for s in samples if s["step"] == step]):
                self.assertTrue(row.startswith("| %d | " % s["index"]), row)
                cell = s["text"].replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")
                self.assertIn(" %s |" % cell, row)

    def test_lora_samples_equal_generate_on_the_merged_export(self):
        spec = self.spec("lora", "{from_eval: 2, max_new_tokens: 12}", steps=2, every=0, lr=0.05,
                         extra="peft: {method: lora, r: 4, alpha: 8, dropout: 0, "
                               "target_modules: [q_proj, v_proj, down_proj]}")
        with open(spec) as f:
            text = f.read().replace("export_dtype: FP32}", "export_dtype: FP32, merge: true}")
        with open(spec, "w") as f:
            f.write(text)
        _, outs = self.train(spec, 2)
        samples = [j for j in json_lines(outs[0][0]) if j.get("type") == "sample"]
        self.assertEqual([s["step"] for s in samples], [2, 2])
        prompts = self.path("lora-prompts.jsonl")
        write_jsonl(prompts, [{"messages": conversation(20 + i)["messages"][:-1]} for i in range(2)])
        want = self.generate(self.path("lora-out", "merged"), prompts, 12, chat=True)
        base = self.generate(self.model, prompts, 12, chat=True)
        for s in samples:
            w = want[s["index"]]
            self.assertEqual((s["text"], s["tokens"], s["stop_reason"]), (w["text"], w["tokens"], w["stop_reason"]))
        # The adapter changed what the model writes (else the merge would go unchecked).
        self.assertNotEqual([s["text"] for s in samples], [base[i]["text"] for i in range(2)])

    def test_scores_against_known_references(self):
        # The base model's greedy texts of candidate prompts; the first two that are valid
        # UTF-8 (a random model may end a text inside a character, which the JSON line
        # shows as U+FFFD) and not blank become references.
        candidates = [{"prompt": "Say %s and %s." % (a, b)} for a, b in zip(WORDS, WORDS[3:] + WORDS[:3])]
        base_prompts = self.path("base-prompts.jsonl")
        write_jsonl(base_prompts, candidates)
        base = self.generate(self.model, base_prompts, 10, chat=False)
        good = [i for i in range(len(candidates))
                if "\ufffd" not in base[i]["text"] and base[i]["text"].strip(ASCII_SPACE)]
        self.assertGreaterEqual(len(good), 2, base)
        prompts = [candidates[good[0]], candidates[good[1]], {"prompt": "north"}]
        g = [base[good[0]]["text"], base[good[1]]["text"]]
        g1 = g[1].strip(ASCII_SPACE)
        references = [" %s \n" % g[0], g1[: max(1, len(g1) - 1)], "@@ not written @@"]
        with_refs = self.path("scored.jsonl")
        write_jsonl(with_refs, [dict(p, reference=r) for p, r in zip(prompts, references)])
        # lr 1e-20: the weights stay the base's, so the samples are the base model's texts.
        spec = self.spec("scored", "{prompts: %s, max_new_tokens: 10, score: [exact_match, contains]}" % with_refs,
                         steps=2, every=0, lr=1e-20)
        _, outs = self.train(spec, 1)
        samples = [j for j in json_lines(outs[0][0]) if j.get("type") == "sample"]
        self.assertEqual([s["step"] for s in samples], [2, 2, 2])
        self.assertEqual([s["text"] for s in samples[:2]], g)
        # The same three prompts in one batch, as the trainer ran them.
        same = self.generate(self.model, with_refs, 10, chat=False)
        self.assertEqual([s["text"] for s in samples], [same[i]["text"] for i in range(3)])
        self.assertEqual([s["scores"] for s in samples], [scores(s["text"], s["reference"]) for s in samples])
        self.assertEqual([s["prompt"] for s in samples], [p["prompt"] for p in prompts])
        want = [{"exact_match": 1.0, "contains": 1.0},
                {"exact_match": 1.0 if len(g1) == 1 else 0.0, "contains": 1.0},
                {"exact_match": 0.0, "contains": 0.0}]
        self.assertEqual([s["scores"] for s in samples], want)

    def test_seeded_sampling_is_reproducible(self):
        runs = []
        for name in ("a", "b"):
            _, outs = self.train(self.spec(name, "{from_eval: 2, max_new_tokens: 12, temperature: 1.0}", steps=2), 1)
            runs.append([j for j in json_lines(outs[0][0]) if j.get("type") == "sample"])
        self.assertEqual(len(runs[0]), 2)
        self.assertEqual(runs[0], runs[1])
        self.assertNotIn("scores", runs[0][0])

    def test_a_scored_prompt_without_reference_fails_at_start(self):
        bad = self.path("prompts.jsonl")
        write_jsonl(bad, [{"prompt": "a", "reference": "b"}, {"prompt": "c"}])
        codes, outs = self.train(self.spec("bad", "{prompts: %s, score: [contains]}" % bad), 1, check=False)
        self.assertNotEqual(codes[0], 0)
        self.assertIn('prompts.jsonl:2: no "reference" (eval.samples.score needs one on every prompt)', outs[0][1])
        self.assertNotIn("Traceback", outs[0][1])


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
