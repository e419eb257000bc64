#!/usr/bin/python3
"""Independent reference for the llamafleet trainer, in plain PyTorch.

Written from the Hugging Face LlamaForCausalLM conventions (and Qwen2's q/k/v biases, explicit
head_dim, Llama 3.1's RoPE scaling; not from the C++ code and
without `transformers`, which is not installed): RMSNorm in fp32, RoPE with rotate_half,
repeat_kv for grouped-query attention, eager attention with an additive causal mask and
an fp32 softmax, SwiGLU MLP, tied or untied lm_head, logits upcast to fp32, shifted
cross-entropy with ignore_index -100. Packing puts whole records into rows and runs each
record of a row alone (its own batch of one): what the trainer's block-diagonal attention
and per-document positions must reproduce. safetensors files are read and written by hand
(8-byte little-endian header length, JSON header, raw little-endian bytes).

Run with Debian's interpreter: /usr/bin/python3 (it has torch and sentencepiece).

Subcommands (all print JSON on stdout):
  make-model  --out DIR [--layers --hidden --heads --kv-heads --ffn --vocab --max-pos
                         --tied --seed --shards N --dtype f32|f16|bf16]
  make-data   --out FILE --vocab V [--rows --min-len --max-len --seed]  (tokens format)
  eval        --model DIR --data FILE [--format --tokenizer --batching --seq-len --micro-batch]
  train       --model DIR --data FILE --out DIR [--steps --lr --micro-batch --grad-accum
               --seq-len --batching --format --tokenizer --weight-decay --grad-clip
               --warmup --schedule constant|cosine --min-lr-ratio --betas --eps]
  tokenize    --data FILE --format F [--tokenizer M]
  compare     --a DIR --b DIR [--rtol 1e-5] [--metric max|fro]
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE = -100

# --------------------------------------------------------------------------- safetensors

_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2),
           "I64": (torch.int64, 8), "I32": (torch.int32, 4)}
_NAMES = {v[0]: k for k, v in _DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor) in file order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, size = _DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        raw = bytearray(buf[b:e])
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def read_model_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for name in files:
        t, _ = read_safetensors(os.path.join(d, name))
        tensors.update(t)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return cfg, tensors

# --------------------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32) if dtype != torch.float64 else x
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_parameters(c):
    """(theta, llama3 scaling dict or None) from either config layout: transformers 5.x's
    rope_parameters, or 4.x's top-level rope_theta and rope_scaling (theta 10000 when the
    config has neither)."""
    rp = c.get("rope_parameters")
    if rp is None:
        rp = dict(c.get("rope_scaling") or {}, rope_theta=c.get("rope_theta", 10000.0))
    kind = rp.get("rope_type", rp.get("type", "default"))
    assert kind in ("default", "llama3"), kind
    return float(rp["rope_theta"]), (rp if kind == "llama3" else None)


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def llama3_inv_freq(inv_freq, s):
    """Llama 3.1's rescaling, written from Meta's apply_scaling (llama/model.py)."""
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in inv_freq.tolist():
        w = 2 * math.pi / f
        if w < high_wavelen:
            out.append(f)
        elif w > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (old / w - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float32)


def rope_cos_sin(T, d, theta, scaling=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    if scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    t = torch.arange(T).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    b, kvh, T, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, T, d).reshape(b, kvh * n_rep, T, d)


# "eager": the mask-and-softmax attention above (HF's eager path). "sdpa": torch's fused
# scaled_dot_product_attention with is_causal, what llamafleet-train uses on LibTorch 2.x,
# so that a strict weight comparison there isolates the rest of the trainer's math (the two
# kernels round differently, and Adam amplifies that in near-zero gradients).
ATTENTION = "eager"


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.H, self.KV, self.d = H, KV, head_dim(c)
        bias = c.get("model_type") == "qwen2"  # Qwen2: q, k, v biases; o none
        self.q_proj = nn.Linear(h, H * self.d, bias=bias)
        self.k_proj = nn.Linear(h, KV * self.d, bias=bias)
        self.v_proj = nn.Linear(h, KV * self.d, bias=bias)
        self.o_proj = nn.Linear(H * self.d, h, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.H // self.KV)
        v = repeat_kv(v, self.H // self.KV)
        if ATTENTION == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(1, 2).reshape(B, T, self.H * self.d))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        mask = torch.full((T, T), float("-inf"), dtype=scores.dtype).triu(1)
        scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32 if q.dtype != torch.float64 else q.dtype).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.H * self.d)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, ffn = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, ffn, bias=False)
        self.up_proj = nn.Linear(h, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = LlamaModel(c)
        self.tied = bool(c.get("tie_word_embeddings", False))
        if not self.tied:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, input_ids):
        """Returns fp32 logits [B, T, V]."""
        T = input_ids.shape[1]
        cos, sin = rope_cos_sin(T, head_dim(self.c), *rope_parameters(self.c))
        x = self.model.embed_tokens(input_ids)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = F.linear(x, w)
        return logits if logits.dtype == torch.float64 else logits.float()

    def loss_sum(self, input_ids, labels):
        """Sum of shifted token cross-entropy over labels != -100, and the count."""
        logits = self(input_ids)
        shift_logits = logits[:, :-1, :].reshape(-1, logits.shape[-1])
        shift_labels = labels[:, 1:].reshape(-1)
        loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE, reduction="sum")
        return loss, int((shift_labels != IGNORE).sum())


def state_names(model):
    return [n for n, _ in model.named_parameters()]


def load_model(d):
    cfg, tensors = read_model_dir(d)
    model = LlamaForCausalLM(cfg)
    sd = {k: v.float() for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")}
    if model.tied:
        sd.pop("lm_head.weight", None)
    model.load_state_dict(sd, strict=True)
    return cfg, model

# --------------------------------------------------------------------------- data


def load_records(path, fmt, sp=None):
    """-> list of (input_ids, labels) with the Llama-2 BOS/EOS conventions."""
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if fmt == "tokens":
                ids = list(r["input_ids"])
                out.append((ids, list(ids)))
            elif fmt == "text":
                ids = [sp.bos_id()] + sp.encode(r["text"]) + [sp.eos_id()]
                out.append((ids, list(ids)))
            elif fmt == "prompt_completion":
                p = [sp.bos_id()] + sp.encode(r["prompt"])
                c = sp.encode(r["completion"]) + [sp.eos_id()]
                out.append((p + c, [IGNORE] * len(p) + c))
            else:
                raise ValueError(fmt)
    return out


def pack(records, seq_len):
    """Packing with document masking, as the trainer packs (data.h PackSequences): records in
    order, each whole, go into rows of at most seq_len tokens by next fit (a record joins the
    open row if it fits in the room left, else starts the next); a record longer than
    seq_len is cut into pieces of seq_len from its start, each its own document, the last
    shorter piece starting a row. The last row is kept. A row is a list of documents
    (ids, labels)."""
    rows, row, used = [], [], 0
    for ids, labels in records:
        n = len(ids)
        if n > seq_len - used and row:
            rows.append(row)
            row, used = [], 0
        i = 0
        while n - i > seq_len:
            rows.append([(ids[i:i + seq_len], labels[i:i + seq_len])])
            i += seq_len
        row.append((ids[i:], labels[i:]))
        used += n - i
        if used == seq_len:
            rows.append(row)
            row, used = [], 0
    if row:
        rows.append(row)
    return rows


def make_rows(records, batching, seq_len):
    if batching == "packing":
        return pack(records, seq_len)
    for ids, _ in records:
        assert len(ids) <= seq_len, "row longer than seq_len"
    return records


def collate(rows, pad_id=0):
    T = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    for i, (a, b) in enumerate(rows):
        ids[i, :len(a)] = torch.tensor(a)
        labels[i, :len(b)] = torch.tensor(b)
    return ids, labels


def is_packed(rows):
    return bool(rows) and isinstance(rows[0], list)


def rows_loss_sum(model, rows):
    """Sum of the shifted cross-entropy over a micro-batch of rows, and its target count.
    Padding rows are one batch; a packed row's documents each run alone, so no document
    sees another and each counts positions from 0."""
    if not is_packed(rows):
        return model.loss_sum(*collate(rows))
    total, count = 0.0, 0
    for row in rows:
        for doc in row:
            loss, n = model.loss_sum(*collate([doc]))
            total = total + loss
            count += n
    return total, count


def count_targets(rows):
    docs = [d for r in rows for d in r] if is_packed(rows) else rows
    return sum(sum(1 for x in labels[1:] if x != IGNORE) for _, labels in docs)


def row_tokens(row):
    return sum(len(d[0]) for d in row) if isinstance(row, list) else len(row[0])


def load_sp(path):
    if not path:
        return None
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=path)

# --------------------------------------------------------------------------- commands


def cmd_make_model(a):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
         "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
         "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": a.vocab,
         "max_position_embeddings": a.max_pos, "tie_word_embeddings": a.tied,
         "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(c)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02 if a.std is None else a.std)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    items = [(n, p.detach().to(dtype)) for n, p in model.named_parameters()]
    if a.inv_freq:
        d = a.hidden // a.heads
        items.append(("model.layers.0.self_attn.rotary_emb.inv_freq",
                      1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))))
    if a.shards <= 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), items, {"format": "pt"})
    else:
        per = math.ceil(len(items) / a.shards)
        wm, total = {}, 0
        for s in range(a.shards):
            name = "model-%05d-of-%05d.safetensors" % (s + 1, a.shards)
            chunk = items[s * per:(s + 1) * per]
            write_safetensors(os.path.join(a.out, name), chunk, {"format": "pt"})
            for n, t in chunk:
                wm[n] = name
                total += t.numel() * t.element_size()
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
    return {"out": a.out, "parameters": sum(p.numel() for p in model.parameters())}


def cmd_make_data(a):
    g = torch.Generator().manual_seed(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.rows):
            n = int(torch.randint(a.min_len, a.max_len + 1, (1,), generator=g))
            ids = torch.randint(0, a.vocab, (n,), generator=g).tolist()
            f.write(json.dumps({"input_ids": ids}) + "\n")
    return {"out": a.out, "rows": a.rows}


def rows_for(a, cfg):
    sp = load_sp(a.tokenizer)
    records = load_records(a.data, a.format, sp)
    seq_len = a.seq_len or cfg["max_position_embeddings"]
    return make_rows(records, a.batching, seq_len)


def cmd_eval(a):
    torch.set_num_threads(a.threads) if a.threads else None
    cfg, model = load_model(a.model)
    rows = rows_for(a, cfg)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(rows), a.micro_batch):
            loss, n = rows_loss_sum(model, rows[i:i + a.micro_batch])
            total += float(loss)
            count += n
    loss = total / count
    return {"loss": loss, "tokens": count, "perplexity": math.exp(loss)}


def lr_at(a, step, total_steps):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.schedule == "constant":
        return a.lr
    p = min(1.0, (step - a.warmup) / max(1, total_steps - a.warmup))
    return a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def train_steps(a, model, rows, params):
    """a.steps AdamW steps of `params` (the ones requiring a gradient) on `rows`, in order,
    a.micro_batch x a.grad_accum rows per step; the global-mean loss of each step."""
    per_step = a.micro_batch * a.grad_accum
    steps_per_epoch = len(rows) // per_step
    assert steps_per_epoch >= 1, "fewer rows than one global batch"
    opt = torch.optim.AdamW(params, lr=a.lr, betas=tuple(a.betas), eps=a.eps,
                            weight_decay=a.weight_decay, foreach=False)
    losses = []
    step_seconds = []
    step_tokens = []
    t0 = time.perf_counter()
    for step in range(a.steps):
        ts = time.perf_counter()
        base = (step % steps_per_epoch) * per_step
        micro = [rows[base + m * a.micro_batch: base + (m + 1) * a.micro_batch] for m in range(a.grad_accum)]
        n_total = sum(count_targets(m) for m in micro)
        opt.zero_grad()
        step_loss = 0.0
        for m in micro:
            loss, _ = rows_loss_sum(model, m)
            (loss / n_total).backward()
            step_loss += float(loss)
        step_tokens.append(sum(row_tokens(r) for r in rows[base:base + per_step]))
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        for group in opt.param_groups:
            group["lr"] = lr_at(a, step, a.steps)
        opt.step()
        losses.append(step_loss / n_total)
        step_seconds.append(time.perf_counter() - ts)
    elapsed = time.perf_counter() - t0
    tokens = sum(step_tokens)
    return {"losses": losses, "tokens": tokens, "seconds": elapsed, "step_seconds": step_seconds,
            "step_tokens": step_tokens, "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0}


def cmd_train(a):
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg, model = load_model(a.model)
    if a.double:
        model.double()
    result = train_steps(a, model, rows_for(a, cfg), list(model.parameters()))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        items = [(n, p.detach().float()) for n, p in model.named_parameters()]
        write_safetensors(os.path.join(a.out, "model.safetensors"), items, {"format": "pt"})
        with open(os.path.join(a.out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return result


def cmd_tokenize(a):
    sp = load_sp(a.tokenizer)
    return {"records": [{"tokens": ids, "target": [0 if x == IGNORE else 1 for x in labels]}
                        for ids, labels in load_records(a.data, a.format, sp)]}


def cmd_compare(a):
    _, ta = read_model_dir(a.a)
    _, tb = read_model_dir(a.b)
    worst = 0.0
    worst_fro = 0.0
    problems = []
    if set(ta) != set(tb):
        problems.append("tensor names differ: %s" % sorted(set(ta) ^ set(tb)))
    for name in sorted(set(ta) & set(tb)):
        x, y = ta[name].double(), tb[name].double()
        if x.shape != y.shape:
            problems.append("%s: shape %s vs %s" % (name, list(x.shape), list(y.shape)))
            continue
        rel = float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
        fro = float((x - y).norm() / y.norm().clamp_min(1e-30))
        worst = max(worst, rel)
        worst_fro = max(worst_fro, fro)
        if (fro if a.metric == "fro" else rel) > a.rtol:
            problems.append("%s: %s relative difference %.3g" % (name, a.metric, fro if a.metric == "fro" else rel))
    return {"max_rel": worst, "fro_rel": worst_fro, "problems": problems}


def build_parser():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("--out", required=True)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--kv-heads", type=int, default=4)
    m.add_argument("--ffn", type=int, default=176)
    m.add_argument("--vocab", type=int, default=256)
    m.add_argument("--max-pos", type=int, default=512)
    m.add_argument("--tied", action="store_true")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--std", type=float, default=None)
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--dtype", default="f32")
    m.add_argument("--inv-freq", action="store_true", help="add a stale rotary_emb.inv_freq")
    d = sub.add_parser("make-data")
    d.add_argument("--out", required=True)
    d.add_argument("--vocab", type=int, required=True)
    d.add_argument("--rows", type=int, default=8)
    d.add_argument("--min-len", type=int, default=5)
    d.add_argument("--max-len", type=int, default=40)
    d.add_argument("--seed", type=int, default=0)
    for name in ("eval", "train"):
        e = sub.add_parser(name)
        e.add_argument("--model", required=True)
        e.add_argument("--data", required=True)
        e.add_argument("--format", default="tokens")
        e.add_argument("--tokenizer", default="")
        e.add_argument("--batching", default="padding")
        e.add_argument("--seq-len", type=int, default=0)
        e.add_argument("--micro-batch", type=int, default=4)
        e.add_argument("--threads", type=int, default=0)
        e.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
        if name == "train":
            e.add_argument("--out", default="")
            e.add_argument("--steps", type=int, default=3)
            e.add_argument("--grad-accum", type=int, default=1)
            e.add_argument("--lr", type=float, default=1e-3)
            e.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.999])
            e.add_argument("--eps", type=float, default=1e-8)
            e.add_argument("--weight-decay", type=float, default=0.0)
            e.add_argument("--grad-clip", type=float, default=0.0)
            e.add_argument("--warmup", type=int, default=0)
            e.add_argument("--schedule", default="constant")
            e.add_argument("--min-lr-ratio", type=float, default=0.0)
            e.add_argument("--double", action="store_true", help="train in float64 (noise floor)")
    t = sub.add_parser("tokenize")
    t.add_argument("--data", required=True)
    t.add_argument("--format", default="text")
    t.add_argument("--tokenizer", default="")
    c = sub.add_parser("compare")
    c.add_argument("--a", required=True)
    c.add_argument("--b", required=True)
    c.add_argument("--rtol", type=float, default=1e-5)
    c.add_argument("--metric", default="max", choices=["max", "fro"],
                   help="max: max|a-b|/max|b| per tensor; fro: ||a-b||/||b|| per tensor")
    return p


COMMANDS = {"make-model": cmd_make_model, "make-data": cmd_make_data, "eval": cmd_eval,
            "train": cmd_train, "tokenize": cmd_tokenize, "compare": cmd_compare}


def run_command(argv):
    """Runs one subcommand in-process and returns its result dict (used by the tests)."""
    global ATTENTION
    a = build_parser().parse_args([str(x) for x in argv])
    ATTENTION = getattr(a, "attention", "eager")
    return COMMANDS[a.cmd](a)


def main():
    result = run_command(sys.argv[1:])
    if "records" in result:
        for r in result["records"]:
            print(json.dumps(r))
    else:
        print(json.dumps(result))
    sys.exit(1 if result.get("problems") else 0)


if __name__ == "__main__":
    main()
