#!/usr/bin/python3
"""llamafleet-train generate against the independent reference (reference.py, torch 1.13).

Usage: /usr/bin/python3 test_generate.py BIN_DIR [unittest args]

  - greedy generation of three prompts of different lengths batched together equals, token
    for token, the argmax of reference.py's full forward recomputed over the whole sequence
    at every step, with the cache and without (--no-cache): a random GQA model, and
    fixtures/families/llama3.1 (llama3 RoPE scaling, EOS list [2, 3] in config.json: a row
    that draws either stops with "eos");
  - the stream: one token line per generated id, pieces concatenating to the final text,
    the final line's tokens count and stop reason;
  - the five family fixtures' greedy ids equal Hugging Face transformers' batched, left-padded
    generate(do_sample=False) (fixtures/families/generate_expected.json,
    make_generate_expected.py);
  - --adapter: a LoRA adapter on all seven projections merged in gives the greedy ids of
    lora_reference.py's unmerged model (base + B A x scaling);
  - seeded sampling gives the same output twice, a different seed another;
  - oversize prompts and bad prompt files fail with one error line naming the prompt/line.
18 llamafleet-train starts: about 2 minutes at load 8.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lora_reference as lref  # noqa: E402
import reference as ref  # noqa: E402

BIN = None
TOKENIZER = os.path.join(HERE, "fixtures", "tokenizers", "llama3_style")
LLAMA31 = os.path.join(HERE, "fixtures", "families", "llama3.1")
PROMPTS = [[5, 9, 13], [1, 7, 4, 200, 6, 7, 30], [40, 3, 8, 21, 30, 11, 2, 17, 9, 44, 12, 6, 100]]


def generate(*args, check=True):
    p = subprocess.run([os.path.join(BIN, "llamafleet-train"), "generate"] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("generate failed (%d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
    return p


def parse(stdout):
    """-> {index: (ids, pieces, final)}"""
    out = {}
    for line in stdout.splitlines():
        j = json.loads(line)
        ids, pieces, final = out.setdefault(j["index"], ([], [], {}))
        if "token" in j:
            ids.append(j["token"])
            pieces.append(j["text"])
        else:
            final.update(j)
    return out


def load_json(path):
    with open(path) as f:
        return json.load(f)


def reference_greedy(model, prompt, max_new, eos):
    ids = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(max_new):
            nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
            out.append(nxt)
            if nxt in eos:
                return out, "eos"
            ids.append(nxt)
    return out, "length"


class GenerateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-generate-")
        self.prompts = os.path.join(self.tmp, "prompts.jsonl")
        with open(self.prompts, "w") as f:
            for p in PROMPTS:
                f.write(json.dumps({"tokens": p}) + "\n")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def check_greedy(self, model_dir, eos, max_new=12, adapter=None):
        if adapter:
            _, model = lref.load_with_adapter(model_dir, adapter)
        else:
            _, model = ref.load_model(model_dir)
        model.eval()
        expected = [reference_greedy(model, p, max_new, eos) for p in PROMPTS]
        for extra in ([], ["--no-cache"]):
            if adapter:
                extra = extra + ["--adapter", adapter]
            p = generate("--model", model_dir, "--tokenizer", TOKENIZER, "--prompts", self.prompts,
                         "--max-new-tokens", max_new, "--device", "cpu", *extra)
            got = parse(p.stdout)
            self.assertIn("tokens/s", p.stderr)
            for i, (ids, reason) in enumerate(expected):
                g_ids, pieces, final = got[i]
                self.assertEqual(g_ids, ids, "prompt %d %s" % (i, extra))
                self.assertEqual(final["stop_reason"], reason)
                self.assertEqual(final["tokens"], len(ids))
                self.assertEqual("".join(pieces), final["text"])
        return expected

    def test_greedy_equals_full_forward_argmax(self):
        d = os.path.join(self.tmp, "m")
        ref.run_command(["make-model", "--out", d, "--vocab", "256", "--hidden", "64", "--heads", "4",
                         "--kv-heads", "2", "--ffn", "96", "--max-pos", "64", "--seed", "3",
                         "--std", "0.2"])
        self.check_greedy(d, eos={2})  # config.json's; the tokenizer's lie outside vocab 256

    def test_adapter_is_merged(self):
        d, a = os.path.join(self.tmp, "m"), os.path.join(self.tmp, "adapter")
        ref.run_command(["make-model", "--out", d, "--vocab", "256", "--hidden", "64", "--heads", "4",
                         "--kv-heads", "2", "--ffn", "96", "--max-pos", "64", "--seed", "5",
                         "--std", "0.2"])
        lref.run_command(["make-adapter", "--model", d, "--out", a, "--r", "4", "--alpha", "8",
                          "--targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                          "--b-std", "0.3"])
        with_adapter = self.check_greedy(d, eos={2}, adapter=a)
        _, base = ref.load_model(d)
        self.assertNotEqual(with_adapter, [reference_greedy(base, p, 12, {2}) for p in PROMPTS])

    def test_llama31_family_and_its_eos_list(self):
        d = os.path.join(self.tmp, "llama3.1")
        shutil.copytree(LLAMA31, d)
        # The EOS list [2, 3]: make one prompt's greedy continuation hit it.
        _, model = ref.load_model(d)
        cfg = load_json(os.path.join(d, "config.json"))
        free = [reference_greedy(model, p, 12, set())[0] for p in PROMPTS]
        cfg["eos_token_id"] = [free[1][4], 250]
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        # generation_config.json's list counts too.
        gen_eos = load_json(os.path.join(d, "generation_config.json"))["eos_token_id"]
        expected = self.check_greedy(d, eos={free[1][4], 250} | set(gen_eos))
        self.assertEqual(expected[1][1], "eos")

    def test_families_equal_hf_generate(self):
        expected = load_json(os.path.join(HERE, "fixtures", "families", "generate_expected.json"))
        self.assertEqual(expected["prompts"], PROMPTS)
        for family in ["llama2", "llama3.1", "llama3.2", "mistral", "qwen2.5"]:
            p = generate("--model", os.path.join(HERE, "fixtures", "families", family), "--tokenizer", TOKENIZER,
                         "--prompts", self.prompts, "--max-new-tokens", expected["max_new_tokens"],
                         "--device", "cpu")
            got = parse(p.stdout)
            for i in range(len(PROMPTS)):
                self.assertEqual(got[i][0], expected[family][i], "%s prompt %d" % (family, i))

    def test_seeded_sampling_is_reproducible(self):
        d = os.path.join(self.tmp, "m")
        ref.run_command(["make-model", "--out", d, "--vocab", "256", "--max-pos", "64", "--seed", "4",
                         "--std", "0.2"])
        args = ["--model", d, "--tokenizer", TOKENIZER, "--prompts", self.prompts, "--max-new-tokens", 16,
                "--temperature", 1.0, "--top-p", 0.95, "--top-k", 50, "--device", "cpu"]
        a = parse(generate(*args, "--seed", 7).stdout)
        b = parse(generate(*args, "--seed", 7).stdout)
        c = parse(generate(*args, "--seed", 8).stdout)
        self.assertEqual(a, b)
        self.assertNotEqual([a[i][0] for i in a], [c[i][0] for i in c])

    def test_bad_input_fails_with_one_line(self):
        d = os.path.join(self.tmp, "m")
        ref.run_command(["make-model", "--out", d, "--vocab", "256", "--max-pos", "16"])
        cases = [
            ({"tokens": list(range(10))}, "prompt 0: 10 prompt tokens + --max-new-tokens 8 exceed"),
            ({"messages": [{"role": "user", "content": "hi"}]}, "prompts.jsonl:1: messages: a conversation needs --chat"),
            ({"text": "x"}, "prompts.jsonl:1: expected a \"prompt\", \"messages\" or \"tokens\" field"),
        ]
        for record, message in cases:
            with open(self.prompts, "w") as f:
                f.write(json.dumps(record) + "\n")
            p = generate("--model", d, "--tokenizer", TOKENIZER, "--prompts", self.prompts,
                         "--max-new-tokens", 8, "--device", "cpu", check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(message, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
        p = generate("--model", d, "--tokenizer", TOKENIZER, "--prompt", "x", "--prompts", self.prompts,
                     check=False)
        self.assertIn("exactly one of --prompt and --prompts", p.stderr)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
