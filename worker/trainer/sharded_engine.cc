#include "sharded_engine.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#if defined(LLAMAFLEET_HAVE_CUDA) && __has_include(<c10/cuda/CUDACachingAllocator.h>) && \
    __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#define LLAMAFLEET_CUDA_STATS 1
#endif

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "hf_io.h"
#include "host_sync.h"
#include "sharded_engine_internal.h"
#include "tensor_parallel.h"
#include "util.h"

namespace llamafleet::trainer {

int64_t PeakDeviceMemoryBytes(const at::Device& device) {
#if defined(LLAMAFLEET_CUDA_STATS)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // StatType::AGGREGATE
  }
#endif
  return 0;
}

std::string DeviceName(const at::Device& device) {
#if defined(LLAMAFLEET_CUDA_STATS)
  if (device.is_cuda()) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess) return prop.name;
  }
#endif
  return device.str();
}

// ---------------------------------------------------------------------------------------
// One acquisition of a unit: a gathered flat buffer [padded] in the compute dtype. Its
// storage object lives as long as autograd holds views of it; Free() drops the bytes
// (nbytes 0) and Regather() brings them back into the same storage.
struct ShardedEngine::Gathered {
  int unit = -1;
  at::Tensor buffer;     // [padded], plain (no autograd)
  size_t nbytes = 0;
  at::Tensor frozen_buffer;  // [frozen padded], the frozen flat
  size_t frozen_nbytes = 0;
  std::unique_ptr<CommWork> frozen_work;
  at::Tensor packed_buffer;  // packed units: the gathered packed flat until it is decoded
  bool freed = false;
  bool released = false;
  bool needs_backward = false;  // acquired with grad mode on
  bool backward_done = false;
  std::unique_ptr<CommWork> work;  // all-gather in flight into `buffer`
  at::Tensor send;                 // the cast local shard, alive while `work` runs
};

// The autograd node between a unit's master shard and its gathered parameters. Outputs:
// the gathered trainable flat, and, when the unit's input activation is passed, that
// activation unchanged (autograd returns it as a new view whose grad_fn is this node), so
// the node runs once the unit's backward has produced both gradients.
class ShardedEngine::GatherFunction : public torch::autograd::Function<GatherFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::Tensor master,
                                                at::Tensor input, ShardedEngine* engine, int64_t instance,
                                                int64_t generation) {
    ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
    ctx->saved_data["instance"] = instance;
    ctx->saved_data["generation"] = generation;
    const bool has_input = input.requires_grad();
    ctx->saved_data["has_input"] = has_input;
    const at::Tensor& buf = engine->pass_[instance]->buffer;
    // A new tensor object on the same storage (not an autograd view of it).
    at::Tensor flat = at::empty({0}, buf.options()).set_(buf.storage(), 0, {buf.numel()}, {1});
    if (!has_input) return {flat};
    return {flat, input};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* engine = reinterpret_cast<ShardedEngine*>(ctx->saved_data["engine"].toInt());
    TORCH_CHECK(ctx->saved_data["generation"].toInt() == engine->pass_generation_,
                "backward of a forward pass that a later forward pass replaced (run backward "
                "after each forward)");
    engine->PostBackward(static_cast<int>(ctx->saved_data["instance"].toInt()), grads[0]);
    const at::Tensor input_grad = ctx->saved_data["has_input"].toBool() ? grads[1] : at::Tensor();
    return {at::Tensor(), input_grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

namespace {
void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}
void AllocStorage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}
}  // namespace

ShardedEngine::ShardedEngine(std::vector<UnitLayout> layout, const ShardingOptions& options,
                             Comm* world, Comm* shard_comm, Comm* replica_comm, int world_rank,
                             int world_size)
    : layout_(std::move(layout)),
      options_(options),
      world_(world),
      shard_comm_(shard_comm),
      replica_comm_(replica_comm),
      world_rank_(world_rank),
      world_size_(world_size),
      adamw_(options.adamw) {}

ShardedEngine::~ShardedEngine() {
  // Collectives still in flight write into our buffers: finish them first.
  for (auto& p : pending_) {
    if (p.work) (void)p.work->Wait();
  }
  for (auto& g : prefetched_) {
    if (g && g->work) (void)g->work->Wait();
  }
  for (auto& g : pass_) {
    if (g && g->work) (void)g->work->Wait();
    if (g && g->frozen_work) (void)g->frozen_work->Wait();
  }
  for (auto& g : prefetched_) {
    if (g && g->frozen_work) (void)g->frozen_work->Wait();
  }
}

