#include "engine.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "absl/strings/match.h"

namespace llamafleet::trainer {

void AdamW::Step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 double lr) {
  at::NoGradGuard no_grad;
  if (exp_avg_.empty()) {
    exp_avg_.resize(params.size());
    exp_avg_sq_.resize(params.size());
  }
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = grads[i];
    if (!g.defined()) continue;
    at::Tensor p = params[i];
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = at::zeros_like(p, at::MemoryFormat::Preserve);
      exp_avg_sq_[i] = at::zeros_like(p, at::MemoryFormat::Preserve);
    }
    if (options_.weight_decay != 0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(b1).add_(g, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
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

double LocalEngine::ClipGradNorm(double max_norm) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& g : AllGrads()) {
    if (g.defined()) norms.push_back(g.norm(2).to(at::kFloat));
  }
  if (norms.empty()) return 0.0;
  at::Tensor total = at::stack(norms).norm(2);
  const double norm = total.item<double>();
  if (max_norm > 0) {
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1.
    at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    for (const at::Tensor& g : AllGrads()) {
      if (g.defined()) g.mul_(coef.to(g.device()));
    }
  }
  return norm;
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

std::vector<at::Tensor> InitUnit(const UnitLayout& unit, uint64_t seed) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < unit.param_names.size(); ++i) {
    const std::string& name = unit.param_names[i];
    at::Tensor t = at::empty(unit.shapes[i], at::kFloat);
    uint64_t name_hash = 1469598103934665603ull;  // FNV-1a: portable, unlike std::hash
    for (unsigned char ch : name) name_hash = (name_hash ^ ch) * 1099511628211ull;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ull ^ name_hash);
    if (unit.shapes[i].size() == 1) {
      t.fill_(1.0);  // RMSNorm weights
    } else if (absl::EndsWith(name, ".lora_B.weight")) {
      t.zero_();  // LoRA: the adapter starts as the identity (lora.h)
    } else if (absl::EndsWith(name, ".lora_A.weight")) {
      // PEFT: kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      const double bound = 1.0 / std::sqrt(static_cast<double>(unit.shapes[i][1]));
      t.uniform_(-bound, bound, gen);
    } else {
      t.normal_(0.0, 0.02, gen);
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace llamafleet::trainer
