#include "tensor_parallel_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace llamafleet::trainer {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool Solo(Comm* tp) { return tp == nullptr || tp->size() == 1; }
Comm* CommOf(AutogradContext* ctx) { return reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt()); }

// The group's sum of `t` (a new contiguous tensor; `t` is left alone).
at::Tensor Summed(const at::Tensor& t, Comm* tp) {
  at::Tensor out = t.clone(at::MemoryFormat::Contiguous);
  const absl::Status s = tp->AllReduceSum(out)->Wait();
  TORCH_CHECK(s.ok(), "tensor-parallel all-reduce: ", std::string(s.message()));
  return out;
}

class CopyTo : public torch::autograd::Function<CopyTo> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Summed(grads[0], CommOf(ctx)), at::Tensor()};
  }
};

class ReduceFrom : public torch::autograd::Function<ReduceFrom> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t comm) {
    return Summed(x, reinterpret_cast<Comm*>(comm));
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

class CrossEntropy : public torch::autograd::Function<CrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor logits, at::Tensor labels, int64_t comm) {
    Comm* tp = reinterpret_cast<Comm*>(comm);
    const int64_t n = logits.size(0), v = logits.size(1), t = tp->size();
    // The row maxima of the full logits, from every rank's [N].
    at::Tensor local_max = std::get<0>(logits.max(1)).contiguous();
    at::Tensor maxima = at::empty({t * n}, local_max.options());
    absl::Status s = tp->AllGather(maxima, local_max)->Wait();
    TORCH_CHECK(s.ok(), "tensor-parallel all-gather: ", std::string(s.message()));
    const at::Tensor m = std::get<0>(maxima.view({t, n}).max(0));  // [N]
    at::Tensor e = (logits - m.unsqueeze(1)).exp();                // [N, V/T]
    // The label's logit lives on one rank: the others contribute 0.
    at::Tensor local = labels - tp->rank() * v;
    const at::Tensor mine = (local >= 0).logical_and(local < v);
    local = local.clamp(0, v - 1);
    const at::Tensor target = logits.gather(1, local.unsqueeze(1)).squeeze(1) * mine;
    at::Tensor sums = at::stack({e.sum(1), target}).contiguous();  // [2, N]
    s = tp->AllReduceSum(sums)->Wait();
    TORCH_CHECK(s.ok(), "tensor-parallel all-reduce: ", std::string(s.message()));
    const at::Tensor total = sums[0];
    e.div_(total.unsqueeze(1));  // softmax of this slice, kept for backward
    ctx->save_for_backward({e, local, mine});
    return (total.log() + m - sums[1]).sum();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor g = saved[0].clone();
    g.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(g.scalar_type()).unsqueeze(1));
    return {g * grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CopyToTensorParallel(const at::Tensor& x, Comm* tp) {
  if (Solo(tp)) return x;
  return CopyTo::apply(x, reinterpret_cast<int64_t>(tp));
}

at::Tensor ReduceFromTensorParallel(const at::Tensor& x, Comm* tp) {
  if (Solo(tp)) return x;
  return ReduceFrom::apply(x, reinterpret_cast<int64_t>(tp));
}

at::Tensor VocabParallelEmbedding(const at::Tensor& weight, const at::Tensor& tokens, Comm* tp) {
  if (Solo(tp)) return at::embedding(weight, tokens);
  const int64_t v = weight.size(0);
  at::Tensor local = tokens - tp->rank() * v;
  const at::Tensor other = (local < 0).logical_or(local >= v);
  at::Tensor x = at::embedding(weight, local.masked_fill(other, 0)).masked_fill(other.unsqueeze(-1), 0);
  return ReduceFromTensorParallel(x, tp);
}

at::Tensor VocabParallelCrossEntropySum(const at::Tensor& logits, const at::Tensor& labels, Comm* tp) {
  if (Solo(tp)) return at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum);
  if (logits.size(0) == 0) return logits.sum();  // no targets on any rank of the group
  return CrossEntropy::apply(logits, labels, reinterpret_cast<int64_t>(tp));
}

}  // namespace llamafleet::trainer
