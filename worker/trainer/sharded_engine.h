// ShardedEngine: the FSDP-style ParamEngine (engine.h) over c10d collectives.
//
// Each unit of the layout (embedding, one per decoder layer, final norm + lm_head) is
// flattened into one flat parameter (its tensors in layout order), padded to a multiple
// of the shard group size N:
//
//   flat unit u   [padded_u]      padded_u = ceil(numel_u / N) * N, zeros after numel_u
//   rank r keeps  [S_u]           S_u = padded_u / N, elements [r*S_u, (r+1)*S_u)
//
// Between steps a rank holds only its fp32 master shard, its fp32 gradient shard and the
// AdamW moments of that shard. Strategies (as PyTorch FSDP defines them):
//   FULL_SHARD     Acquire all-gathers the unit (cast to the compute dtype); Release frees
//                  it (except the last unit of the forward, needed first in backward);
//                  backward re-gathers it just before the unit's backward (prefetching
//                  the next one), then reduce-scatters its gradient and frees it again.
//   SHARD_GRAD_OP  as FULL_SHARD, but the gathered unit stays from forward to the end of
//                  that unit's backward (no re-gather).
//   NO_SHARD       N = 1: full replicas; gradients all-reduced over the world (DDP).
//   HYBRID_SHARD   FULL_SHARD inside a shard group of `hybrid_group_size` consecutive
//                  ranks (one node), gradient shards all-reduced across the replica
//                  groups (ranks with the same position in their shard group).
//
// How backward reaches the engine: Acquire returns views of a gathered flat tensor that is
// the output of a custom autograd node whose input is the master shard. That node's
// backward runs once all of the unit's parameter gradients of this pass are summed (its
// "post-backward"), and — because autograd runs ready nodes in decreasing creation order —
// before any backward op of the unit acquired before it. So the post-backward of unit j
// (a) makes sure unit j-1 is gathered again (FULL_SHARD), prefetching j-2, and (b) issues
// unit j's gradient reduce-scatter asynchronously. At most `max_inflight_reduces`
// unsharded gradients are in flight: launching one more first waits for the oldest,
// adds its shard into the fp32 gradient shard and frees its input, so gradient
// communication holds O(K x largest unit) bytes, not O(P) (PyTorch FSDP frees each
// unsharded gradient once its reduce-scatter completes, the same way). ReduceGradients()
// waits for the rest. Contributions to one shard are always added in launch order.
// Freed units keep their storage object with zero bytes (as FSDP does), so tensors that
// autograd saved for backward see the re-gathered values.
//
// Under activation checkpointing (model.h) a layer's forward runs without autograd, so
// its gathered copy is freed at Release under every strategy, and backward re-acquires
// it to recompute. Before that recompute the model calls Prefetch for the layer and the
// one before it (FSDP2's backward prefetch): the gather of layer j-1 is issued before
// layer j recomputes, bounded by max_inflight_all_gathers units gathered ahead. On NCCL
// the all-gathers run on a communicator of their own (gather_comm()), so a gather is
// never queued behind a reduce-scatter on the shard group's stream. On Gloo both stay on
// the shard group: ProcessGroupGloo runs queued collectives on its worker threads (2 by
// default) in issue order, so a gather waits only while both threads are busy with
// earlier work.
//
// Frozen tensors (layout.h's `frozen`, LoRA's base weights) form a second flat per unit,
// sharded the same way but held in the compute dtype: no master, no gradient, no AdamW
// state, never reduced. Acquire gathers both flats; the autograd node then takes the
// unit's input activation as a second input (Acquire's `input`), so its backward still
// marks the end of the unit's backward when the unit has few or no trainable tensors.
//
// QLoRA (ShardingOptions::nf4_frozen): a unit holding a frozen tensor that nf4_frozen
// selects keeps its frozen flat *packed*, as bytes (uint8), sharded like any flat: the
// unit's frozen tensors in layout order, each at an 8-byte aligned offset, a selected one as
// NF4 (nf4.h's Nf4Tensor, quantized once per whole tensor when the engine is created: the
// codes, two per byte, padded to whole blocks of 64; one absmax code byte per block, padded
// to 4 bytes; the float scale of each group of 256 blocks; the float offset: about 0.52
// bytes per weight), any other in the compute dtype. Acquire gathers the packed bytes and
// decodes them into the usual frozen flat in the compute dtype with plain torch ops on the
// device (table lookups of the absmaxes and of the levels by code byte, a multiply and an
// add in fp32 for the absmaxes, a multiply of level by absmax), bit for bit DequantizeNf4's
// values; the packed copy is dropped once decoded. FullUnit decodes the same way. Needs an
// unsliced layout (tensor_parallel 1).
//
// Tensor parallelism (tensor_parallel.h): with `tensor_parallel` T > 1 the layout is one
// rank's slice of the model, identical in shape on the T ranks of a group (consecutive
// world ranks). Everything above then runs along the data-parallel dimension: the shard
// and replica groups are made of the ranks that hold the same slice (world rank = dp * T +
// tp), HYBRID_SHARD's node group holds whole TP groups. The gradient norm counts a
// replicated tensor once per group; FullUnit joins the slices into the full tensors.
//
// Mixed precision: masters and AdamW state fp32; compute dtype fp32/bf16/fp16 (parameters
// cast before the all-gather, so gathers move the compute dtype); gradients reduced in
// `reduce_dtype` and accumulated into fp32 shards. fp16 uses dynamic loss scaling: the
// loop multiplies the loss by loss_scale(); ReduceGradients unscales and checks for
// inf/NaN across all ranks; an overflowing step is skipped and the scale halved, and the
// scale doubles after `loss_scale_growth_interval` clean steps (torch.cuda.amp.GradScaler).
//
// Gradient accumulation: SetGradientSync(false) before a micro-step's backward keeps that
// micro-step's gradients local (no collective) for NO_SHARD and SHARD_GRAD_OP, which then
// hold an unsharded fp32 gradient accumulator until the next synced backward or
// ReduceGradients(). FULL_SHARD and HYBRID_SHARD ignore it and reduce-scatter every
// micro-step: they exist to keep memory at 1/N.
//
// Threading: one training thread; collectives run on the process group's threads.
// Errors inside backward (a failed collective) are thrown as c10::Error and come out of
// backward(); the other methods return Status where the interface allows and otherwise
// throw c10::Error, which the trainer converts once at its boundary.
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives.h"
#include "engine.h"

