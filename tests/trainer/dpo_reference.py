#!/usr/bin/python3
"""Independent reference for DPO preference tuning of a LoRA adapter.

Written from the DPO paper (Rafailov et al. 2023, eq. 7) with conservative DPO's label
smoothing as TRL's DPOTrainer (loss_type "sigmoid") states it, not from the C++ code:

  pi(y|x) = sum over the answer's tokens of log p(token | everything before it)
  z       = beta * ((pi_policy(chosen) - pi_ref(chosen)) - (pi_policy(rejected) - pi_ref(rejected)))
  loss    = -(1 - ls) * logsigmoid(z) - ls * logsigmoid(-z), averaged over the batch's pairs

The policy is base + LoRA adapter (lora_reference.py); the reference model is the base
model alone, loaded separately (reference.py). Rewards as TRL logs them: beta * (pi_policy
- pi_ref) per answer, accuracy = chosen reward > rejected reward, margin = their difference.

Data: JSONL pairs {"prompt_input_ids", "chosen_input_ids", "rejected_input_ids"}; each
answer's row is prompt + answer, and only the answer's tokens are scored.

Subcommands (JSON on stdout):
  make-data --out F --vocab V --pairs N --seed S     random pre-tokenized pairs
  train     --model DIR --adapter DIR --data F --adapter-out DIR --steps K --pairs-per-step P
            [--beta --label-smoothing --lr --weight-decay --grad-clip --warmup --schedule]
            per step: loss and the four reward means; the adapter after K steps
"""
import argparse
import json
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_reference as lref  # noqa: E402
import reference as ref  # noqa: E402


def cmd_make_data(a):
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for _ in range(a.pairs):
            rec = {"prompt_input_ids": [rng.randrange(a.vocab) for _ in range(rng.randint(3, 12))],
                   "chosen_input_ids": [rng.randrange(a.vocab) for _ in range(rng.randint(2, 10))],
                   "rejected_input_ids": [rng.randrange(a.vocab) for _ in range(rng.randint(2, 10))]}
            f.write(json.dumps(rec) + "\n")
    return {"pairs": a.pairs}


def load_pairs(path):
    pairs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                pairs.append((r["prompt_input_ids"], r["chosen_input_ids"], r["rejected_input_ids"]))
    return pairs


def answer_log_prob(model, prompt, answer):
    """Summed log-probability of `answer`'s tokens after `prompt` (one row, no padding)."""
    ids = torch.tensor([prompt + answer])
    logp = F.log_softmax(model(ids)[0, :-1].double(), dim=-1)  # position t predicts token t+1
    targets = ids[0, 1:]
    picked = logp.gather(1, targets[:, None])[:, 0]
    return picked[len(prompt) - 1:].sum() if prompt else picked.sum()


def dpo_step_terms(policy, base, batch, beta, ls):
    losses, rc, rr = [], [], []
    for prompt, chosen, rejected in batch:
        pc, pr = answer_log_prob(policy, prompt, chosen), answer_log_prob(policy, prompt, rejected)
        with torch.no_grad():
            bc, br = answer_log_prob(base, prompt, chosen), answer_log_prob(base, prompt, rejected)
        z = beta * ((pc - bc) - (pr - br))
        losses.append(-(1 - ls) * F.logsigmoid(z) - ls * F.logsigmoid(-z))
        rc.append(float(beta * (pc - bc)))
        rr.append(float(beta * (pr - br)))
    return torch.stack(losses).mean(), rc, rr


def cmd_train(a):
    torch.manual_seed(0)
    _, policy = lref.load_with_adapter(a.model, a.adapter)
    _, base = ref.load_model(a.model)
    for p in base.parameters():
        p.requires_grad_(False)
    params = [p for p in policy.parameters() if p.requires_grad]
    pairs = load_pairs(a.data)
    per_step = a.pairs_per_step
    steps_per_epoch = len(pairs) // per_step
    assert steps_per_epoch >= 1
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay,
                            foreach=False)
    out = {"losses": [], "rewards_chosen": [], "rewards_rejected": [], "rewards_accuracies": [],
           "rewards_margins": []}
    for step in range(a.steps):
        base_i = (step % steps_per_epoch) * per_step
        batch = pairs[base_i:base_i + per_step]
        opt.zero_grad()
        loss, rc, rr = dpo_step_terms(policy, base, batch, a.beta, a.label_smoothing)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        for g in opt.param_groups:
            g["lr"] = ref.lr_at(a, step, a.steps)
        opt.step()
        n = len(batch)
        out["losses"].append(float(loss))
        out["rewards_chosen"].append(sum(rc) / n)
        out["rewards_rejected"].append(sum(rr) / n)
        out["rewards_accuracies"].append(sum(1.0 for c, r in zip(rc, rr) if c > r) / n)
        out["rewards_margins"].append(sum(c - r for c, r in zip(rc, rr)) / n)
    if a.adapter_out:
        os.makedirs(a.adapter_out, exist_ok=True)
        ref.write_safetensors(os.path.join(a.adapter_out, "adapter_model.safetensors"),
                              lref.adapter_items(policy), {"format": "pt"})
    return out


def build_parser():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("make-data")
    d.add_argument("--out", required=True)
    d.add_argument("--vocab", type=int, default=256)
    d.add_argument("--pairs", type=int, default=4)
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train")
    t.add_argument("--model", required=True)
    t.add_argument("--adapter", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--adapter-out", default="")
    t.add_argument("--steps", type=int, default=4)
    t.add_argument("--pairs-per-step", type=int, default=4)
    t.add_argument("--beta", type=float, default=0.1)
    t.add_argument("--label-smoothing", type=float, default=0.0)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.0)
    t.add_argument("--grad-clip", type=float, default=0.0)
    t.add_argument("--warmup", type=int, default=0)
    t.add_argument("--schedule", default="constant")
    t.add_argument("--min-lr-ratio", type=float, default=0.0)
    return p


COMMANDS = {"make-data": cmd_make_data, "train": cmd_train}


def run_command(argv):
    a = build_parser().parse_args([str(x) for x in argv])
    return COMMANDS[a.cmd](a)


if __name__ == "__main__":
    print(json.dumps(run_command(sys.argv[1:])))