absl::StatusOr<std::unique_ptr<ShardedEngine>> ShardedEngine::Create(
    std::vector<UnitLayout> layout, const ShardingOptions& o, Comm* world, Comm* shard_comm,
    Comm* replica_comm, int world_rank, int world_size, const ShardSource& source,
    const ShardSource& frozen_source) {
  auto float_type = [](at::ScalarType t) {
    return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  };
  if (!float_type(o.compute_dtype) || !float_type(o.reduce_dtype)) {
    return absl::InvalidArgumentError("compute and reduce dtypes must be fp32, bf16 or fp16");
  }
  if (o.max_inflight_all_gathers < 1) {
    return absl::InvalidArgumentError("fsdp.max_inflight_all_gathers must be >= 1");
  }
  if (o.max_inflight_reduces < 1) return absl::InvalidArgumentError("max_inflight_reduces must be >= 1");
  if (world == nullptr || shard_comm == nullptr) return absl::InvalidArgumentError("missing communicator");
  if (o.nf4_frozen && o.tensor_parallel > 1) {
    return absl::InvalidArgumentError("an NF4 frozen base needs an unsliced layout (tensor_parallel 1)");
  }
  std::unique_ptr<ShardedEngine> e(new ShardedEngine(std::move(layout), o, world, shard_comm, replica_comm,
                                                     world_rank, world_size));
  try {
    const int64_t n = shard_comm->size();
    const auto fp32 = at::TensorOptions().dtype(at::kFloat);
    e->prefetched_.resize(e->layout_.size());
    e->accum_.resize(e->layout_.size());
    e->packed_.resize(e->layout_.size());
    e->packed_spans_.resize(e->layout_.size());
    auto span_of = [&](int64_t numel) {
      ShardSpan sp;
      sp.numel = numel;
      sp.padded = (sp.numel + n - 1) / n * n;
      sp.shard = sp.padded / n;
      sp.begin = shard_comm->rank() * sp.shard;
      return sp;
    };
    for (size_t u = 0; u < e->layout_.size(); ++u) {
      const UnitLayout& unit = e->layout_[u];
      const ShardSpan sp = span_of(unit.trainable_numel());
      const ShardSpan fsp = span_of(unit.numel() - unit.trainable_numel());
      e->spans_.push_back(sp);
      e->frozen_spans_.push_back(fsp);
      std::vector<View> views;
      int64_t off = 0, frozen_off = 0;
      for (size_t i = 0; i < unit.shapes.size(); ++i) {
        const bool frozen = unit.is_frozen(i);
        int64_t& o_ref = frozen ? frozen_off : off;
        views.push_back(View{frozen, o_ref, unit.numel(i), unit.shapes[i], unit.split_of(i)});
        o_ref += unit.numel(i);
      }
      e->views_.push_back(std::move(views));

      e->frozen_.emplace_back();
      absl::StatusOr<bool> packs = e->InitPackedFrozen(static_cast<int>(u), frozen_source);
      if (!packs.ok()) return packs.status();
      // The frozen flat: read in fp32, kept in the compute dtype.
      at::Tensor frozen = at::zeros({fsp.shard}, fp32);
      const int64_t fend = std::min(fsp.begin + fsp.shard, fsp.numel);
      if (fend > fsp.begin && !*packs) {
        if (!frozen_source) return absl::InvalidArgumentError("a layout with frozen tensors needs a frozen source");
        absl::Status s = frozen_source(static_cast<int>(u), fsp.begin, fend, frozen.narrow(0, 0, fend - fsp.begin));
        if (!s.ok()) return s;
      }
      if (!*packs) e->frozen_.back() = frozen.to(o.device, o.compute_dtype);

      // Only this rank's slice [begin, min(begin + S, numel)) is read; padding stays 0.
      at::Tensor master = at::zeros({sp.shard}, fp32);
      const int64_t end = std::min(sp.begin + sp.shard, sp.numel);
      if (end > sp.begin) {
        absl::Status s = source(static_cast<int>(u), sp.begin, end, master.narrow(0, 0, end - sp.begin));
        if (!s.ok()) return s;
      }
      master = master.to(o.device);
      master.set_requires_grad(true);
      e->masters_.push_back(master);
      if (!o.forward_only) e->grads_.push_back(at::zeros({sp.shard}, fp32.device(o.device)));
    }
    // AdamW state exists from the start (zeros are what the first step would create), so
    // a checkpoint can be restored into it before any step.
    e->adamw_.exp_avg().clear();
    e->adamw_.exp_avg_sq().clear();
    for (const at::Tensor& m : o.forward_only ? std::vector<at::Tensor>{} : e->masters_) {
      e->adamw_.exp_avg().push_back(at::zeros_like(m).detach());
      e->adamw_.exp_avg_sq().push_back(at::zeros_like(m).detach());
    }
    e->loss_scale_ = o.compute_dtype == at::kHalf ? o.initial_loss_scale : 1.0;
  } catch (const c10::Error& err) {
    return absl::InternalError(absl::StrCat("initializing shards: ", err.what_without_backtrace()));
  }
  return e;
}

