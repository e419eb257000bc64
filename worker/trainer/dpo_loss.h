// DPO's sigmoid loss (Rafailov et al., "Direct Preference Optimization", 2023) with
// conservative label smoothing, as TRL's DPOTrainer (loss_type "sigmoid") computes it, on
// the summed log-probabilities of each answer's tokens:
//
//   z    = beta * ((pi_c - ref_c) - (pi_r - ref_r))
//   loss = -(1 - ls) * logsigmoid(z) - ls * logsigmoid(-z)          per pair
//   dloss/dpi_c = beta * (-(1 - ls) * sigmoid(-z) + ls * sigmoid(z)) = -dloss/dpi_r
//
// pi: the policy's (the model trained), ref: the reference model's (for LoRA the same
// model with its adapter switched off), c: the chosen answer, r: the rejected one. The
// metrics are TRL's: rewards_chosen = beta * (pi_c - ref_c), rewards_rejected likewise,
// accuracy = rewards_chosen > rewards_rejected, margin = their difference.
#pragma once

#include <ATen/ATen.h>

namespace llamafleet::trainer {

struct DpoOptions {
  double beta = 0.1;             // > 0
  double label_smoothing = 0.0;  // in [0, 0.5)
};

// Per pair, all [P] in fp64 on the inputs' device; no autograd (the gradient with respect
// to the policy's log-probabilities is returned, for a weighted backward pass).
struct DpoTerms {
  at::Tensor loss;
  at::Tensor grad_chosen;    // dloss/dpi_c
  at::Tensor grad_rejected;  // dloss/dpi_r
  at::Tensor reward_chosen;
  at::Tensor reward_rejected;
  at::Tensor accurate;  // 1 where reward_chosen > reward_rejected, else 0
};

// The terms of P pairs from their summed answer log-probabilities, each [P].
DpoTerms ComputeDpoTerms(const at::Tensor& policy_chosen, const at::Tensor& policy_rejected,
                         const at::Tensor& reference_chosen, const at::Tensor& reference_rejected,
                         const DpoOptions& options);

}  // namespace llamafleet::trainer