namespace llamafleet::trainer {

enum class ShardingStrategy { kFullShard = 1, kShardGradOp = 2, kHybridShard = 3, kNoShard = 4 };
const char* ShardingStrategyName(ShardingStrategy s);  // "FULL_SHARD", ...
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(const std::string& name);

struct ShardingOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;  // see the file comment
  int hybrid_group_size = 0;           // HYBRID_SHARD: ranks per shard group (0 = the whole world;
                                       // the trainer passes LOCAL_WORLD_SIZE, one group per node)
  at::ScalarType compute_dtype = at::kFloat;  // gathered params + activations: fp32/bf16/fp16
  at::ScalarType reduce_dtype = at::kFloat;   // gradient collectives: fp32/bf16/fp16
  int max_inflight_all_gathers = 2;    // units gathered ahead of use, at most (>= 1)
  int max_inflight_reduces = 2;        // unsharded gradients in flight in backward, at most (>= 1)
  AdamWOptions adamw;                  // optimizer hyper-parameters
  double initial_loss_scale = 65536.0;  // fp16 only
  int loss_scale_growth_interval = 2000;  // fp16 only: clean steps before the scale doubles
  at::Device device{at::kCPU};         // where shards and gathered units live
  int tensor_parallel = 1;             // ranks per tensor-parallel group (see the file comment)
  bool record_trace = false;           // tests: keep the event log trace() returns
  // Forward passes only (an evaluation job): no gradient shards and no AdamW state are
  // allocated, so backward, ReduceGradients, Step and checkpoint saves must not be called.
  bool forward_only = false;
  // QLoRA: the frozen tensors (by layout name) held as NF4 in a packed frozen flat (see the
  // file comment); null or false for every name: the frozen flat in the compute dtype.
  std::function<bool(const std::string& name)> nf4_frozen;
};