bool ShardedEngine::ReshardsAfterForward() const {
  return options_.strategy == ShardingStrategy::kFullShard ||
         options_.strategy == ShardingStrategy::kHybridShard;
}

void ShardedEngine::Trace(const char* what, int unit) {
  if (options_.record_trace) trace_.push_back(absl::StrCat(what, " ", unit));
}

void ShardedEngine::IssueGather(Gathered& g) {
  at::NoGradGuard no_grad;
  Trace("gather", g.unit);
  const bool one = shard_comm_->size() == 1;
  if (spans_[g.unit].padded > 0) {
    at::Tensor src = masters_[g.unit].detach();
    if (src.scalar_type() != options_.compute_dtype) src = src.to(options_.compute_dtype);
    if (one) {
      g.buffer.copy_(src);
    } else {
      g.send = src;
      g.work = gather_comm()->AllGather(g.buffer, g.send);
    }
  }
  if (packed(g.unit)) {
    g.packed_buffer = at::empty({packed_spans_[g.unit].padded}, frozen_[g.unit].options());
    if (one) {
      g.packed_buffer.copy_(frozen_[g.unit]);
    } else {
      g.frozen_work = gather_comm()->AllGather(g.packed_buffer, frozen_[g.unit]);
    }
  } else if (frozen_spans_[g.unit].padded > 0) {
    // Frozen shards are already in the compute dtype and never change during a pass.
    if (one) {
      g.frozen_buffer.copy_(frozen_[g.unit]);
    } else {
      g.frozen_work = gather_comm()->AllGather(g.frozen_buffer, frozen_[g.unit]);
    }
  }
}

std::unique_ptr<ShardedEngine::Gathered> ShardedEngine::StartGather(int unit) {
  auto g = std::make_unique<Gathered>();
  g->unit = unit;
  const auto opts = at::TensorOptions().dtype(options_.compute_dtype).device(options_.device);
  g->buffer = at::empty({spans_[unit].padded}, opts);
  g->nbytes = g->buffer.nbytes();
  g->frozen_buffer = at::empty({frozen_spans_[unit].padded}, opts);
  g->frozen_nbytes = g->frozen_buffer.nbytes();
  IssueGather(*g);
  return g;
}

void ShardedEngine::Regather(Gathered& g) {
  if (!g.freed) return;
  AllocStorage(g.buffer, g.nbytes);
  AllocStorage(g.frozen_buffer, g.frozen_nbytes);
  g.freed = false;
  IssueGather(g);
}

void ShardedEngine::WaitGathered(Gathered& g) {
  absl::Status s, fs;
  if (g.work) s = g.work->Wait();
  if (g.frozen_work) fs = g.frozen_work->Wait();
  g.work.reset();
  g.frozen_work.reset();
  g.send = at::Tensor();
  ThrowIfError(s);
  ThrowIfError(fs);
  if (g.packed_buffer.defined()) {
    DecodeFrozen(g.unit, g.packed_buffer, g.frozen_buffer);
    g.packed_buffer = at::Tensor();
  }
}

void ShardedEngine::Free(Gathered& g) {
  if (g.freed) return;
  if (g.work) (void)g.work->Wait();
  if (g.frozen_work) (void)g.frozen_work->Wait();
  g.work.reset();
  g.frozen_work.reset();
  g.send = at::Tensor();
  g.packed_buffer = at::Tensor();
  FreeStorage(g.buffer);
  FreeStorage(g.frozen_buffer);
  g.freed = true;
}

void ShardedEngine::PrefetchAhead(int unit) {
  if (unit < 0 || unit >= static_cast<int>(layout_.size()) || prefetched_[unit]) return;
  prefetched_[unit] = StartGather(unit);
}

void ShardedEngine::Prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(layout_.size()) || prefetched_[unit]) return;
  const auto ahead = std::count_if(prefetched_.begin(), prefetched_.end(),
                                   [](const auto& g) { return g != nullptr; });
  if (ahead >= options_.max_inflight_all_gathers) return;
  prefetched_[unit] = StartGather(unit);
}

void ShardedEngine::DropPrefetched() {
  for (auto& g : prefetched_) {
    if (g) Free(*g);
    g.reset();
  }
}

