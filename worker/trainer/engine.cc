#include "engine.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <cmath>

#include "absl/strings/match.h"
#include "host_sync.h"

namespace llamafleet::trainer {

// LibTorch >= 2.4 has at::_fused_adamw_ for CUDA and CPU tensors (CPU since 2.4).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define LLAMAFLEET_HAVE_FUSED_ADAMW 1
#endif

AdamWKernel AdamW::AutoKernel(const at::Device& device) {
#if defined(LLAMAFLEET_HAVE_FUSED_ADAMW)
  if (device.is_cuda() || device.is_cpu()) return AdamWKernel::kFused;
#endif
  return device.is_cpu() ? AdamWKernel::kFused : AdamWKernel::kPerTensor;
}

void AdamW::Step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 double lr) {
  at::NoGradGuard no_grad;
  if (exp_avg_.empty()) {
    exp_avg_.resize(params.size());
    exp_avg_sq_.resize(params.size());
  }
  ++steps_;
  std::vector<at::Tensor> p, g, m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = at::zeros_like(params[i], at::MemoryFormat::Preserve);
      exp_avg_sq_[i] = at::zeros_like(params[i], at::MemoryFormat::Preserve);
    }
    p.push_back(params[i]);
    g.push_back(grads[i]);
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
  }
  if (p.empty()) return;
  AdamWKernel kernel = options_.kernel;
  if (kernel == AdamWKernel::kAuto) kernel = AutoKernel(p[0].device());
  switch (kernel) {
    case AdamWKernel::kForeach:
      Foreach(p, g, m, v, lr);
      return;
    case AdamWKernel::kFused:
      Fused(p, g, m, v, lr);
      return;
    default:
      PerTensor(p, g, m, v, lr);
  }
}

void AdamW::PerTensor(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                      const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v,
                      double lr) {
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double step_size = lr / (1.0 - std::pow(b1, static_cast<double>(steps_)));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(steps_)));
  for (size_t i = 0; i < p.size(); ++i) {
    at::Tensor param = p[i], exp_avg = m[i], exp_avg_sq = v[i];
    if (options_.weight_decay != 0) param.mul_(1.0 - lr * options_.weight_decay);
    exp_avg.mul_(b1).add_(g[i], 1.0 - b1);
    exp_avg_sq.mul_(b2).addcmul_(g[i], g[i], 1.0 - b2);
    at::Tensor denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(options_.eps);
    param.addcdiv_(exp_avg, denom, -step_size);
  }
}

void AdamW::Foreach(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                    const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, double lr) {
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double step_size = lr / (1.0 - std::pow(b1, static_cast<double>(steps_)));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(steps_)));
  if (options_.weight_decay != 0) at::_foreach_mul_(p, 1.0 - lr * options_.weight_decay);
  at::_foreach_mul_(m, b1);
  at::_foreach_add_(m, g, 1.0 - b1);
  at::_foreach_mul_(v, b2);
  at::_foreach_addcmul_(v, g, g, 1.0 - b2);
  std::vector<at::Tensor> denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, bias2_sqrt);
  at::_foreach_add_(denom, options_.eps);
  at::_foreach_addcdiv_(p, m, denom, -step_size);
}

namespace {
// The update of one contiguous fp32 CPU tensor in one pass, in the order of PerTensor's
// ATen ops (each intermediate rounded to fp32 as they round it). Where LibTorch has
// _fused_adamw_ that runs instead.
[[maybe_unused]] void FusedAdamWCpu(const at::Tensor& param, const at::Tensor& grad,
                                    const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                                    float decay, float b1, float b2, float step_size,
                                    float bias2_sqrt, float eps) {
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
  at::parallel_for(0, param.numel(), 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float mi = m[i] * b1 + gi * one_b1;
      const float vi = v[i] * b2 + one_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / bias2_sqrt + eps;
      p[i] = p[i] * decay - step_size * (mi / denom);
    }
  });
}
}  // namespace

void AdamW::Fused(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                  const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, double lr) {
#if defined(LLAMAFLEET_HAVE_FUSED_ADAMW)
  // One kernel over every tensor; it reads the step count from a device tensor (the
  // caller of torch.optim.AdamW(fused=True) increments it before the call).
  const at::Tensor step =
      at::full({}, static_cast<double>(steps_), p[0].options().dtype(at::kFloat));
  const std::vector<at::Tensor> steps(p.size(), step);
  at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1, options_.beta2,
                    options_.weight_decay, options_.eps, /*amsgrad=*/false,
                    /*maximize=*/false);
#else
  bool cpu_fp32 = true;
  for (size_t i = 0; i < p.size(); ++i) {
    for (const at::Tensor* t : {&p[i], &g[i], &m[i], &v[i]}) {
      cpu_fp32 = cpu_fp32 && t->is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous();
    }
  }
  if (!cpu_fp32) {
    PerTensor(p, g, m, v, lr);
    return;
  }
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double step_size = lr / (1.0 - std::pow(b1, static_cast<double>(steps_)));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, static_cast<double>(steps_)));
  for (size_t i = 0; i < p.size(); ++i) {
    FusedAdamWCpu(p[i], g[i], m[i], v[i], static_cast<float>(1.0 - lr * options_.weight_decay),
                  static_cast<float>(b1), static_cast<float>(b2), static_cast<float>(step_size),
                  static_cast<float>(bias2_sqrt), static_cast<float>(options_.eps));
  }
#endif
}

