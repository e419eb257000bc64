"""The GGUF export against real consumers, in the Debian sid root (gguf_llama_cpp_check.sh
runs it; see there):

  make DIR    small random HF models (transformers' save_pretrained): DIR/llama (Llama, GQA,
              the SentencePiece fixture) and DIR/qwen2 (Qwen2, q/k/v biases, tied
              embeddings, the Llama-3-style tokenizer.json fixture), each with tokens.jsonl
              (one row of token ids of a short text, as the model's own tokenizer encodes it)
  check DIR   for every DIR/<model>-<dtype>/model.gguf: python3-gguf's reader reads its keys
              and tensors (each equal to the HF weights, q/k permuted back, within the
              dtype's rounding), then llama.cpp's llama-server loads it and its
              log-probabilities of the row's next tokens give a loss that must agree with
              DIR/<model>.eval.json (`llamafleet-train eval` on the HF directory); its
              tokenizer must turn the text into the same ids
"""
import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

TEXT = ("This License applies to any program or other work which contains a notice placed by the "
        "copyright holder saying it may be distributed under the terms of this General Public License.")
FIXTURES = "/src/tests/trainer/fixtures"
# |loss(llama.cpp on the GGUF) - loss(llamafleet-train eval on the fp32 HF model)|, by dtype.
TOLERANCE = {"f16": 2e-3, "bf16": 2e-2, "q8_0": 2e-2}


def make(out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256, torch_dtype="float32")
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=512, num_key_value_heads=2, rms_norm_eps=1e-5,
                                         rope_theta=10000.0, bos_token_id=1, eos_token_id=2, **common))
    qwen2 = Qwen2ForCausalLM(Qwen2Config(vocab_size=3264, num_key_value_heads=2, rms_norm_eps=1e-6,
                                         rope_theta=1000000.0, tie_word_embeddings=True, **common))
    for name, model, files in (("llama", llama, ["gguf/spm/tokenizer.model", "gguf/spm/tokenizer_config.json"]),
                               ("qwen2", qwen2, ["tokenizers/llama3_style/tokenizer.json",
                                                 "tokenizers/llama3_style/tokenizer_config.json",
                                                 "tokenizers/llama3_style/generation_config.json"])):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        with torch.no_grad():  # weights large enough that the model is not near-uniform
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.25)
        model.save_pretrained(d, safe_serialization=True)
        for f in files:
            shutil.copy(os.path.join(FIXTURES, f), d)
        if name == "llama":
            import sentencepiece as spm
            ids = [1] + spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model")).encode(TEXT)
        else:
            from tokenizers import Tokenizer
            ids = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(TEXT).ids
        with open(os.path.join(d, "tokens.jsonl"), "w") as f:
            f.write(json.dumps({"input_ids": ids}) + "\n")
        print(f"made {d}: {len(ids)} tokens")


