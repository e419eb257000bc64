#!/usr/bin/python3
"""An independent transcription of the memory-fit formula (jobspec/memory_estimate.h),
written from its comment, not from the C++: it prints the figures that
memory_estimate_test.cc and jobspec_test.cc hold as literals.

Usage: memory_estimate_reference.py
"""
SHAPES = {
    "llama2-7b": dict(h=4096, f=11008, L=32, H=32, KV=32, V=32000),
    "llama2-13b": dict(h=5120, f=13824, L=40, H=40, KV=40, V=32000),
    "llama2-70b": dict(h=8192, f=28672, L=80, H=64, KV=8, V=32000),
    # REFERENCE.md's table of the released config.json files (head_dim = h / H in each).
    "llama3.1-8b": dict(h=4096, f=14336, L=32, H=32, KV=8, V=128256),
    "llama3.1-70b": dict(h=8192, f=28672, L=80, H=64, KV=8, V=128256),
    "llama3.1-405b": dict(h=16384, f=53248, L=126, H=128, KV=8, V=128256),
    "llama3.2-1b": dict(h=2048, f=8192, L=16, H=32, KV=8, V=128256, tied=True),
    "llama3.2-3b": dict(h=3072, f=8192, L=28, H=24, KV=8, V=128256, tied=True),
    "mistral-7b": dict(h=4096, f=14336, L=32, H=32, KV=8, V=32768),
    "qwen2.5-7b": dict(h=3584, f=18944, L=28, H=28, KV=4, V=152064, bias=True),
    "qwen2.5-72b": dict(h=8192, f=29568, L=80, H=64, KV=8, V=152064, bias=True),
}
CHUNK = 1024  # target positions whose logits the trainer's cross entropy holds at once