LocalEngine::LocalEngine(std::vector<UnitLayout> layout,
                         std::vector<std::vector<at::Tensor>> params, at::Device device,
                         at::ScalarType compute_dtype, const AdamWOptions& adamw)
    : layout_(std::move(layout)), compute_dtype_(compute_dtype), adamw_(adamw) {
  params_.resize(params.size());
  for (size_t u = 0; u < params.size(); ++u) {
    for (size_t i = 0; i < params[u].size(); ++i) {
      const at::Tensor& p = params[u][i];
      at::Tensor leaf = p.to(device, at::kFloat).contiguous();
      if (leaf.data_ptr() == p.data_ptr()) leaf = leaf.clone();
      leaf.set_requires_grad(!layout_[u].is_frozen(i));
      params_[u].push_back(leaf);
    }
  }
}

std::vector<at::Tensor> LocalEngine::Acquire(int unit, at::Tensor* /*input*/) {
  if (compute_dtype_ == at::kFloat) return params_[unit];
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params_[unit]) out.push_back(p.to(compute_dtype_));
  return out;
}

void LocalEngine::ZeroGrad() {
  for (auto& unit : params_) {
    for (auto& p : unit) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
}

std::vector<at::Tensor> LocalEngine::AllParams() const {
  std::vector<at::Tensor> out;
  for (const auto& unit : params_) out.insert(out.end(), unit.begin(), unit.end());
  return out;
}

std::vector<at::Tensor> LocalEngine::AllGrads() const {
  std::vector<at::Tensor> out;
  for (const auto& unit : params_) {
    for (const auto& p : unit) out.push_back(p.grad());
  }
  return out;
}

double ParamEngine::ClipGradNorm(double max_norm) {
  return ReadScalarOnHost(ClipGradNormOnDevice(max_norm));
}

at::Tensor LocalEngine::ClipGradNormOnDevice(double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& g : AllGrads()) {
    if (g.defined()) norms.push_back(g.norm(2).to(at::kFloat));
  }
  if (norms.empty())
    return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(params_[0][0].device()));
  at::Tensor total = at::stack(norms).norm(2);
  if (max_norm > 0) {
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1.
    at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    for (const at::Tensor& g : AllGrads()) {
      if (g.defined()) g.mul_(coef.to(g.device()));
    }
  }
  return total.to(at::kDouble);
}

void LocalEngine::Step(double lr) { adamw_.Step(AllParams(), AllGrads(), lr); }

std::vector<at::Tensor> LocalEngine::FullUnit(int unit, bool /*with_frozen*/) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params_[unit]) out.push_back(p.detach().to(at::kCPU));
  return out;
}

int64_t LocalEngine::PersistentBytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& p : AllParams()) bytes += p.numel() * 4 * (p.grad().defined() ? 2 : 1);
  auto& self = const_cast<LocalEngine&>(*this);
  for (const auto& list : {self.adamw_.exp_avg(), self.adamw_.exp_avg_sq()}) {
    for (const at::Tensor& t : list) {
      if (t.defined()) bytes += t.numel() * t.element_size();
    }
  }
  return bytes;
}

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Elements drawn from one generator: a slice draws whole blocks, so a value depends on its
// block and not on the slice that asked for it.
constexpr int64_t kInitBlock = int64_t{1} << 16;

}  // namespace

at::Tensor InitFlatSlice(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed,
                         int64_t begin, int64_t end) {
  at::Tensor out = at::empty({end - begin}, at::kFloat);
  if (end <= begin) return out;
  if (shape.size() == 1) {
    // RMSNorm weights start at one, attention biases at zero (as transformers does).
    return out.fill_(absl::EndsWith(name, ".bias") ? 0.0 : 1.0);
  }
  if (absl::EndsWith(name, ".lora_B.weight"))
    return out.zero_();                         // the adapter starts as the identity
  uint64_t name_hash = 1469598103934665603ull;  // FNV-1a: portable, unlike std::hash
  for (unsigned char ch : name) name_hash = (name_hash ^ ch) * 1099511628211ull;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  // PEFT initialises lora_A with kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(fan_in),
  // 1/sqrt(fan_in)).
  const bool lora_a = absl::EndsWith(name, ".lora_A.weight");
  const double bound = lora_a ? 1.0 / std::sqrt(static_cast<double>(shape[1])) : 0.0;
  at::Tensor block = at::empty({kInitBlock}, at::kFloat);
  for (int64_t b = begin / kInitBlock; b * kInitBlock < end; ++b) {
    const int64_t b0 = b * kInitBlock, n = std::min(kInitBlock, numel - b0);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(
        SplitMix64((seed * 1000003ull ^ name_hash) + SplitMix64(b)));
    at::Tensor values = block.narrow(0, 0, n);
    if (lora_a) {
      values.uniform_(-bound, bound, gen);
    } else {
      values.normal_(0.0, 0.02, gen);
    }
    const int64_t lo = std::max(begin, b0), hi = std::min(end, b0 + n);
    out.narrow(0, lo - begin, hi - lo).copy_(values.narrow(0, lo - b0, hi - lo));
  }
  return out;
}

std::vector<at::Tensor> InitUnit(const UnitLayout& unit, uint64_t seed) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < unit.param_names.size(); ++i) {
    out.push_back(InitFlatSlice(unit.param_names[i], unit.shapes[i], seed, 0, unit.numel(i))
                      .view(unit.shapes[i]));
  }
  return out;
}

}  // namespace llamafleet::trainer
