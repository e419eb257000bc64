#!/usr/bin/python3
"""llamafleet-train's command line on chat data, against the Hugging Face fixtures.

Usage: /usr/bin/python3 test_chat_cli.py BIN_DIR [unittest args]

A model directory is made from fixtures/chat (the tokenizer, and a tokenizer_config.json
holding the real Llama 3.1 template); `tokenize --format chat --model DIR` must print, for
the fixture's conversations, the ids and assistant masks that transformers'
apply_chat_template and HF tokenizers gave (fixtures/chat/llama3.1.jsonl), and `preview
--spec` must show the first records with the loss-carrying tokens between [[ and ]].
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "chat")
BIN = None


def trainer(*args, check=True):
    p = subprocess.run([os.path.join(BIN, "llamafleet-train")] + list(args), capture_output=True, text=True,
                       timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"llamafleet-train {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


class ChatCliTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lf-chat-cli-")
        self.model = os.path.join(self.dir, "model")
        os.makedirs(self.model)
        shutil.copy(os.path.join(FIXTURES, "tokenizer", "tokenizer.json"), self.model)
        with open(os.path.join(FIXTURES, "templates", "llama3.1.jinja")) as fh:
            template = fh.read()
        with open(os.path.join(self.model, "tokenizer_config.json"), "w") as fh:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": template}, fh)
        with open(os.path.join(FIXTURES, "llama3.1.jsonl")) as fh:
            self.refs = [json.loads(line) for line in fh][:40]
        self.data = os.path.join(self.dir, "chat.jsonl")
        with open(self.data, "w") as fh:
            for r in self.refs:
                fh.write(json.dumps({"messages": r["messages"]}, ensure_ascii=False) + "\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_tokenize_prints_the_reference_ids_and_masks(self):
        out = trainer("tokenize", "--format", "chat", "--model", self.model, "--data", self.data).stdout
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        self.assertEqual(len(got), len(self.refs))
        for i, (g, r) in enumerate(zip(got, self.refs)):
            self.assertEqual(g["tokens"], r["ids"], f"record {i + 1}")
            self.assertEqual("".join(map(str, g["target"])), r["assistant"], f"record {i + 1}")
        last = trainer("tokenize", "--format", "chat", "--model", self.model, "--data", self.data,
                       "--train-on", "last_assistant").stdout
        got = [json.loads(line) for line in last.splitlines() if line.startswith("{")]
        self.assertEqual("".join(map(str, got[0]["target"])), self.refs[0]["last_assistant"])

    def test_unknown_template_names_the_file_and_the_setting(self):
        with open(os.path.join(self.model, "tokenizer_config.json"), "w") as fh:
            json.dump({"chat_template": "{{ messages }}"}, fh)
        p = trainer("tokenize", "--format", "chat", "--model", self.model, "--data", self.data, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("tokenizer_config.json's chat_template", p.stderr)
        self.assertIn("data.chat_template", p.stderr)
        # A named renderer needs no template from the model.
        trainer("tokenize", "--format", "chat", "--model", self.model, "--data", self.data,
                "--chat-template", "llama3")

    def test_preview_marks_the_tokens_with_loss(self):
        spec = os.path.join(self.dir, "job.yaml")
        with open(spec, "w") as fh:
            fh.write(f"name: chat\nmodel: {{preset: tiny, tokenizer: {self.model}/tokenizer.json}}\n"
                     f"data: {{train_path: {self.data}, format: chat}}\n")
        out = trainer("preview", "--spec", spec, "-n", "2").stdout
        self.assertIn(f"{self.data}:1: {len(self.refs[0]['ids'])} tokens, "
                      f"{self.refs[0]['assistant'].count('1')} with loss", out)
        self.assertIn("Cutting Knowledge Date: December 2023", out)
        self.assertIn("<|eot_id|>]]", out)
        self.assertNotIn(f"{self.data}:3:", out)


if __name__ == "__main__":
    BIN = sys.argv.pop(1)
    unittest.main()