def split(x, tp):
    """One tensor-parallel rank's share of x, rounded up."""
    return -(-x // tp)


def estimate(preset, strategy="FULL_SHARD", world=1, group=0, c=2, r=4, ckpt=True, micro=4, seq=4096,
             accum=1, ag=2, rs=2, fused=True, gpu=True, lora_r=0, lora=(), tp=1, tp_ar=1):
    m = SHAPES[preset]
    h, f, L, H, V = m["h"], m["f"], m["L"], m["H"], m["V"]
    kv = m["KV"] * (h // H)
    tied, bias = m.get("tied", False), m.get("bias", False)
    # q/k/v biases (Qwen2) are split with their projections' outputs.
    layer_p = 2 * h + 2 * h * h + 2 * h * kv + 3 * h * f + ((h + 2 * kv) if bias else 0)
    embed = V * h
    head_p = h + (0 if tied else embed)
    base = embed + L * layer_p + head_p
    # Tensor parallelism: every matrix split tp ways, the RMSNorm weights (2 a layer + the
    # final one) whole.
    layer_t = 2 * h + split(layer_p - 2 * h, tp)
    embed_t = split(embed, tp)
    base_t = embed_t + L * layer_t + h + (0 if tied else embed_t)
    # LoRA: r x (in + out) per targeted projection of a layer, the base frozen in c bytes;
    # column-parallel projections split B by output, row-parallel ones A by input.
    proj = dict(q_proj=(h, h, "col"), k_proj=(h, kv, "col"), v_proj=(h, kv, "col"), o_proj=(h, h, "row"),
                gate_proj=(h, f, "col"), up_proj=(h, f, "col"), down_proj=(f, h, "row"))

    def adapters(t):
        n = 0
        for x in lora:
            i, o, kind = proj[x]
            n += lora_r * i + split(lora_r * o, t) if kind == "col" else split(lora_r * i, t) + lora_r * o
        return n

    adapter_layer = adapters(tp) if lora_r else 0
    P = L * adapter_layer if lora_r else base_t
    U = max(layer_t, embed_t, h + (0 if tied else embed_t)) + adapter_layer
    U_trained = adapter_layer if lora_r else U
    dp = max(1, world // tp)
    n = {"FULL_SHARD": dp, "SHARD_GRAD_OP": dp, "HYBRID_SHARD": max(1, group // tp) if group else dp,
         "NO_SHARD": 1}[strategy]
    keeps = strategy in ("SHARD_GRAD_OP", "NO_SHARD")
    shard = lambda b: (b * P + n - 1) // n
    params, grads, optim = shard(4), shard(4), shard(8)
    if lora_r:
        params += (c * base_t + n - 1) // n
    if keeps and accum > 1:
        grads += 4 * P
    t = micro * seq
    attention = 0 if fused else split(t * H * seq * (4 + (0 if c == 4 else c)), tp)
    # Replicated: layer input, both norm outputs, the residual after attention (4h) and the
    # fp32 norm copies; split: queries, attention output, keys, values and the MLP's 4f.
    layer = t * 4 * h * c + split(t * (2 * h + 2 * kv + 4 * f) * c, tp) + t * 2 * h * 4 + attention
    saved = L * t * h * c + layer if ckpt else L * layer
    # Logits, 16 bytes each: without tensor parallelism, a micro-batch with more than CHUNK
    # target positions holds CHUNK x V of them and the fp32 output-projection gradient
    # summed over the chunks (full finetuning only); otherwise all t x V (/ tp).
    if tp == 1 and micro * (seq - 1) > CHUNK:
        logits = CHUNK * V * 16 + (0 if lora_r else 4 * V * h)
    else:
        logits = split(t * V * 16, tp)
    head = t * (4 * h + 2 * h * c) + logits
    acts = saved + head
    gathered = (base_t + (P if lora_r else 0)) * c if keeps else (ag + 1) * U * c
    inflight = min((rs + 1) * U_trained, P)
    comm = inflight * r * (1 if gpu else 2) + ((inflight * r + n - 1) // n if n > 1 else 0)
    if tp > 1:
        comm += tp_ar * t * h * c  # the tensor-parallel all-reduce buffers
    rest = params + grads + optim + gathered + acts + comm
    work = (1 << 30) + rest // 10
    return dict(parameters=params, gradients=grads, optimizer_state=optim, gathered_params=gathered,
                activations=acts, communication=comm, workspace=work, total=rest + work)


CASES = {
    "7b FULL_SHARD 16 ranks": dict(preset="llama2-7b", world=16),
    "13b HYBRID fp32 no ckpt": dict(preset="llama2-13b", strategy="HYBRID_SHARD", world=16, group=8, c=4,
                                    ckpt=False, micro=1, seq=2048, fused=False),
    "70b NO_SHARD 16 ranks": dict(preset="llama2-70b", strategy="NO_SHARD", world=16, micro=1),
    "7b SHARD_GRAD_OP accum 4": dict(preset="llama2-7b", strategy="SHARD_GRAD_OP", world=8, r=2, micro=2, accum=4),
    # The Kubeflow/EKS post's runs: FULL_SHARD, bf16, activation checkpointing, seq 4096.
    "post 7b 2 x p5 micro 3": dict(preset="llama2-7b", world=16, micro=3),
    "post 13b 2 x p5 micro 3": dict(preset="llama2-13b", world=16, micro=3),
    "post 70b 16 x p5 micro 3": dict(preset="llama2-70b", world=128, micro=3),
    "70b 8 x p5 micro 1": dict(preset="llama2-70b", world=64, micro=1),
    "7b HYBRID 2 x p5 micro 3": dict(preset="llama2-7b", strategy="HYBRID_SHARD", world=16, group=8, micro=3),
    # LoRA: 70B r 16 on q/v on one p5 (8 GPUs); 7B r 8 on all seven on one GPU.
    "70b LoRA 1 x p5 micro 1": dict(preset="llama2-70b", world=8, micro=1, lora_r=16, lora=("q_proj", "v_proj")),
    "7b LoRA 1 GPU micro 4": dict(preset="llama2-7b", world=1, micro=4, lora_r=8,
                                  lora=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    # Tensor parallelism: 70B T 8 inside each p5 x FULL_SHARD over 4 (deploy/examples/
    # llama2-70b-tp8-4xp5.yaml); 7B T 2 with HYBRID groups of a node; 13B T 4 explicit
    # attention; 70B LoRA on all seven projections T 8 on one p5.
    "70b TP8 4 x p5 micro 1": dict(preset="llama2-70b", world=32, micro=1, tp=8),
    "7b TP2 HYBRID 2 x p5 micro 3": dict(preset="llama2-7b", strategy="HYBRID_SHARD", world=16, group=8, micro=3,
                                         tp=2),
    "13b TP4 fp32 no ckpt": dict(preset="llama2-13b", world=16, c=4, ckpt=False, micro=1, seq=2048, fused=False,
                                 tp=4),
    "70b TP8 LoRA all 1 x p5": dict(preset="llama2-70b", world=8, micro=1, tp=8, lora_r=16,
                                    lora=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj")),
    # The 128K / 152K vocabularies (deploy/examples/llama3.1-*, qwen2.5-7b-lora-1gpu.yaml):
    # chunked logits, tied and biased shapes.
    "llama3.1-8b 1 x p5 micro 2 seq 8192": dict(preset="llama3.1-8b", world=8, micro=2, seq=8192),
    "llama3.1-70b 4 x p5 micro 1": dict(preset="llama3.1-70b", world=32, micro=1),
    "llama3.1-70b 3 x p5 micro 1": dict(preset="llama3.1-70b", world=24, micro=1),
    "llama3.1-405b TP8 16 x p5 bf16 reduce": dict(preset="llama3.1-405b", world=128, micro=1, tp=8, r=2, ag=1),
    "qwen2.5-7b LoRA 1 GPU micro 4": dict(preset="qwen2.5-7b", world=1, micro=4, lora_r=8,
                                          lora=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj")),
    "llama3.2-1b 1 GPU micro 4": dict(preset="llama3.2-1b", world=1, micro=4),
    "llama3.2-1b 1 GPU micro 1 seq 1024": dict(preset="llama3.2-1b", world=1, micro=1, seq=1024),
}

if __name__ == "__main__":
    for name, case in CASES.items():
        e = estimate(**case)
        print("%-30s %s  (%.1f GiB)" % (name, " ".join("%s=%d" % kv for kv in e.items()), e["total"] / 2**30))
