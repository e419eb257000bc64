#include "dpo_loss.h"

namespace llamafleet::trainer {

DpoTerms ComputeDpoTerms(const at::Tensor& policy_chosen, const at::Tensor& policy_rejected,
                         const at::Tensor& reference_chosen, const at::Tensor& reference_rejected,
                         const DpoOptions& o) {
  const at::Tensor pc = policy_chosen.to(at::kDouble), pr = policy_rejected.to(at::kDouble);
  const at::Tensor rc = reference_chosen.to(at::kDouble), rr = reference_rejected.to(at::kDouble);
  DpoTerms t;
  t.reward_chosen = (pc - rc) * o.beta;
  t.reward_rejected = (pr - rr) * o.beta;
  const at::Tensor z = t.reward_chosen - t.reward_rejected;
  const double ls = o.label_smoothing;
  t.loss = -(1 - ls) * at::log_sigmoid(z) - ls * at::log_sigmoid(-z);
  const at::Tensor dz = -(1 - ls) * at::sigmoid(-z) + ls * at::sigmoid(z);
  t.grad_chosen = dz * o.beta;
  t.grad_rejected = -t.grad_chosen;
  t.accurate = (t.reward_chosen > t.reward_rejected).to(at::kDouble);
  return t;
}

}  // namespace llamafleet::trainer