// Fills `out` (fp32, CPU, [end - begin]) with elements [begin, end) of one of unit
// `unit`'s flats: its trainable tensors (or, for a frozen source, its frozen ones)
// flattened in layout order, unpadded; end <= that flat's numel. This is how a rank
// initialises only its own shard: from memory-mapped safetensors, a seeded init or a
// checkpoint.
using ShardSource = std::function<absl::Status(int unit, int64_t begin, int64_t end, at::Tensor out)>;

// Reads slices from an HF directory (only the overlapping parts of each tensor are
// copied); `frozen` selects which of the unit's tensors the flat is made of.
class HfModelDir;
ShardSource HfShardSource(const HfModelDir& dir, const std::vector<UnitLayout>& layout, bool frozen = false);
// Seeded init identical to LocalEngine's InitUnit (one unit materialised at a time).
ShardSource SeededShardSource(const std::vector<UnitLayout>& layout, uint64_t seed, bool frozen = false);

// Where a unit's shard lies (identical on every rank but `begin`).
struct ShardSpan {
  int64_t numel = 0;   // unpadded elements of the unit
  int64_t padded = 0;  // numel rounded up to a multiple of the shard group size
  int64_t shard = 0;   // padded / shard group size
  int64_t begin = 0;   // this rank's first element: shard_rank * shard
};

class ShardedEngine : public ParamEngine {
 public:
  // `shard_comm`: the group a unit is sharded over (the world for FULL_SHARD and
  // SHARD_GRAD_OP, the node group for HYBRID_SHARD, a local comm for NO_SHARD);
  // `replica_comm`: the group gradient shards are all-reduced over (world for NO_SHARD,
  // across nodes for HYBRID_SHARD, nullptr otherwise); `world` for AllReduceSum.
  // `world_rank`/`world_size` are reported by rank()/world_size(). Only this rank's
  // slices are read from `source` (trainable tensors) and `frozen_source` (frozen ones;
  // required when the layout has any).
  static absl::StatusOr<std::unique_ptr<ShardedEngine>> Create(
      std::vector<UnitLayout> layout, const ShardingOptions& options, Comm* world, Comm* shard_comm,
      Comm* replica_comm, int world_rank, int world_size, const ShardSource& source,
      const ShardSource& frozen_source = nullptr);

  // Builds the groups a strategy needs from a DistContext (every rank must call it, in the
  // same order) and creates the engine. The context must outlive the engine.
  static absl::StatusOr<std::unique_ptr<ShardedEngine>> CreateWithContext(
      std::vector<UnitLayout> layout, const ShardingOptions& options, DistContext& ctx,
      const ShardSource& source, const ShardSource& frozen_source = nullptr);

  ~ShardedEngine() override;

  // ParamEngine.
  const std::vector<UnitLayout>& layout() const override { return layout_; }
  int rank() const override { return world_rank_; }
  int world_size() const override { return world_size_; }
  std::vector<at::Tensor> Acquire(int unit, at::Tensor* input = nullptr) override;
  void Release(int unit) override;
  // Starts gathering `unit` unless it is already gathered ahead or max_inflight_all_gathers
  // units are (activation checkpointing's backward prefetch: see the file comment).
  void Prefetch(int unit) override;
  void ZeroGrad() override;
  absl::Status ReduceGradients() override;
  at::Tensor ClipGradNormOnDevice(double max_norm) override;
  void Step(double lr) override;
  double AllReduceSum(double value) override;
  at::Tensor AllReduceSumOnDevice(at::Tensor values) override;
  int data_parallel_rank() const override { return world_rank_ / tp_size(); }
  int data_parallel_size() const override { return world_size_ / tp_size(); }
  std::vector<at::Tensor> FullUnit(int unit, bool with_frozen = true) override;
  // True on every rank when `flag` is true on any rank of the world (a collective; one
  // host synchronisation).
  bool AnyRank(bool flag);

  // The tensor-parallel group (nullptr without one) the model's collectives run over.
  Comm* tensor_parallel_comm() const { return tp_comm_; }
  int tp_rank() const { return tp_comm_ ? tp_comm_->rank() : 0; }
  int tp_size() const { return tp_comm_ ? tp_comm_->size() : 1; }