void ShardedEngine::EndPass() {
  for (auto& g : pass_) Free(*g);
  pass_.clear();
  held_ = 0;
  max_unit_in_pass_ = -1;
  ++pass_generation_;
}

std::vector<at::Tensor> ShardedEngine::Acquire(int unit, at::Tensor* input) {
  TORCH_CHECK(unit >= 0 && unit < static_cast<int>(layout_.size()), "Acquire: bad unit ", unit);
  Trace("acquire", unit);
  const bool grad = at::GradMode::is_enabled();
  // A forward always starts with the embedding while nothing is held (the tied output
  // projection acquires it again while the head is held).
  if (unit == 0 && held_ == 0) {
    ThrowIfError(DrainPending());
    EndPass();
  }
  std::unique_ptr<Gathered> g = std::move(prefetched_[unit]);
  if (!g) g = StartGather(unit);
  WaitGathered(*g);
  // Backward passes through the unit when it has trainable tensors or its input needs a
  // gradient; otherwise (a frozen embedding) nothing in it is differentiated.
  const bool through_input = frozen_spans_[unit].numel > 0 && input != nullptr && input->defined() &&
                             input->requires_grad();
  const bool node = grad && (spans_[unit].numel > 0 || through_input);
  g->needs_backward = node;
  const int64_t instance = static_cast<int64_t>(pass_.size());
  pass_.push_back(std::move(g));
  ++held_;
  // Forward prefetch: the next units in forward order, when the forward is moving on.
  if (unit > max_unit_in_pass_) {
    max_unit_in_pass_ = unit;
    for (int k = 1; k < options_.max_inflight_all_gathers; ++k) PrefetchAhead(unit + k);
  }

  at::Tensor flat = pass_.back()->buffer;
  if (node) {
    // LibTorch 1.13 refuses undefined inputs to a custom Function: an empty tensor stands
    // for "no input" (has_input is decided by whether it requires a gradient).
    torch::autograd::variable_list outs = GatherFunction::apply(
        masters_[unit], through_input ? *input : at::empty({0}, masters_[unit].options()), this, instance,
        pass_generation_);
    flat = outs[0];
    if (through_input) *input = outs[1];
  }
  // One split of the trainable flat (a single autograd node gathers the tensors'
  // gradients into one flat gradient); frozen tensors are plain views with a version
  // counter of their own: a re-gather in backward rewrites the buffer with the same
  // values, which must not invalidate what autograd saved of them (the tied embeddings'
  // head under LoRA is re-gathered before its norm's backward).
  std::vector<int64_t> sizes;
  for (const View& v : views_[unit]) {
    if (!v.frozen) sizes.push_back(v.numel);
  }
  sizes.push_back(spans_[unit].padded - spans_[unit].numel);  // padding
  const std::vector<at::Tensor> parts = flat.split_with_sizes(sizes);
  const at::Tensor& frozen_flat = pass_.back()->frozen_buffer;
  std::vector<at::Tensor> out;
  size_t next = 0;
  for (const View& v : views_[unit]) {
    out.push_back(v.frozen ? frozen_flat.narrow(0, v.offset, v.numel).view(v.shape).variable_data()
                           : parts[next++].view(v.shape));
  }
  return out;
}

void ShardedEngine::Release(int unit) {
  for (int i = static_cast<int>(pass_.size()) - 1; i >= 0; --i) {
    Gathered& g = *pass_[i];
    if (g.unit != unit || g.released) continue;
    g.released = true;
    --held_;
    const bool last = i == static_cast<int>(pass_.size()) - 1;
    // Without backward nothing needs the unit again; FULL_SHARD re-gathers in backward,
    // except the last unit of the forward, whose backward comes first.
    if (!g.needs_backward || (ReshardsAfterForward() && !last)) Free(g);
    return;
  }
  TORCH_CHECK(false, "Release(", unit, ") without a matching Acquire");
}

void ShardedEngine::PostBackward(int instance, const at::Tensor& grad) {
  Gathered& g = *pass_[instance];
  TORCH_CHECK(!g.backward_done, "unit ", layout_[g.unit].name, " got two backward passes for one forward");
  g.backward_done = true;
  if (ReshardsAfterForward()) {
    // The unit acquired before this one runs its backward next: gather it now (it may
    // already be in flight), and start the following ones (bounded).
    for (int k = 1; k <= options_.max_inflight_all_gathers && instance - k >= 0; ++k) {
      Gathered& p = *pass_[instance - k];
      if (p.needs_backward && !p.backward_done) Regather(p);
    }
    if (instance >= 1) WaitGathered(*pass_[instance - 1]);
  }
  if (grad.defined() && spans_[g.unit].numel > 0) LaunchReduce(g.unit, grad);
  Free(g);
}

