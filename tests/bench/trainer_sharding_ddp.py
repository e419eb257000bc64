#!/usr/bin/python3
"""One rank of the PyTorch DistributedDataParallel baseline for trainer_sharding_bench.

Started by hand once per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (Gloo,
env://). Trains the independent Python reference model (tests/trainer/reference.py) of
the same shape as the C++ run, on the same synthetic data (a fixed seeded global batch
per step, each rank its contiguous block of rows), with the same loss semantics (sum of
token losses / global target count) and AdamW, and prints one JSON line from rank 0:
tokens/s (after warm-up) and this rank's peak RSS.
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
import reference  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=688)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--global-rows", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = {"hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "vocab_size": a.vocab, "max_position_embeddings": 4096,
           "tie_word_embeddings": False}
    torch.manual_seed(a.seed)
    model = reference.LlamaForCausalLM(cfg)
    ddp = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    per_rank = a.global_rows // world
    tokens = 0
    t0 = time.perf_counter()
    for step in range(a.steps):
        if step == a.warmup:
            t0, tokens = time.perf_counter(), 0
        g = torch.Generator().manual_seed(a.seed * 1000 + step)
        rows = torch.randint(a.vocab, (a.global_rows, a.seq_len), generator=g)
        mine = rows[rank * per_rank:(rank + 1) * per_rank]
        count = torch.tensor([float(mine.shape[0] * (a.seq_len - 1))])
        dist.all_reduce(count)
        opt.zero_grad(set_to_none=True)
        logits = ddp(mine)
        shift = logits[:, :-1, :].reshape(-1, logits.shape[-1])
        loss_sum = torch.nn.functional.cross_entropy(shift, mine[:, 1:].reshape(-1), reduction="sum")
        # DDP averages gradients over ranks; scale so the result is the global-mean loss.
        (loss_sum * world / count).backward()
        opt.step()
        tokens += a.global_rows * a.seq_len
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peaks = torch.tensor([float(peak)])
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, peaks)
    if rank == 0:
        print(json.dumps({"tokens_per_s": tokens / secs, "seconds": secs,
                          "peak_rss_bytes": [int(x.item()) for x in gathered]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
