#!/usr/bin/python3
"""Independent reference for LoRA finetuning, on top of reference.py's model.

Written from Hugging Face PEFT's conventions (not from the C++ code; `peft` is not
installed): each targeted nn.Linear becomes base(x) + lora_B(lora_A(dropout(x))) * alpha / r,
the base is frozen, AdamW and gradient clipping see only the adapter matrices. Adapters are
PEFT directories: adapter_config.json and adapter_model.safetensors with tensor names
base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight [r, in] / lora_B [out, r].

Subcommands (JSON on stdout):
  make-adapter --model DIR --out DIR --r R --alpha A --targets q_proj,v_proj [--seed S --b-std X]
               an adapter with random A and non-zero B (so it changes the model)
  train        as reference.py's train, plus --adapter DIR (the starting adapter)
               --adapter-out DIR --merged-out DIR [--qlora]
               --qlora: QLoRA, the base weight of every targeted projection replaced by its
               NF4 round trip (nf4_reference.py's quantize then dequantize, per whole
               tensor) before training; the merge folds the adapter into that base
  eval         as reference.py's eval, plus --adapter DIR (base + adapter)
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as ref  # noqa: E402

PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
          "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
PREFIX = "base_model.model."


class LoraLinear(nn.Module):
    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling = alpha / r
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling


def read_adapter(d):
    with open(os.path.join(d, "adapter_config.json")) as f:
        cfg = json.load(f)
    return cfg, ref.read_safetensors(os.path.join(d, "adapter_model.safetensors"))[0]


def attach(model, r, alpha, targets):
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.model.layers:
        for m in targets:
            parent = getattr(layer, PARENT[m])
            setattr(parent, m, LoraLinear(getattr(parent, m), r, alpha))


def adapter_items(model):
    return [(PREFIX + n, p.detach().float()) for n, p in model.named_parameters() if ".lora_" in n]


def merged_items(model):
    """The HF state with every adapter folded into its base weight: W + scaling * B A."""
    out = []
    for n, p in model.named_parameters():
        if ".lora_" in n:
            continue
        if n.endswith(".base.bias"):  # Qwen2's q/k/v biases: frozen, unchanged
            out.append((n.replace(".base.bias", ".bias"), p.detach().float()))
        elif n.endswith(".base.weight"):
            owner = model.get_submodule(n[: -len(".base.weight")])
            w = p.detach().double() + owner.scaling * (owner.lora_B.weight.double() @ owner.lora_A.weight.double())
            out.append((n.replace(".base.weight", ".weight"), w.float()))
        else:
            out.append((n, p.detach().float()))
    return out


def load_with_adapter(model_dir, adapter_dir):
    cfg, model = ref.load_model(model_dir)
    acfg, tensors = read_adapter(adapter_dir)
    attach(model, acfg["r"], acfg["lora_alpha"], acfg["target_modules"])
    state = {n: p for n, p in model.named_parameters()}
    for name, t in tensors.items():
        assert name.startswith(PREFIX), name
        with torch.no_grad():
            state[name[len(PREFIX):]].copy_(t.float())
    missing = [n for n in state if ".lora_" in n and PREFIX + n not in tensors]
    assert not missing, missing
    return cfg, model


def quantize_targets(model, targets):
    """QLoRA's base: each targeted projection's weight as NF4 dequantizes it."""
    import numpy as np
    import nf4_reference as nf4
    for layer in model.model.layers:
        for m in targets:
            base = getattr(getattr(layer, PARENT[m]), m).base
            w = base.weight.detach().float().reshape(-1).numpy().astype(np.float32)
            deq = nf4.dequantize(*nf4.quantize(w), w.size)
            with torch.no_grad():
                base.weight.copy_(torch.from_numpy(deq).view_as(base.weight))


def cmd_make_adapter(a):
    cfg, _ = ref.read_model_dir(a.model)
    g = torch.Generator().manual_seed(a.seed)
    h, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    d = ref.head_dim(cfg)
    q = cfg["num_attention_heads"] * d
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * d
    shapes = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
              "gate_proj": (ffn, h), "up_proj": (ffn, h), "down_proj": (h, ffn)}
    items = []
    for i in range(cfg["num_hidden_layers"]):
        for m in a.targets.split(","):
            out_f, in_f = shapes[m]
            base = "%smodel.layers.%d.%s.%s" % (PREFIX, i, PARENT[m], m)
            bound = 1 / math.sqrt(in_f)
            items.append((base + ".lora_A.weight", (torch.rand(a.r, in_f, generator=g) * 2 - 1) * bound))
            items.append((base + ".lora_B.weight", torch.randn(out_f, a.r, generator=g) * a.b_std))
    os.makedirs(a.out, exist_ok=True)
    ref.write_safetensors(os.path.join(a.out, "adapter_model.safetensors"), items, {"format": "pt"})
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": a.r, "lora_alpha": a.alpha,
                   "lora_dropout": 0.0, "target_modules": a.targets.split(","), "bias": "none",
                   "base_model_name_or_path": a.model}, f, indent=2)
    return {"tensors": len(items)}


def cmd_train(a):
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg, model = load_with_adapter(a.model, a.adapter)
    if a.qlora:
        quantize_targets(model, read_adapter(a.adapter)[0]["target_modules"])
    params = [p for p in model.parameters() if p.requires_grad]
    result = ref.train_steps(a, model, ref.rows_for(a, cfg), params)
    if a.adapter_out:
        os.makedirs(a.adapter_out, exist_ok=True)
        ref.write_safetensors(os.path.join(a.adapter_out, "adapter_model.safetensors"), adapter_items(model),
                              {"format": "pt"})
    if a.merged_out:
        os.makedirs(a.merged_out, exist_ok=True)
        ref.write_safetensors(os.path.join(a.merged_out, "model.safetensors"), merged_items(model), {"format": "pt"})
        with open(os.path.join(a.merged_out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return dict(result, trainable=sum(p.numel() for p in params))


def cmd_eval(a):
    cfg, model = load_with_adapter(a.model, a.adapter) if a.adapter else ref.load_model(a.model)
    rows = ref.rows_for(a, cfg)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(rows), a.micro_batch):
            loss, n = ref.rows_loss_sum(model, rows[i:i + a.micro_batch])
            total += float(loss)
            count += n
    loss = total / count
    return {"loss": loss, "tokens": count, "perplexity": math.exp(loss)}


def build_parser():
    p = ref.build_parser()
    sub = next(x for x in p._actions if x.dest == "cmd")
    m = sub.add_parser("make-adapter")
    m.add_argument("--model", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--r", type=int, default=4)
    m.add_argument("--alpha", type=float, default=8.0)
    m.add_argument("--targets", default="q_proj,v_proj")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--b-std", type=float, default=0.02)
    for name in ("train", "eval"):
        e = sub.choices[name]
        e.add_argument("--adapter", default="", required=(name == "train"))
        if name == "train":
            e.add_argument("--adapter-out", default="")
            e.add_argument("--merged-out", default="")
            e.add_argument("--qlora", action="store_true")
    return p


COMMANDS = {"make-adapter": cmd_make_adapter, "train": cmd_train, "eval": cmd_eval}


def run_command(argv):
    a = build_parser().parse_args([str(x) for x in argv])
    return COMMANDS[a.cmd](a)


if __name__ == "__main__":
    print(json.dumps(run_command(sys.argv[1:])))