  // Micro-step hint (see the file comment); reset to true by ZeroGrad().
  void SetGradientSync(bool sync) { sync_ = sync; }
  // The factor the loop multiplies the loss by before backward (1 unless fp16).
  double loss_scale() const { return loss_scale_; }
  // Whether the last ReduceGradients() found inf/NaN (fp16: Step() is then skipped).
  bool found_inf() const { return found_inf_; }

  const ShardingOptions& options() const { return options_; }
  // The unit's trainable flat (what masters, gradients, optimizer state and checkpoints
  // hold) and its frozen flat.
  const ShardSpan& span(int unit) const { return spans_[unit]; }
  const ShardSpan& frozen_span(int unit) const { return frozen_spans_[unit]; }
  int shard_rank() const { return shard_comm_->rank(); }
  int shard_size() const { return shard_comm_->size(); }
  // Replica index (HYBRID_SHARD/NO_SHARD: which copy of the shards this rank holds).
  int replica_rank() const { return replica_comm_ ? replica_comm_->rank() : 0; }

  // State for checkpoints: fp32 shards [S_u] (views; modify in place to restore).
  at::Tensor master(int unit) const { return masters_[unit]; }
  // AdamW moments [S_u], zero-filled before the first step; restoring sets them in place.
  at::Tensor exp_avg(int unit);
  at::Tensor exp_avg_sq(int unit);
  int64_t optimizer_steps() const { return adamw_.steps(); }
  void set_optimizer_steps(int64_t steps) { adamw_.set_steps(steps); }
  void set_loss_scale(double scale) { loss_scale_ = scale; }

  // Bytes of parameters + gradients + optimizer state (+ any gathered units or unsharded
  // accumulators) held right now; between steps this is the persistent footprint.
  int64_t PersistentBytes() const;
  // The most bytes that gradient reductions in flight (unsharded inputs, their outputs and
  // Gloo's receive buffers) have held at once since the engine was created.
  int64_t peak_reduce_bytes() const { return peak_reduce_bytes_; }
  // With options().record_trace: what the engine did, in order, one entry per event:
  // "gather U" (an all-gather of unit U issued), "acquire U", "reduce U" (a gradient
  // reduction launched). Empty otherwise.
  const std::vector<std::string>& trace() const { return trace_; }
  // The group all-gathers run on: the shard group, or on NCCL a second communicator over
  // the same ranks, so gathers never queue behind reduce-scatters on one stream.
  Comm* gather_comm() const { return gather_comm_ != nullptr ? gather_comm_ : shard_comm_; }

 private:
  struct Gathered;
  class GatherFunction;
  friend class GatherFunction;

  ShardedEngine(std::vector<UnitLayout> layout, const ShardingOptions& options, Comm* world,
                Comm* shard_comm, Comm* replica_comm, int world_rank, int world_size);

  bool ReshardsAfterForward() const;
  // Issues the all-gather of unit `unit` into a new Gathered (not waited on).
  std::unique_ptr<Gathered> StartGather(int unit);
  void Regather(Gathered& g);  // re-allocates freed storage and issues the all-gather
  void WaitGathered(Gathered& g);
  void Free(Gathered& g);
  void PrefetchAhead(int unit);
  void Trace(const char* what, int unit);
  void PostBackward(int instance, const at::Tensor& grad);
  void LaunchReduce(int unit, at::Tensor full_grad);
  void EndPass();

