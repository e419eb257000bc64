#!/usr/bin/python3
"""The model families users finetune (Llama 2, Llama 3.1 with llama3 RoPE scaling, Llama
3.2 with tied embeddings and an explicit head_dim, Mistral with head_dim, Qwen2.5 with q/k/v
biases and tied embeddings) against Hugging Face transformers and the independent
reference.

The models are fixtures made by HF transformers' own save_pretrained
(fixtures/families/make_families.py, run in the sid root), each with its config in
transformers 5.x's layout (config.json: rope_parameters) and 4.x's (config.v4.json:
rope_theta, rope_scaling); expected.json holds HF's loss on tokens.jsonl.

  - eval: the loss equals HF's within 1e-5 relative, every family in both layouts;
  - export (from the HF directory) writes the family's config (model_type, architectures,
    head_dim, RoPE, no lm_head.weight when tied), the reload has identical tensors and
    evaluates to the same loss;
  - 2-rank FULL_SHARD training (biases sharded with their layer) equals reference.py's
    single-process AdamW steps, losses within 1e-5 and weights within 1e-5 relative;
  - tensor parallelism 2 splits Qwen2.5's biases with their rows and equals the reference
    (losses 1e-5, weights 1e-5);
  - LoRA on Qwen2.5 (frozen biases, tied embeddings), Llama 3.2 (tied, explicit head_dim),
    Llama 3.1 and Mistral on 2 ranks FULL_SHARD equals lora_reference.py, adapter and merged
    model within 1e-5; the exported adapter, reloaded by lora_reference.py onto the base,
    evaluates to the merged model's loss.

Usage: /usr/bin/python3 test_families.py BIN_DIR [unittest args]
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lora_reference as lref  # noqa: E402
import reference as ref  # noqa: E402
from ranks import json_lines, launch_ranks, max_rel, read_weights, wait_ranks  # noqa: E402

BIN = None
FIXTURES = os.path.join(HERE, "fixtures", "families")
FAMILIES = ["llama2", "llama3.1", "llama3.2", "mistral", "qwen2.5"]
ARCH = {"llama2": "LlamaForCausalLM", "llama3.1": "LlamaForCausalLM", "llama3.2": "LlamaForCausalLM",
        "mistral": "MistralForCausalLM", "qwen2.5": "Qwen2ForCausalLM"}
with open(os.path.join(FIXTURES, "expected.json")) as fh:
    EXPECTED = json.load(fh)
TOKENS = os.path.join(FIXTURES, "tokens.jsonl")
EVAL_ARGS = ["--data", TOKENS, "--format", "tokens", "--batching", "packing", "--seq-len", EXPECTED["seq_len"]]


def trainer(*args):
    import subprocess
    p = subprocess.run([os.path.join(BIN, "llamafleet-train")] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("llamafleet-train %s failed:\n%s" % (args, p.stderr[-3000:]))
    return p


def attention():
    """The trainer's attention kernel: fused on LibTorch 2.x, eager before (as test_reference)."""
    return "sdpa" if int(ref.torch.__version__.split(".")[0]) >= 2 else "eager"