double ShardedEngine::AllReduceSum(double value) {
  // One all-reduce over the world, to which each tensor-parallel group contributes once.
  at::Tensor t = at::full({1}, tp_rank() == 0 ? value : 0.0,
                          at::TensorOptions().dtype(at::kDouble).device(options_.device));
  return ReadScalarOnHost(AllReduceSumOnDevice(t));
}

at::Tensor ShardedEngine::AllReduceSumOnDevice(at::Tensor values) {
  ThrowIfError(world_->AllReduceSum(values)->Wait());
  return values;
}

bool ShardedEngine::AnyRank(bool flag) {
  at::Tensor t = at::full({1}, flag ? 1.0 : 0.0, at::TensorOptions().dtype(at::kDouble).device(options_.device));
  return ReadScalarOnHost(AllReduceSumOnDevice(t)) > 0;
}

std::vector<at::Tensor> ShardedEngine::FullUnit(int unit, bool with_frozen) {
  at::NoGradGuard no_grad;
  auto gather = [&](const at::Tensor& shard, int64_t padded) {
    at::Tensor full = at::empty({padded}, shard.options());
    if (padded > 0) ThrowIfError(shard_comm_->AllGather(full, shard)->Wait());
    return full.to(at::kCPU, at::kFloat);
  };
  // Then the slices of a tensor-parallel group: [T, numel] per flat, one all-gather each.
  const int t = tp_size();
  auto join = [&](const at::Tensor& flat, int64_t numel) {
    at::Tensor mine = flat.narrow(0, 0, numel);
    if (t == 1) return mine.view({1, numel});
    mine = mine.to(options_.device).contiguous();
    at::Tensor all = at::empty({t * numel}, mine.options());
    if (numel > 0) ThrowIfError(tp_comm_->AllGather(all, mine)->Wait());
    return all.to(at::kCPU).view({t, numel});
  };
  const at::Tensor trainable = join(gather(masters_[unit].detach(), spans_[unit].padded), spans_[unit].numel);
  at::Tensor frozen_flat;
  if (with_frozen && packed(unit)) {
    at::Tensor bytes = at::empty({packed_spans_[unit].padded}, frozen_[unit].options());
    ThrowIfError(shard_comm_->AllGather(bytes, frozen_[unit])->Wait());
    frozen_flat = at::empty({frozen_spans_[unit].numel}, bytes.options().dtype(at::kFloat));
    DecodeFrozen(unit, bytes, frozen_flat);
    frozen_flat = frozen_flat.to(at::kCPU);
  } else if (with_frozen) {
    frozen_flat = gather(frozen_[unit], frozen_spans_[unit].padded);
  }
  const at::Tensor frozen = with_frozen ? join(frozen_flat, frozen_spans_[unit].numel) : at::Tensor();
  std::vector<at::Tensor> out;
  for (const View& v : views_[unit]) {
    if (v.frozen && !with_frozen) {
      out.emplace_back();
      continue;
    }
    const at::Tensor slices = (v.frozen ? frozen : trainable).narrow(1, v.offset, v.numel);
    out.push_back(JoinSlices(slices, v.split, v.shape).clone());
  }
  return out;
}

at::Tensor ShardedEngine::exp_avg(int unit) { return adamw_.exp_avg()[unit]; }
at::Tensor ShardedEngine::exp_avg_sq(int unit) { return adamw_.exp_avg_sq()[unit]; }

int64_t ShardedEngine::PersistentBytes() const {
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += static_cast<int64_t>(t.storage().nbytes());
  };
  for (const at::Tensor& t : masters_) add(t);
  for (const at::Tensor& t : frozen_) add(t);
  for (const at::Tensor& t : grads_) add(t);
  for (const at::Tensor& t : accum_) add(t);
  auto& self = const_cast<ShardedEngine&>(*this);
  for (const at::Tensor& t : self.adamw_.exp_avg()) add(t);
  for (const at::Tensor& t : self.adamw_.exp_avg_sq()) add(t);
  for (const auto& g : pass_) {
    add(g->buffer);
    add(g->frozen_buffer);
    add(g->packed_buffer);
  }
  for (const auto& g : prefetched_) {
    if (g) {
      add(g->buffer);
      add(g->frozen_buffer);
      add(g->packed_buffer);
    }
  }
  for (const auto& p : pending_) {
    add(p.in);
    if (!p.out.is_same(p.in)) add(p.out);
  }
  return bytes;
}

}  // namespace llamafleet::trainer
