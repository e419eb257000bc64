// ParamEngine: who owns the parameters, their gradients and the optimizer state.
//
// The training loop and the model only ever see parameter *units* (model.h: embedding,
// one unit per decoder layer, final norm + lm_head). Per optimizer step the loop calls:
//
//   ZeroGrad();
//   for each micro-batch: model.LossSum(engine, mb) -> (loss / global_targets).backward();
//        (the model calls Acquire(u) before using unit u and Release(u) after it)
//   ReduceGradients();          // make gradients final (a collective in sharded engines)
//   ClipGradNormOnDevice(max_norm);  // global norm over all ranks (when clipping or logging)
//   Step(lr);                   // AdamW on whatever the engine holds (full or shard)
//
// LocalEngine is the single-process case: full fp32 parameters, nothing to gather (eval and
// tests use it). ShardedEngine (sharded_engine.h, FSDP-style; the training loop's engine)
// implements the same interface: Acquire all-gathers a unit's flat shard, Release frees it,
// backward hooks reduce-scatter.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "model.h"

namespace llamafleet::trainer {

// How AdamW::Step runs its arithmetic. Every kernel computes the same update (below) in
// fp32; they differ only in rounding order (agreement within 1e-6 relative).
enum class AdamWKernel : uint8_t {
  kAuto = 0,       // kFused where this LibTorch has it for the device, else kPerTensor
  kPerTensor = 1,  // ATen ops per tensor (8 passes over memory; any LibTorch, any device)
  kForeach = 2,    // ATen's _foreach_* ops over all tensors at once (same passes, fewer launches)
  kFused = 3,      // one pass per tensor: at::_fused_adamw_ on LibTorch >= 2.4, else (CPU
                   // only) a parallel loop over p, g, m, v; kPerTensor where neither applies
};

// torch.optim.AdamW hyper-parameters (lr is passed per step by the schedule).
struct AdamWOptions {
  double beta1 = 0.9;         // first-moment decay
  double beta2 = 0.999;       // second-moment decay
  double eps = 1e-8;          // added to sqrt(v_hat)
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay, applied to all params
  AdamWKernel kernel = AdamWKernel::kAuto;
};

// AdamW over a fixed list of fp32 tensors, with PyTorch's single-tensor semantics:
//   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// A tensor whose gradient is undefined is skipped (and its moments untouched), as in
// PyTorch. State is created lazily on the first step. Parameters, gradients and moments
// are contiguous fp32 tensors of one device (what both engines hold).
class AdamW {
 public:
  explicit AdamW(const AdamWOptions& options) : options_(options) {}
  void Step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads, double lr);
  int64_t steps() const { return steps_; }
  // Moments per tensor (undefined before the first step); exposed for checkpoints.
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // The kernel kAuto resolves to for tensors on `device` in this build.
  static AdamWKernel AutoKernel(const at::Device& device);

 private:
  // One step's update of the tensors whose gradient is defined (moments allocated), with
  // steps_ already counting this step.
  void PerTensor(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                 const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, double lr);
  void Foreach(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
               const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, double lr);
  void Fused(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
             const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, double lr);

  AdamWOptions options_;
  int64_t steps_ = 0;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
};

class ParamEngine {
 public:
  virtual ~ParamEngine() = default;

  // Constant after construction: the units, identical on every rank.
  virtual const std::vector<UnitLayout>& layout() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Unit `unit`'s full parameters in the compute dtype, in layout order, connected to
  // autograd so that backward deposits their gradients with the engine (frozen tensors
  // are not connected). Called in forward order; a unit may be acquired again before it
  // is released (tied embeddings use the embedding unit a second time for the output
  // projection). `input`, when given, is the activation the unit's computation starts
  // from: the engine may replace it by an identity of itself whose backward tells the
  // engine that the unit's backward is done (a unit with frozen tensors needs this; the
  // caller must then compute from the replaced tensor).
  virtual std::vector<at::Tensor> Acquire(int unit, at::Tensor* input = nullptr) = 0;
  // The forward is done with the unit (a sharded engine may free its gathered copy).
  virtual void Release(int unit) = 0;
  // A hint that `unit` is acquired soon (activation checkpointing: backward recomputes
  // layers in reverse order): a sharded engine may start gathering it now, within its bound
  // on units gathered ahead. Never needed for correctness; a no-op by default.
  virtual void Prefetch(int /*unit*/) {}