  // Constant after construction.
  const std::vector<UnitLayout> layout_;
  const ShardingOptions options_;
  Comm* const world_;
  Comm* const shard_comm_;
  Comm* const replica_comm_;  // may be null
  const int world_rank_;
  const int world_size_;
  std::vector<ShardSpan> spans_;
  std::vector<ShardSpan> frozen_spans_;
  struct View {
    bool frozen;                 // which flat the tensor lives in
    int64_t offset;              // first element in that flat
    int64_t numel;
    std::vector<int64_t> shape;  // of this rank's slice
    TpSplit split;
  };
  std::vector<std::vector<View>> views_;  // [unit][tensor], layout order
  // Packed frozen flats (see the file comment): [unit] segments, empty when not packed.
  struct PackedSegment {
    int64_t offset;       // first element in the (unpacked) frozen flat
    int64_t numel;
    int64_t byte_offset;  // first byte in the packed flat (a multiple of 8)
    int64_t blocks;       // NF4 blocks; 0: stored in the compute dtype
  };
  std::vector<std::vector<PackedSegment>> packed_;
  std::vector<ShardSpan> packed_spans_;  // [unit], in bytes
  at::Tensor nf4_pairs_;                 // [256, 2] fp32: the levels of a code byte's two nibbles
  at::Tensor nf4_map_;                   // [256] fp32: DynamicMap8(), the absmax codes' values

  // Training state.
  std::vector<at::Tensor> masters_;  // [S_u] fp32 leaves (requires_grad, never get .grad)
  std::vector<at::Tensor> frozen_;   // [frozen S_u] compute dtype
  std::vector<at::Tensor> grads_;    // [S_u] fp32 gradient shards
  std::vector<at::Tensor> accum_;    // [padded_u] fp32 unsynced accumulators (or undefined)
  AdamW adamw_;
  bool sync_ = true;
  double loss_scale_ = 1.0;
  int64_t clean_steps_ = 0;
  bool found_inf_ = false;
  bool grads_reduced_ = false;

  // The current forward/backward pass: gathered instances in acquisition order.
  std::vector<std::unique_ptr<Gathered>> pass_;
  std::vector<std::unique_ptr<Gathered>> prefetched_;  // [unit]: forward prefetches
  int held_ = 0;  // acquired and not yet released in this pass
  struct PendingReduce {
    int unit;
    std::unique_ptr<CommWork> work;
    at::Tensor in;   // keeps the send buffer alive
    at::Tensor out;  // [S_u] reduce dtype (or [padded] for NO_SHARD)
  };
  std::deque<PendingReduce> pending_;  // launch order
  int64_t peak_reduce_bytes_ = 0;
  int64_t pass_generation_ = 0;
  int max_unit_in_pass_ = -1;
  std::vector<std::unique_ptr<Comm>> owned_comms_;  // groups made by CreateWithContext
  Comm* tp_comm_ = nullptr;                          // tensor-parallel group, or none
  Comm* gather_comm_ = nullptr;                      // see gather_comm(); null: shard_comm_
  std::vector<std::string> trace_;                   // see trace()
  // [unit]: (first, count) of the replicated trainable elements inside this rank's shard.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> replicated_;

  bool packed(int unit) const { return !packed_[unit].empty(); }
  // When options_.nf4_frozen selects one of unit `unit`'s frozen tensors: lays out its packed
  // frozen flat, fills this rank's shard of it (frozen_[unit]) and returns true.
  absl::StatusOr<bool> InitPackedFrozen(int unit, const ShardSource& frozen_source);
  // Decodes a gathered packed flat of `unit` into `out` (the frozen flat, any float dtype).
  void DecodeFrozen(int unit, const at::Tensor& packed, at::Tensor out) const;

  int InputsInFlight() const;
  // Advances the oldest pending reduction (the oldest with its input still held when
  // `input_stage`) by one stage; see the comment in the .cc.
  absl::Status AdvanceOldest(bool input_stage);
  absl::Status DrainPending();
  void DropPrefetched();
  void IssueGather(Gathered& g);
};

// Device figures for the metrics: peak bytes allocated by the CUDA caching allocator on
// `device` since the last reset (0 on the CPU or in a build without CUDA), and the
// device's name ("NVIDIA H200", or "cpu").
int64_t PeakDeviceMemoryBytes(const at::Device& device);
std::string DeviceName(const at::Device& device);

// Builds ShardingOptions' groups: the partition of world ranks into shard groups for a
// strategy (consecutive blocks of `group` ranks) and the matching replica groups.
std::vector<std::vector<int>> ShardGroups(int world_size, int group);
std::vector<std::vector<int>> ReplicaGroups(int world_size, int group);

}  // namespace llamafleet::trainer
