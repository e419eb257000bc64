// The gradient side of a ShardedEngine (sharded_engine.h): the reductions backward
// launches (reduce-scatter into the shard group, all-reduce across replicas, or local
// accumulation on an unsynced micro-step), their bounded queue drained oldest first, the
// gradient norm and clipping, and the optimizer step with the fp16 loss scale.
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "host_sync.h"
#include "sharded_engine.h"
#include "sharded_engine_internal.h"
#include "util.h"

namespace llamafleet::trainer {

void ShardedEngine::LaunchReduce(int unit, at::Tensor grad) {
  at::NoGradGuard no_grad;
  const bool may_defer = options_.strategy == ShardingStrategy::kNoShard ||
                         options_.strategy == ShardingStrategy::kShardGradOp;
  if (!sync_ && may_defer) {
    // Unsynced micro-step: accumulate locally, no collective.
    if (!accum_[unit].defined())
      accum_[unit] = at::zeros({spans_[unit].padded}, grad.options().dtype(at::kFloat));
    accum_[unit].add_(grad);
    return;
  }
  at::Tensor full = grad;
  if (accum_[unit].defined()) {
    full = accum_[unit].add_(grad);
    accum_[unit] = at::Tensor();
  }
  Trace("reduce", unit);
  PendingReduce p;
  p.unit = unit;
  p.in = full.to(options_.reduce_dtype).contiguous();
  if (shard_comm_->size() > 1) {
    p.out = at::empty({spans_[unit].shard}, p.in.options());
    p.work = shard_comm_->ReduceScatterSum(p.out, p.in);
  } else {
    p.out = p.in;
    if (replica_comm_ && replica_comm_->size() > 1) p.work = replica_comm_->AllReduceSum(p.out);
  }
  pending_.push_back(std::move(p));
  int64_t held = 0;
  const int64_t gloo_recv = shard_comm_->size() > 1 && shard_comm_->backend() == "gloo" ? 1 : 0;
  for (const PendingReduce& q : pending_) {
    if (q.in.defined()) held += q.in.nbytes() * (1 + gloo_recv);
    if (!q.out.is_same(q.in)) held += q.out.nbytes();
  }
  peak_reduce_bytes_ = std::max(peak_reduce_bytes_, held);
  // Bounded gradient memory: past K unsharded inputs in flight, finish the oldest (its
  // input is freed), so backward holds O(K x largest unit) of reduce buffers, not O(P).
  while (InputsInFlight() > options_.max_inflight_reduces)
    ThrowIfError(AdvanceOldest(/*input_stage=*/true));
  while (static_cast<int>(pending_.size()) > 2 * options_.max_inflight_reduces)
    ThrowIfError(AdvanceOldest(false));
}

int ShardedEngine::InputsInFlight() const {
  int n = 0;
  for (const PendingReduce& p : pending_) n += p.in.defined() ? 1 : 0;
  return n;
}

absl::Status ShardedEngine::AdvanceOldest(bool input_stage) {
  // Stages of one unit's reduction, always advanced oldest first so that every unit's
  // contributions are added to its gradient shard in the order they were launched:
  //   0  the shard-group reduce-scatter (or NO_SHARD's all-reduce) of `in` is in flight;
  //   1  HYBRID_SHARD only: the shard's all-reduce across the replicas is in flight;
  //   done: `out` is added to the fp32 gradient shard and the entry removed.
  auto it = pending_.begin();
  if (input_stage) {
    while (it != pending_.end() && !it->in.defined()) ++it;
    if (it == pending_.end()) return absl::OkStatus();
  }
  PendingReduce& p = *it;
  if (p.work) {
    absl::Status s = p.work->Wait();
    p.work.reset();
    if (!s.ok()) {
      pending_.erase(it);
      return s;
    }
  }
  const bool hybrid = shard_comm_->size() > 1 && replica_comm_ && replica_comm_->size() > 1;
  if (p.in.defined()) {
    p.in = at::Tensor();  // the unsharded input: the memory this bound is about
    if (hybrid) {
      p.work = replica_comm_->AllReduceSum(p.out);
      // Stage 1 stays queued; entries before it in the queue are finished first.
      if (input_stage) return absl::OkStatus();
      absl::Status s = p.work->Wait();
      p.work.reset();
      if (!s.ok()) {
        pending_.erase(it);
        return s;
      }
    }
  }
  if (it != pending_.begin()) return absl::OkStatus();  // added when it reaches the front
  at::NoGradGuard no_grad;
  grads_[p.unit].add_(p.out);
  pending_.erase(it);
  return absl::OkStatus();
}

absl::Status ShardedEngine::DrainPending() {
  absl::Status status;
  while (!pending_.empty()) {
    absl::Status s = AdvanceOldest(/*input_stage=*/false);
    if (!s.ok() && status.ok()) status = s;
    if (!status.ok()) {
      // After a failure no gradient is trustworthy: finish what is in flight, add nothing.
      for (auto& p : pending_) {
        if (p.work) (void)p.work->Wait();
      }
      pending_.clear();
    }
  }
  return status;
}

void ShardedEngine::ZeroGrad() {
  at::NoGradGuard no_grad;
  (void)DrainPending();
  for (at::Tensor& g : grads_) g.zero_();
  for (at::Tensor& a : accum_) a = at::Tensor();
  sync_ = true;
  found_inf_ = false;
}

absl::Status ShardedEngine::ReduceGradients() {
  try {
    const bool saved_sync = sync_;
    sync_ = true;
    for (size_t u = 0; u < accum_.size(); ++u) {
      if (!accum_[u].defined()) continue;
      at::Tensor a = std::move(accum_[u]);
      accum_[u] = at::Tensor();
      LaunchReduce(static_cast<int>(u), a);
    }
    sync_ = saved_sync;
    LF_RETURN_IF_ERROR(DrainPending());
    EndPass();
    found_inf_ = false;
    if (options_.compute_dtype == at::kHalf) {
      at::NoGradGuard no_grad;
      std::vector<at::Tensor> flags;
      for (at::Tensor& g : grads_) {
        g.mul_(1.0 / loss_scale_);
        flags.push_back(g.isfinite().all().logical_not());
      }
      at::Tensor any = at::stack(flags).any().to(at::kDouble).reshape({1});
      LF_RETURN_IF_ERROR(world_->AllReduceSum(any)->Wait());
      found_inf_ = ReadScalarOnHost(any) > 0;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("reducing gradients: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

at::Tensor ShardedEngine::ClipGradNormOnDevice(double max_norm) {
  at::NoGradGuard no_grad;
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(options_.device);
  if (found_inf_) return at::full({}, std::numeric_limits<double>::infinity(), f64);
  std::vector<at::Tensor> sums;
  for (size_t u = 0; u < grads_.size(); ++u) {
    at::Tensor sum = grads_[u].square().sum();
    // A replicated tensor's gradient is the same on every rank of a tensor-parallel group:
    // each rank adds 1/T of its square, so the group's sum counts it once.
    if (!replicated_.empty()) {
      for (const auto& [first, count] : replicated_[u]) {
        sum = sum - grads_[u].narrow(0, first, count).square().sum() * (1.0 - 1.0 / tp_size());
      }
    }
    sums.push_back(sum);
  }
  at::Tensor total = at::stack(sums).sum().to(at::kDouble).reshape({1});
  // Shards are disjoint inside a shard group and identical across replicas; slices are
  // disjoint inside a tensor-parallel group.
  if (shard_comm_->size() > 1) ThrowIfError(shard_comm_->AllReduceSum(total)->Wait());
  if (tp_size() > 1) ThrowIfError(tp_comm_->AllReduceSum(total)->Wait());
  at::Tensor norm = total.sqrt().reshape({});
  if (max_norm > 0) {
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1
    // (a factor of exactly 1 leaves the gradients bit-identical).
    const at::Tensor coef = at::clamp_max(max_norm / (norm + 1e-6), 1.0);
    for (at::Tensor& g : grads_) g.mul_(coef);
  }
  return norm;
}

void ShardedEngine::Step(double lr) {
  DropPrefetched();  // gathered from the old masters
  EndPass();
  if (found_inf_) {
    loss_scale_ *= 0.5;
    clean_steps_ = 0;
    return;
  }
  std::vector<at::Tensor> params;
  for (const at::Tensor& m : masters_) params.push_back(m.detach());
  adamw_.Step(params, grads_, lr);
  if (options_.compute_dtype == at::kHalf &&
      ++clean_steps_ >= options_.loss_scale_growth_interval) {
    loss_scale_ *= 2.0;
    clean_steps_ = 0;
  }
}

}  // namespace llamafleet::trainer