  virtual void ZeroGrad() = 0;
  // After the last micro-step's backward of an optimizer step.
  virtual absl::Status ReduceGradients() = 0;
  // Global L2 norm of all gradients (across ranks), computed before clipping, as a 0-dim
  // fp64 tensor on the engine's device that nothing on the host waits for (a collective
  // in sharded engines: every rank calls it). With max_norm > 0 the gradients are scaled
  // on the device by min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_
  // does. Infinite when the last ReduceGradients found inf/NaN (fp16).
  virtual at::Tensor ClipGradNormOnDevice(double max_norm) = 0;
  // The same, read on the host (one host synchronisation, host_sync.h).
  double ClipGradNorm(double max_norm);
  virtual void Step(double lr) = 0;

  // Sums over the data-parallel ranks (identity on one rank); used for token counts and
  // losses. Every rank takes part; the ranks of a tensor-parallel group hold the same
  // value, and the group counts once. Read on the host: one host synchronisation.
  virtual double AllReduceSum(double value) = 0;
  // `values` (a small fp64 tensor on the engine's device) summed over every rank of the
  // world, tensor-parallel ranks included (a caller wanting a group counted once passes
  // zeros on its other ranks). Nothing on the host waits for the result.
  virtual at::Tensor AllReduceSumOnDevice(at::Tensor values) = 0;
  // Which slice of the data this rank trains on, of how many (the ranks of a
  // tensor-parallel group share one).
  virtual int data_parallel_rank() const { return rank(); }
  virtual int data_parallel_size() const { return world_size(); }

  // Unit `unit`'s full fp32 parameters on the CPU, unsplit by tensor parallelism (a
  // collective in sharded engines: every rank must call it, in the same order). Used by export.
  // Without `with_frozen` an engine may leave frozen tensors undefined (and skip gathering them).
  virtual std::vector<at::Tensor> FullUnit(int unit, bool with_frozen = true) = 0;
};

// One process owning everything: fp32 master parameters (leaf tensors with
// requires_grad) on `device`; Acquire casts to the compute dtype (a no-op in fp32).
class LocalEngine : public ParamEngine {
 public:
  // `params[u]` are unit u's tensors in layout order (fp32, any device; moved to
  // `device`). Shapes must match `layout` (checked by the loader).
  LocalEngine(std::vector<UnitLayout> layout, std::vector<std::vector<at::Tensor>> params,
              at::Device device, at::ScalarType compute_dtype, const AdamWOptions& adamw);

  const std::vector<UnitLayout>& layout() const override { return layout_; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::vector<at::Tensor> Acquire(int unit, at::Tensor* input = nullptr) override;
  void Release(int unit) override {}
  void ZeroGrad() override;
  absl::Status ReduceGradients() override { return absl::OkStatus(); }
  at::Tensor ClipGradNormOnDevice(double max_norm) override;
  void Step(double lr) override;
  double AllReduceSum(double value) override { return value; }
  at::Tensor AllReduceSumOnDevice(at::Tensor values) override { return values; }
  std::vector<at::Tensor> FullUnit(int unit, bool with_frozen = true) override;

  // Bytes of parameters + gradients + optimizer state held between steps.
  int64_t PersistentBytes() const;

 private:
  std::vector<at::Tensor> AllParams() const;
  std::vector<at::Tensor> AllGrads() const;

  const std::vector<UnitLayout> layout_;
  const at::ScalarType compute_dtype_;
  std::vector<std::vector<at::Tensor>> params_;  // [unit][i], fp32 leaves
  AdamW adamw_;
};

// Seeded HF-style init (normal(0, 0.02) for projections and embeddings, ones for norm
// weights, zeros for biases and LoRA's B, PEFT's uniform for LoRA's A), fp32 on the CPU.
// Element i of a tensor depends only on (seed, tensor name, i): a rank draws only the
// slice [begin, end) of the flattened tensor it holds, and every world size, tensor-parallel
// degree and LocalEngine sees the same weights.
at::Tensor InitFlatSlice(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed,
                         int64_t begin, int64_t end);
// InitFlatSlice over every tensor of a unit, whole and shaped.
std::vector<at::Tensor> InitUnit(const UnitLayout& unit, uint64_t seed);

}  // namespace llamafleet::trainer