def unpermute(w, heads):
    # llama.cpp's interleaved rows back to HF's rotate_half halves (inverse of the export's permute).
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_reader(path, hf_dir, dtype):
    import gguf
    from safetensors.numpy import load_file
    r = gguf.GGUFReader(path)
    fields = {f.name: f for f in r.fields.values()}
    arch = bytes(fields["general.architecture"].parts[-1]).decode()
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    for key in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                "attention.head_count", "attention.head_count_kv", "rope.freq_base",
                "attention.layer_norm_rms_epsilon", "rope.dimension_count", "vocab_size"):
        assert f"{arch}.{key}" in fields, f"{path}: no {arch}.{key}"
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == cfg["vocab_size"], (len(tokens.data), cfg["vocab_size"])
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    sub = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
           "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
           "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
           "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
           "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
           "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    tensors = {t.name: t for t in r.tensors}
    worst = 0.0
    for name, want in hf.items():
        if name.startswith("model.layers."):
            layer, rest = name.split(".", 3)[2], name.split(".", 3)[3]
            gname = f"blk.{layer}.{sub[rest]}"
        else:
            gname = names[name]
        t = tensors[gname]
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(want.shape).astype(np.float32)
        if arch == "llama" and gname.endswith("attn_q.weight"):
            got = unpermute(got, cfg["num_attention_heads"])
        if arch == "llama" and gname.endswith("attn_k.weight"):
            got = unpermute(got, cfg["num_key_value_heads"])
        err = float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))
        bound = {"f16": 1e-3, "bf16": 8e-3, "q8_0": 8e-3}[dtype] if want.ndim == 2 else 0.0
        assert err <= bound, f"{path}: {gname} differs from {name} by {err} (relative to its max)"
        worst = max(worst, err)
    print(f"  gguf-py: {len(fields)} keys, {len(r.tensors)} tensors, every tensor equal to the HF weights "
          f"within {dtype}'s rounding (largest error {worst:.2e} of the tensor's max)")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def llama_cpp_loss(path, ids, vocab, port):
    log = open(path + ".server.log", "w")
    server = subprocess.Popen(["llama-server", "-m", path, "--port", str(port), "--host", "127.0.0.1", "-c", "256",
                               "-t", "2", "-np", "1", "--no-warmup"], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                if server.poll() is not None:
                    raise RuntimeError(f"llama-server exited {server.returncode}: see {path}.server.log")
                time.sleep(0.2)
        # The one token generated is forced (logit_bias) to a plain ASCII one: the server
        # sends no probabilities for a token that ends inside a UTF-8 character. The
        # probabilities it reports are the model's raw ones (post_sampling_probs false), which
        # the bias does not touch.
        safe = post(port, "/tokenize", {"content": "a"})["tokens"][-1]
        # llama.cpp tokenizes the text as the model's own tokenizer did (vocabulary, scores
        # or merges, pre-tokenizer, BOS).
        theirs = post(port, "/tokenize", {"content": TEXT, "add_special": True})["tokens"]
        if theirs != ids:
            raise RuntimeError(f"llama.cpp tokenizes the text as {theirs}, the model's tokenizer as {ids}")
        nll = []
        for k in range(1, len(ids)):
            out = post(port, "/completion", {"prompt": ids[:k], "n_predict": 1, "n_probs": vocab, "temperature": 0,
                                             "cache_prompt": False, "post_sampling_probs": False,
                                             "ignore_eos": True, "logit_bias": [[safe, 100.0]]})
            if not out.get("completion_probabilities"):
                raise RuntimeError(f"llama-server gave no probabilities for prefix {k}: {out}")
            top = out["completion_probabilities"][0]["top_logprobs"]
            logprob = {e["id"]: e["logprob"] for e in top}
            nll.append(-logprob[ids[k]])
        return sum(nll) / len(nll)
    finally:
        server.terminate()
        server.wait()


def check(work):
    failures = 0
    port = 18480
    for name in ("llama", "qwen2"):
        hf_dir = os.path.join(work, name)
        ids = json.loads(open(os.path.join(hf_dir, "tokens.jsonl")).readline())["input_ids"]
        want = json.load(open(os.path.join(work, f"{name}.eval.json")))["loss"]
        vocab = json.load(open(os.path.join(hf_dir, "config.json")))["vocab_size"]
        for dtype in ("f16", "bf16", "q8_0"):
            path = os.path.join(work, f"{name}-{dtype}", "model.gguf")
            print(f"{name} {dtype}: {path}")
            check_reader(path, hf_dir, dtype)
            port += 1
            got = llama_cpp_loss(path, ids, vocab, port)
            ok = abs(got - want) <= TOLERANCE[dtype]
            failures += not ok
            print(f"  llama.cpp tokenizes the text into the same {len(ids)} ids; loss {got:.6f} vs llamafleet-train eval {want:.6f}: |diff| {abs(got - want):.2e} "
                  f"(tolerance {TOLERANCE[dtype]}) {'ok' if ok else 'FAIL'}")
    return failures


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(1 if check(sys.argv[2]) else 0)