class Families(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lf-families-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def model(self, family, layout):
        """A copy of the fixture with config.json in `layout` ("v5" or "v4")."""
        d = os.path.join(self.tmp, "%s-%s" % (family, layout))
        if not os.path.exists(d):
            os.makedirs(d)
            shutil.copy(os.path.join(FIXTURES, family, "model.safetensors"), d)
            src = "config.json" if layout == "v5" else "config.v4.json"
            shutil.copy(os.path.join(FIXTURES, family, src), os.path.join(d, "config.json"))
        return d

    def eval_loss(self, model_dir):
        got = json_lines(trainer("eval", "--model", model_dir, *EVAL_ARGS).stdout)[-1]
        self.assertEqual(got["tokens"], EXPECTED["rows"] * (EXPECTED["seq_len"] - 1))
        return got["loss"]

    def test_eval_equals_transformers_in_both_layouts(self):
        for family in FAMILIES:
            want = EXPECTED["loss"][family]
            for layout in ("v5", "v4"):
                with self.subTest(family=family, layout=layout):
                    got = self.eval_loss(self.model(family, layout))
                    self.assertLess(abs(got - want) / want, 1e-5, "%s %s: %r vs HF %r" % (family, layout, got, want))
            # The independent reference reads the same directory to the same loss.
            r = ref.run_command(["eval", "--model", self.model(family, "v4")] + EVAL_ARGS)
            self.assertLess(abs(r["loss"] - want) / want, 1e-5, family)

    def test_export_round_trip(self):
        for family in FAMILIES:
            with self.subTest(family=family):
                src = self.model(family, "v5")
                out = os.path.join(self.tmp, family + "-export")
                trainer("export", "--checkpoint", src, "--out", out, "--dtype", "fp32")
                with open(os.path.join(out, "config.json")) as f:
                    cfg = json.load(f)
                with open(os.path.join(FIXTURES, family, "config.v4.json")) as f:
                    orig = json.load(f)
                self.assertEqual(cfg["architectures"], [ARCH[family]])
                for key in ("model_type", "hidden_size", "num_attention_heads", "num_key_value_heads",
                            "rope_theta", "rope_scaling", "tie_word_embeddings", "rms_norm_eps", "vocab_size",
                            "eos_token_id"):
                    self.assertEqual(cfg[key], orig[key], key)
                self.assertEqual(cfg["head_dim"], ref.head_dim(orig))
                got, want = read_weights(out), read_weights(src)
                self.assertEqual(sorted(got), sorted(want))  # no lm_head.weight when tied
                for name in want:
                    self.assertTrue(ref.torch.equal(got[name], want[name]), name)
                self.assertLess(abs(self.eval_loss(out) - EXPECTED["loss"][family]) / EXPECTED["loss"][family], 1e-5)

    def test_export_carries_a_tokenizer_json_and_its_sidecars(self):
        tok = os.path.join(HERE, "fixtures", "tokenizers", "llama3_style")
        src = self.model("llama3.1", "v5")
        for name in os.listdir(tok):
            shutil.copy(os.path.join(tok, name), src)
        out = os.path.join(self.tmp, "with-tokenizer")
        trainer("export", "--checkpoint", src, "--out", out, "--dtype", "fp32")
        for name in os.listdir(tok):
            with open(os.path.join(tok, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        self.assertFalse(os.path.exists(os.path.join(out, "tokenizer.model")))

    def spec(self, name, model, extra="", steps=3, merge=False):
        f = os.path.join(self.tmp, name + ".yaml")
        with open(f, "w") as fh:
            fh.write("""
name: %s
model: {path: %s}
data: {train_path: %s, format: TOKENS}
training: {max_steps: %d, micro_batch_size: 1, global_batch_size: 2, seq_len: %d, batching: PACKING,
           lr: 0.0001, weight_decay: 0.01, grad_clip: 1.0, log_every: 1}
fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}
output: {export_dir: %s, export_dtype: FP32, merge: %s}
%s
""" % (name, model, TOKENS, steps, EXPECTED["seq_len"], os.path.join(self.tmp, name + "-out"), str(merge).lower(),
       extra))
        return f

    def train2(self, spec):
        procs = launch_ranks([os.path.join(BIN, "llamafleet-train"), "train", "--spec", spec], 2, local_world=2,
                             env_extra={"LLAMAFLEET_CPU_GEMM": "aten"})
        codes, outs = wait_ranks(procs)
        for code, (_, err) in zip(codes, outs):
            self.assertEqual(code, 0, err[-3000:])
        return [l["loss"] for l in json_lines(outs[0][0]) if l.get("type") == "metrics"]

    # lr 1e-4 as test_reference: at 1e-3 AdamW turns rounding in near-zero gradients into
    # whole steps (Qwen2's k bias has a zero gradient in exact arithmetic: it shifts every
    # score of a query alike), and single elements then differ by 2e-5 relative.
    REF_ARGS = ["--data", TOKENS, "--format", "tokens", "--batching", "packing", "--seq-len", EXPECTED["seq_len"],
                "--steps", 3, "--micro-batch", 1, "--grad-accum", 2, "--lr", 1e-4, "--weight-decay", 0.01,
                "--grad-clip", 1.0]

    def test_full_shard_training_equals_reference(self):
        for family, layout in (("qwen2.5", "v4"), ("llama3.1", "v5"), ("llama3.2", "v5"), ("mistral", "v4")):
            with self.subTest(family=family):
                model = self.model(family, layout)
                losses = self.train2(self.spec(family, model))
                want_dir = os.path.join(self.tmp, family + "-ref")
                want = ref.run_command(["train", "--attention", attention(), "--model", model, "--out", want_dir]
                                       + self.REF_ARGS)
                self.assertEqual(len(losses), 3)
                for s, (a, b) in enumerate(zip(losses, want["losses"])):
                    self.assertAlmostEqual(a, b, delta=1e-5, msg="%s loss at step %d" % (family, s + 1))
                got, ref_w = read_weights(os.path.join(self.tmp, family + "-out")), read_weights(want_dir)
                self.assertEqual(sorted(got), sorted(ref_w))
                diff = max_rel(got, ref_w)
                sys.stderr.write("  %s full_shard: max_rel %.2e\n" % (family, diff))
                self.assertLessEqual(diff, 1e-5, family)

    def test_tensor_parallel_splits_qwen2_biases(self):
        # T=2: each rank holds its heads' rows of q, k, v and of their biases.
        model = self.model("qwen2.5", "v5")
        losses = self.train2(self.spec("tp", model, "parallelism: {tensor_parallel: 2}\n"
                                       "resources: {nodes: 1, gpus_per_node: 2}"))
        want_dir = os.path.join(self.tmp, "tp-ref")
        want = ref.run_command(["train", "--attention", attention(), "--model", model, "--out", want_dir]
                               + self.REF_ARGS)
        for s, (a, b) in enumerate(zip(losses, want["losses"])):
            self.assertAlmostEqual(a, b, delta=1e-5, msg="loss at step %d" % (s + 1))
        got, ref_w = read_weights(os.path.join(self.tmp, "tp-out")), read_weights(want_dir)
        self.assertEqual(sorted(got), sorted(ref_w))
        diff = max_rel(got, ref_w)
        sys.stderr.write("  qwen2.5 tensor_parallel 2: max_rel %.2e\n" % diff)
        self.assertLessEqual(diff, 1e-5)

    def test_lora_equals_reference_and_its_adapter_reloads(self):
        # Llama 2 is test_lora's. Qwen2.5 (frozen q/k/v biases, tied), Llama 3.2 (tied,
        # explicit head_dim), Llama 3.1 (llama3 RoPE), Mistral.
        targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
        for family, layout in (("qwen2.5", "v4"), ("llama3.2", "v5"), ("llama3.1", "v4"), ("mistral", "v5")):
            with self.subTest(family=family):
                model = self.model(family, layout)
                start = os.path.join(self.tmp, family + "-start")
                lref.run_command(["make-adapter", "--model", model, "--out", start, "--r", 4, "--alpha", 8,
                                  "--targets", targets, "--seed", 3, "--b-std", 0.05])
                out = os.path.join(self.tmp, family + "-ref-lora")
                want = lref.run_command(["train", "--model", model, "--adapter", start, "--adapter-out",
                                         out + "-adapter", "--merged-out", out + "-merged"] + self.REF_ARGS)
                name = family + "-lora"
                losses = self.train2(self.spec(name, model, "peft: {method: lora, dropout: 0, adapter_path: %s}"
                                               % start, merge=True))
                for s, (a, b) in enumerate(zip(losses, want["losses"])):
                    self.assertAlmostEqual(a, b, delta=1e-5, msg="loss at step %d" % (s + 1))
                got_dir = os.path.join(self.tmp, name + "-out")
                for got, ref_dir, what in ((got_dir, out + "-adapter", "adapter"),
                                           (os.path.join(got_dir, "merged"), out + "-merged", "merged")):
                    g, w = read_weights(got), read_weights(ref_dir)
                    self.assertEqual(sorted(g), sorted(w), what)
                    diff = max_rel(g, w)
                    sys.stderr.write("  %s lora %s: max_rel %.2e\n" % (family, what, diff))
                    self.assertLessEqual(diff, 1e-5, what)
                # The merged model keeps the base biases and tied embedding, in the family's class.
                with open(os.path.join(got_dir, "merged", "config.json")) as f:
                    merged_cfg = json.load(f)
                self.assertEqual(merged_cfg["architectures"], [ARCH[family]])
                self.assertEqual(merged_cfg["tie_word_embeddings"], family in ("qwen2.5", "llama3.2"))
                # The exported adapter reloads as PEFT reads it: the reference's base + adapter
                # evaluates to the loss of the trainer's merged model.
                with open(os.path.join(got_dir, "adapter_config.json")) as f:
                    self.assertEqual(sorted(json.load(f)["target_modules"]), sorted(targets.split(",")))
                reloaded = lref.run_command(["eval", "--model", model, "--adapter", got_dir] + EVAL_ARGS)["loss"]
                merged = self.eval_loss(os.path.join(got_dir, "merged"))
                self.assertLess(abs(reloaded - merged) / merged, 1e-5, "%s: %r vs %r" % (family, reloaded, merged))

def main():
    global BIN
    BIN = sys.argv[1]
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
