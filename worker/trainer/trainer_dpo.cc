// The DPO step (dpo_loss.h) of the training loop: LoRA only, its reference the same model
// with the adapter switched off.
//
// Each micro-step holds micro_batch pairs, a pair's chosen and rejected rows side by side.
// Every row runs on its own (batch of one, no padding), three times: a forward pass
// without autograd with the adapter off (the reference's summed answer log-probability),
// one with it on (the policy's), and, once the pair terms are known, a forward and
// backward pass of the row's summed cross entropy weighted by dloss/dpi of its pair. The
// gradients are those of
//
//   L = (1 / G) * sum over the global batch's G pairs of loss(pair)
//
// (G = micro_batch x grad_accum x data-parallel ranks, every pair counted once whatever
// the rank or micro-step), the mean the loss and the metrics report. The weight of a row
// is a constant of its backward pass, so peft.dropout must be 0 (validation refuses
// others): the gradient pass must compute what the policy pass did.
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "dpo_loss.h"
#include "host_sync.h"
#include "lora.h"
#include "trainer.h"
#include "util.h"

namespace llamafleet::trainer {

absl::StatusOr<Trainer::StepResult> Trainer::DpoStep(int64_t step) {
  ShardedEngine& engine = *engine_;
  const int64_t syncs_before = HostSyncCount();
  const int64_t epoch = step / steps_per_epoch_, in_epoch = step % steps_per_epoch_;
  const LoadedData& data = train_[0];
  std::vector<ModelInput> rows;  // 2p: chosen, 2p + 1: rejected, over the micro-steps in order
  int64_t local_real = 0;
  for (int64_t m = 0; m < grad_accum_; ++m) {
    for (int64_t pair : TrainPairs(epoch, in_epoch, m)) {
      for (int64_t k = 0; k < 2; ++k) {
        LF_ASSIGN_OR_RETURN(Batch b,
                            data.rows.MakeBatch({2 * pair + k}, data.pad_id, data.vocab_size));
        if (b.NumTargets() == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("preference pair ", pair + 1, ": the ", k == 0 ? "chosen" : "rejected",
                           " answer has no token to score (a one-token sequence)"));
        }
        local_real += b.real_tokens;
        rows.push_back(MakeModelInput(b, device_));
      }
    }
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  // Summed answer log-probabilities, [n] on the device (no host read until the step's end).
  auto log_probs = [&]() {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> v;
    for (const ModelInput& in : rows)
      v.push_back(-model_->LossSum(engine, in).to(at::kDouble).reshape({}));
    return at::stack(v);
  };
  at::Tensor reference;
  {
    AdapterDisabled off(*model_, lora_);
    reference = log_probs();
  }
  const at::Tensor policy = log_probs();
  const at::Tensor even = at::arange(0, n, 2, f64.dtype(at::kLong));
  const at::Tensor odd = even + 1;
  const DpoTerms t = ComputeDpoTerms(
      policy.index_select(0, even), policy.index_select(0, odd), reference.index_select(0, even),
      reference.index_select(0, odd), DpoOptions{opt_.dpo_beta, opt_.dpo_label_smoothing});
  // Row weights: dL/dpi_row = dloss/dpi / G, and the row's loss is -pi_row.
  const double global_pairs = static_cast<double>(GlobalBatch());
  at::Tensor weight = at::empty({n}, f64);
  weight.index_copy_(0, even, t.grad_chosen);
  weight.index_copy_(0, odd, t.grad_rejected);
  weight = (weight * (-engine.loss_scale() / global_pairs)).to(at::kFloat);
  engine.ZeroGrad();
  for (int64_t r = 0; r < n; ++r) {
    // Only the last backward reduces (where the strategy allows).
    engine.SetGradientSync(r + 1 == n);
    (model_->LossSum(engine, rows[static_cast<size_t>(r)]) * weight[r]).backward();
  }
  LF_RETURN_IF_ERROR(engine.ReduceGradients());
  const bool logging = (step + 1) % opt_.log_every == 0 || step + 1 == total_steps_;
  const at::Tensor norm = opt_.grad_clip > 0 || logging
                              ? engine.ClipGradNormOnDevice(opt_.grad_clip)
                              : at::zeros({}, f64);
  // The step's one blocking collective, as Step's: [loss, real tokens, preemption, the
  // four reward sums] over the world (a tensor-parallel group's once), the norm rank 0's.
  const double group_once = env_.rank % tp_ == 0 ? 1.0 : 0.0;
  const double rank0 = env_.rank == 0 ? 1.0 : 0.0;
  const at::Tensor margins = t.reward_chosen - t.reward_rejected;
  at::Tensor packed =
      at::cat({at::stack({t.loss.sum(), t.reward_chosen.sum(), t.reward_rejected.sum(),
                          t.accurate.sum(), margins.sum()}) *
                   group_once,
               at::full({1}, group_once * static_cast<double>(local_real), f64),
               at::full({1}, PreemptionRequested() ? 1.0 : 0.0, f64), norm.reshape({1}) * rank0});
  const at::Tensor summed = ReadOnHost(engine.AllReduceSumOnDevice(packed));
  const double* v = summed.data_ptr<double>();
  const double loss = v[0] / global_pairs;
  // Summed into the interval before FinishStep, whose metrics line reports them.
  interval_dpo_.rewards_chosen += v[1] / global_pairs;
  interval_dpo_.rewards_rejected += v[2] / global_pairs;
  interval_dpo_.rewards_accuracies += v[3] / global_pairs;
  interval_dpo_.rewards_margins += v[4] / global_pairs;
  LF_RETURN_IF_ERROR(
      FinishStep(step, StepTotals{loss, static_cast<int64_t>(v[5]), v[7]}, logging, syncs_before));
  return StepResult{loss, v[6] > 0};
}

}  // namespace llamafleet::trainer
