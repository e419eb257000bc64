// The Torch half of the trainer: model properties that do not need the Python reference
// (GQA head mapping, causality, padding invariance, the chunked loss), AdamW against its
// formula and its kernels against each other, the LR schedules, seeded init, the HF
// directory loader's bad-input table and export.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "engine.h"
#include "hf_io.h"
#include "host_sync.h"
#include "lora.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"
#include "tiny_config.h"
#include "train.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::TempDir;

std::vector<std::vector<at::Tensor>> RandomParams(const LlamaConfig& c, uint64_t seed) {
  std::vector<std::vector<at::Tensor>> params;
  for (const UnitLayout& u : MakeLayout(c)) {
    auto p = InitUnit(u, seed);
    for (at::Tensor& t : p) {
      if (t.dim() == 1) t.add_(at::randn(t.sizes()) * 0.1);  // non-trivial norm weights
    }
    params.push_back(p);
  }
  return params;
}

double Loss(const LlamaConfig& c, std::vector<std::vector<at::Tensor>> params, const Batch& b) {
  LocalEngine engine(MakeLayout(c), std::move(params), at::kCPU, at::kFloat, AdamWOptions{});
  LlamaModel model(c, at::kCPU, at::kFloat);
  at::NoGradGuard no_grad;
  ModelInput in = MakeModelInput(b, at::kCPU);
  return model.LossSum(engine, in).item<double>() / static_cast<double>(in.num_targets);
}

Batch TokensBatch(std::vector<std::vector<int32_t>> rows) {
  std::vector<Sequence> seqs;
  std::vector<int64_t> idx;
  for (auto& r : rows) {
    idx.push_back(static_cast<int64_t>(seqs.size()));
    seqs.push_back(Sequence{r, std::vector<uint8_t>(r.size(), 1)});
  }
  return MakeBatch(seqs, idx);
}

TEST(Model, GqaEqualsMhaWithRepeatedKvHeads) {
  // A GQA model with kv head j serving query heads 2j and 2j+1 must equal an MHA model
  // whose k/v heads 2j and 2j+1 are both copies of kv head j (HF repeat_kv).
  at::manual_seed(1);
  LlamaConfig gqa = Tiny(2), mha = Tiny(4);
  auto pg = RandomParams(gqa, 3);
  auto pm = pg;
  const int64_t d = gqa.head_dim();
  for (int layer = 0; layer < 2; ++layer) {
    auto& u = pm[LayerUnit(layer)];
    for (int i : {2, 3}) {  // k, v: [KV*d, h] -> [H*d, h]
      u[i] = u[i].view({2, d, -1}).repeat_interleave(2, 0).reshape({4 * d, -1}).contiguous();
    }
  }
  Batch b = TokensBatch({{1, 5, 9, 3, 7, 2, 8}, {4, 4, 1, 0, 49, 12, 30}});
  const double lg = Loss(gqa, pg, b), lm = Loss(mha, pm, b);
  EXPECT_NEAR(lg, lm, 1e-6);
  EXPECT_GT(lg, 0.5);
}

// DPO's reference: the model with its adapter switched off computes the base model alone,
// with no copy of the weights; switched on again, the adapter counts.
TEST(Model, AdapterDisabledComputesTheBaseModelAlone) {
  at::manual_seed(4);
  const LlamaConfig c = Tiny(2);
  const auto base = RandomParams(c, 3);
  LoraOptions lora;
  lora.enabled = true;
  lora.r = 2;
  lora.alpha = 4;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  std::vector<UnitLayout> layout = MakeLayout(c);
  ApplyLora(c, lora, layout);
  std::vector<std::vector<at::Tensor>> params = base;
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = params[u].size(); i < layout[u].shapes.size(); ++i) {
      params[u].push_back(at::randn(layout[u].shapes[i]) *
                          0.2);  // B non-zero: the adapter changes the model
    }
  }
  LocalEngine engine(layout, params, at::kCPU, at::kFloat, AdamWOptions{});
  LlamaModel model(c, at::kCPU, at::kFloat);
  model.set_lora(lora);
  const Batch b = TokensBatch({{1, 5, 9, 3, 7, 2, 8}, {4, 4, 1, 0, 49, 12, 30}});
  at::NoGradGuard no_grad;
  const ModelInput in = MakeModelInput(b, at::kCPU);
  const double with_adapter = model.LossSum(engine, in).item<double>();
  double without;
  {
    AdapterDisabled off(model, lora);
    without = model.LossSum(engine, in).item<double>();
  }
  const double base_alone = Loss(c, base, b) * static_cast<double>(in.num_targets);
  EXPECT_NEAR(without, base_alone, 1e-9 * std::abs(base_alone));
  EXPECT_GT(std::abs(with_adapter - base_alone), 1e-3);
  EXPECT_EQ(model.LossSum(engine, in).item<double>(), with_adapter);  // restored
}

TEST(Model, CausalAndPaddingInvariant) {
  at::manual_seed(2);
  LlamaConfig c = Tiny(2, /*tied=*/true);
  auto params = RandomParams(c, 5);
  LocalEngine engine(MakeLayout(c), params, at::kCPU, at::kFloat, AdamWOptions{});
  LlamaModel model(c, at::kCPU, at::kFloat);
  at::NoGradGuard no_grad;
  at::Tensor a = at::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}).view({1, 6});
  at::Tensor b = a.clone();
  b[0][5] = 17;
  at::Tensor ha = model.Hidden(engine, a), hb = model.Hidden(engine, b);
  EXPECT_TRUE(at::allclose(ha.narrow(1, 0, 5), hb.narrow(1, 0, 5), 0, 0));  // bit-identical past
  EXPECT_FALSE(at::allclose(ha.narrow(1, 5, 1), hb.narrow(1, 5, 1)));

  // A row's loss does not depend on the padding after it or on its batch-mates.
  Batch alone = TokensBatch({{1, 7, 8, 9}});
  Batch padded = TokensBatch({{1, 7, 8, 9}, {1, 3, 3, 3, 3, 3, 3, 3, 3}});
  ModelInput in1 = MakeModelInput(alone, at::kCPU), in2 = MakeModelInput(padded, at::kCPU);
  EXPECT_EQ(in1.num_targets, 3);
  EXPECT_EQ(in2.num_targets, 3 + 8);
  const double l1 = model.LossSum(engine, in1).item<double>();
  Batch other = TokensBatch({{1, 3, 3, 3, 3, 3, 3, 3, 3}});
  const double l2 = model.LossSum(engine, in2).item<double>() -
                    model.LossSum(engine, MakeModelInput(other, at::kCPU)).item<double>();
  EXPECT_NEAR(l1, l2, 1e-4);
}

TEST(Model, TiedEmbeddingReceivesBothGradients) {
  LlamaConfig c = Tiny(4, /*tied=*/true);
  auto layout = MakeLayout(c);
  EXPECT_EQ(layout.back().param_names, std::vector<std::string>{"model.norm.weight"});
  LocalEngine engine(layout, RandomParams(c, 1), at::kCPU, at::kFloat, AdamWOptions{});
  LlamaModel model(c, at::kCPU, at::kFloat);
  // Token 40 never appears as input, only as a target: its embedding row gets a gradient
  // only through the (tied) output projection.
  Batch b = TokensBatch({{1, 3, 2}});
  ModelInput in = MakeModelInput(b, at::kCPU);
  in.labels = at::tensor(std::vector<int64_t>{40, 2});
  model.LossSum(engine, in).backward();
  at::Tensor g = engine.Acquire(EmbedUnit())[0].grad();
  ASSERT_TRUE(g.defined());
  EXPECT_GT(g[40].abs().sum().item<double>(), 0);
}

TEST(AdamW, MatchesTheFormula) {
  AdamWOptions o{0.9, 0.99, 1e-3, 0.1};
  AdamW adam(o);
  at::Tensor p = at::tensor(std::vector<float>{1.0f, -2.0f});
  std::vector<double> pd = {1.0, -2.0}, m = {0, 0}, v = {0, 0};
  const std::vector<std::vector<double>> grads = {{0.5, -1.0}, {0.25, 3.0}, {-1.0, 0.0}};
  const double lr = 0.01;
  for (size_t t = 0; t < grads.size(); ++t) {
    at::Tensor g = at::tensor(std::vector<float>{float(grads[t][0]), float(grads[t][1])});
    adam.Step({p}, {g}, lr);
    for (int i = 0; i < 2; ++i) {
      pd[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * grads[t][i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * grads[t][i] * grads[t][i];
      const double mh = m[i] / (1 - std::pow(o.beta1, t + 1));
      const double vh = v[i] / (1 - std::pow(o.beta2, t + 1));
      pd[i] -= lr * mh / (std::sqrt(vh) + o.eps);
    }
  }
  EXPECT_EQ(adam.steps(), 3);
  EXPECT_NEAR(p[0].item<double>(), pd[0], 1e-6);
  EXPECT_NEAR(p[1].item<double>(), pd[1], 1e-6);
  // An undefined gradient leaves the tensor (and its moments) alone.
  at::Tensor q = at::ones({2});
  AdamW skip(o);
  skip.Step({q}, {at::Tensor()}, lr);
  EXPECT_TRUE(at::equal(q, at::ones({2})));
}

TEST(AdamW, KernelsAgree) {
  // The per-tensor ATen ops, the _foreach_ ops and the fused kernel (at::_fused_adamw_ on
  // LibTorch >= 2.4, the one-pass CPU loop before) compute the same update, over steps with
  // weight decay, tensors of several sizes, one without gradient.
  at::manual_seed(7);
  const std::vector<int64_t> sizes = {1, 7, 4099, 70000};
  std::vector<at::Tensor> init;
  for (int64_t n : sizes) init.push_back(at::randn({n}));
  std::vector<std::vector<at::Tensor>> grads(4);
  for (auto& step : grads) {
    for (size_t i = 0; i < sizes.size(); ++i)
      step.push_back(i == 1 ? at::Tensor() : at::randn({sizes[i]}) * 0.01);
  }
  auto run = [&](AdamWKernel kernel) {
    AdamWOptions o{0.9, 0.95, 1e-8, 0.1, kernel};
    AdamW adam(o);
    std::vector<at::Tensor> p;
    for (const at::Tensor& t : init) p.push_back(t.clone());
    for (size_t s = 0; s < grads.size(); ++s)
      adam.Step(p, grads[s], 3e-3 * static_cast<double>(s + 1));
    EXPECT_EQ(adam.steps(), 4);
    EXPECT_FALSE(adam.exp_avg()[1].defined());  // never had a gradient
    p.push_back(adam.exp_avg()[3]);
    p.push_back(adam.exp_avg_sq()[3]);
    return p;
  };
  const std::vector<at::Tensor> plain = run(AdamWKernel::kPerTensor);
  EXPECT_TRUE(at::equal(plain[1], init[1]));
  for (AdamWKernel k : {AdamWKernel::kForeach, AdamWKernel::kFused, AdamWKernel::kAuto}) {
    const std::vector<at::Tensor> other = run(k);
    for (size_t i = 0; i < plain.size(); ++i) {
      // Parameters (magnitude ~1) within 1e-6 as in the formula test; moments within 1e-6
      // relative (or 1e-8: an fp32 ulp of the largest).
      const bool param = i < init.size();
      EXPECT_TRUE(
          at::allclose(other[i], plain[i], /*rtol=*/param ? 0 : 1e-6, /*atol=*/param ? 1e-6 : 1e-8))
          << "kernel " << static_cast<int>(k) << " tensor " << i << " max diff "
          << (other[i] - plain[i]).abs().max().item<double>();
    }
  }
  EXPECT_EQ(AdamW::AutoKernel(at::kCPU), AdamWKernel::kFused);
}

TEST(Model, ChunkedLossEqualsWholeLoss) {
  // The loss over 13 target positions in chunks of 4 (recomputed in backward) equals the
  // loss over all of them at once, and so do the gradients of every parameter (the output
  // projection's summed over chunks; tied: the embedding's from both of its uses).
  for (bool tied : {false, true}) {
    LlamaConfig c = Tiny(2, tied);
    auto params = RandomParams(c, 11);
    Batch b = TokensBatch({{1, 5, 9, 3, 7, 2, 8}, {4, 4, 1, 0, 49, 12, 30, 6}});
    ModelInput in = MakeModelInput(b, at::kCPU);
    ASSERT_EQ(in.num_targets, 13);
    auto run = [&](int64_t chunk, std::vector<at::Tensor>* grads) {
      LocalEngine engine(MakeLayout(c), params, at::kCPU, at::kFloat, AdamWOptions{});
      LlamaModel model(c, at::kCPU, at::kFloat);
      model.set_loss_chunk_positions(chunk);
      at::Tensor loss = model.LossSum(engine, in);
      loss.backward();
      for (size_t u = 0; u < engine.layout().size(); ++u) {
        for (const at::Tensor& p : engine.Acquire(static_cast<int>(u)))
          grads->push_back(p.grad().clone());
      }
      return loss.item<double>();
    };
    std::vector<at::Tensor> whole, chunked;
    const double lw = run(1024, &whole), lc = run(4, &chunked);
    EXPECT_NEAR(lc, lw, 1e-6 * lw) << "tied " << tied;
    ASSERT_EQ(whole.size(), chunked.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(at::allclose(chunked[i], whole[i], 1e-5, 1e-7))
          << "tied " << tied << " tensor " << i << " max diff "
          << (chunked[i] - whole[i]).abs().max().item<double>();
    }
    // Without autograd (evaluation) the chunks give the same loss.
    at::NoGradGuard no_grad;
    LocalEngine engine(MakeLayout(c), params, at::kCPU, at::kFloat, AdamWOptions{});
    LlamaModel model(c, at::kCPU, at::kFloat);
    model.set_loss_chunk_positions(5);
    EXPECT_NEAR(model.LossSum(engine, in).item<double>(), lw, 1e-6 * lw);
  }
}

TEST(Model, PackedDocumentsHaveTheLossAndGradientsTheyHaveAlone) {
  // Records packed into rows (PackSequences: positions restart, block-diagonal causal
  // attention, the first token of each document not a target): each record's loss in the
  // packed batch equals its loss run alone, and the packed batch's gradients equal the sum
  // of the records' gradients alone, without activation checkpointing and with either kind
  // (whose recompute must see the same positions and mask). The alone runs take the plain
  // causal path, so this checks the document path against it (test_document_packing.py
  // checks both against the Python reference).
  LlamaConfig c = Tiny(2);
  auto params = RandomParams(c, 21);
  std::vector<Sequence> records;
  uint32_t state = 7;
  for (int n : {5, 9, 3, 11, 6, 2}) {
    Sequence s;
    for (int t = 0; t < n; ++t) {
      state = state * 1664525u + 1013904223u;
      s.tokens.push_back(static_cast<int32_t>(state >> 8) % 50);
    }
    s.target.assign(n, 1);
    if (n == 9) std::fill(s.target.begin(), s.target.begin() + 4, 0);  // a prompt
    records.push_back(s);
  }
  const std::vector<Sequence> rows = PackSequences(records, 20);  // [5 9 3], [11 6 2]
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].documents.size(), 3u);
  const Batch packed = MakeBatch(rows, {0, 1});
  auto run = [&](const Batch& b, ActivationCheckpointing mode, std::vector<at::Tensor>* grads) {
    LocalEngine engine(MakeLayout(c), params, at::kCPU, at::kFloat, AdamWOptions{});
    LlamaModel model(c, at::kCPU, at::kFloat);
    model.set_activation_checkpointing(mode);
    at::Tensor loss = model.LossSum(engine, MakeModelInput(b, at::kCPU));
    if (grads == nullptr) return loss.item<double>();
    loss.backward();
    for (size_t u = 0; u < engine.layout().size(); ++u) {
      for (const at::Tensor& p : engine.Acquire(static_cast<int>(u))) grads->push_back(p.grad().clone());
    }
    return loss.item<double>();
  };
  // Alone: every record its own batch of one row, plain causal attention.
  std::vector<double> alone_loss;
  std::vector<at::Tensor> alone_grads;
  for (const Sequence& r : records) {
    std::vector<at::Tensor> g;
    alone_loss.push_back(run(MakeBatch({r}, {0}), ActivationCheckpointing::kNone, &g));
    if (alone_grads.empty()) {
      alone_grads = g;
    } else {
      for (size_t i = 0; i < g.size(); ++i) alone_grads[i].add_(g[i]);
    }
  }
  for (ActivationCheckpointing mode :
       {ActivationCheckpointing::kNone, ActivationCheckpointing::kFull, ActivationCheckpointing::kSelective}) {
    SCOPED_TRACE(ActivationCheckpointingName(mode));
    // Each record's loss: the packed batch with only that record's targets kept.
    int64_t offset = 0;  // the record's first token in the batch
    size_t k = 0;
    for (int64_t r = 0; r < packed.rows; ++r) {
      offset = r * packed.seq_len;
      for (int32_t len : rows[r].documents) {
        Batch one = packed;
        for (int64_t t = 0; t < one.rows * one.seq_len; ++t) {
          if (t < offset || t >= offset + len) one.target[t] = 0;
        }
        EXPECT_NEAR(run(one, mode, nullptr), alone_loss[k], 1e-5 * std::max(1.0, alone_loss[k])) << "record " << k;
        offset += len;
        ++k;
      }
    }
    ASSERT_EQ(k, records.size());
    std::vector<at::Tensor> g;
    run(packed, mode, &g);
    ASSERT_EQ(g.size(), alone_grads.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double scale = alone_grads[i].abs().max().item<double>();
      EXPECT_LE((g[i] - alone_grads[i]).abs().max().item<double>(), 1e-5 * scale) << "tensor " << i;
    }
  }
}

TEST(Engine, ClipMatchesTorchSemantics) {
  LlamaConfig c = Tiny(4);
  LocalEngine engine(MakeLayout(c), RandomParams(c, 1), at::kCPU, at::kFloat, AdamWOptions{});
  LlamaModel model(c, at::kCPU, at::kFloat);
  model.LossSum(engine, MakeModelInput(TokensBatch({{1, 5, 6, 7, 8}}), at::kCPU)).backward();
  // On the device nothing is read back; ClipGradNorm reads once.
  const int64_t syncs = HostSyncCount();
  const at::Tensor on_device = engine.ClipGradNormOnDevice(0);
  EXPECT_EQ(HostSyncCount(), syncs);
  EXPECT_EQ(on_device.scalar_type(), at::kDouble);
  const double norm = engine.ClipGradNorm(0);
  EXPECT_EQ(HostSyncCount(), syncs + 1);
  EXPECT_EQ(norm, on_device.item<double>());
  EXPECT_GT(norm, 0);
  EXPECT_NEAR(engine.ClipGradNorm(norm / 4), norm, 1e-5 * norm);  // returns the pre-clip norm
  EXPECT_NEAR(engine.ClipGradNorm(0), norm / 4, 1e-5 * norm);
  EXPECT_GT(engine.PersistentBytes(), 0);
}

TEST(Schedule, ConstantStepCosineWarmup) {
  LrScheduleOptions s;
  EXPECT_DOUBLE_EQ(LearningRate(s, 1e-3, 5, 0, 10), 1e-3);
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(LearningRate(s, 1e-3, 0, 0, 10), 0.25e-3);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1e-3, 3, 0, 10), 1e-3);
  s.kind = LrScheduleKind::kCosine;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(s, 1e-3, 4, 0, 10), 1e-3);
  EXPECT_NEAR(LearningRate(s, 1e-3, 7, 0, 10), 1e-3 * (0.1 + 0.9 * 0.5), 1e-15);
  EXPECT_NEAR(LearningRate(s, 1e-3, 10, 0, 10), 1e-4, 1e-15);
  LrScheduleOptions step;
  step.kind = LrScheduleKind::kStep;
  step.gamma = 0.85;
  EXPECT_DOUBLE_EQ(LearningRate(step, 1e-4, 100, 0, 1000), 1e-4);
  EXPECT_NEAR(LearningRate(step, 1e-4, 100, 2, 1000), 1e-4 * 0.85 * 0.85, 1e-18);
}

TEST(Init, SeededPerTensor) {
  auto layout = MakeLayout(Tiny(2));
  auto a = InitUnit(layout[1], 42), b = InitUnit(layout[1], 42), c = InitUnit(layout[1], 43);
  EXPECT_TRUE(at::equal(a[1], b[1]));
  EXPECT_FALSE(at::equal(a[1], c[1]));
  EXPECT_FALSE(at::equal(a[1].flatten().narrow(0, 0, 100), a[2].flatten().narrow(0, 0, 100)));
  EXPECT_TRUE(at::equal(a[0], at::ones({32})));
  EXPECT_NEAR(a[6].std().item<double>(), 0.02, 0.003);
}

// A rank draws only its own shard: any slice of a tensor equals that slice of the whole,
// across the generator's block boundaries, for normal, uniform (LoRA A) and constant inits.
TEST(Init, ASliceIsTheSameSliceOfTheWhole) {
  const std::vector<int64_t> shape = {300, 1000};  // 300,000 elements: five blocks
  for (const std::string name : {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.lora_A.weight",
                                 "model.layers.0.self_attn.q_proj.bias"}) {
    const std::vector<int64_t> s = absl::EndsWith(name, ".bias") ? std::vector<int64_t>{1000} : shape;
    const int64_t n = s.size() == 1 ? s[0] : s[0] * s[1];
    const at::Tensor whole = InitFlatSlice(name, s, 7, 0, n);
    for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 1}, {65535, 65537}, {1000, 200000}, {n - 3, n}, {131072, 196608}}) {
      if (hi > n) continue;
      EXPECT_TRUE(at::equal(InitFlatSlice(name, s, 7, lo, hi), whole.narrow(0, lo, hi - lo))) << name << " " << lo;
    }
  }
  EXPECT_TRUE(at::equal(InitFlatSlice("x.q_proj.bias", {8}, 7, 0, 8), at::zeros({8})));
}

// ---------------------------------------------------------------- HF directories

void WriteModelDir(const std::string& dir, const LlamaConfig& c,
                   const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                   const std::string& file = "model.safetensors") {
  fs::create_directories(dir);
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", ConfigToJson(c, "float32")).ok());
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : tensors) {
    StDtype d = t.scalar_type() == at::kLong ? StDtype::kI64 : StDtype::kF32;
    entries.push_back({name, d, t.sizes().vec()});
  }
  auto w = SafetensorsWriter::Open(dir + "/" + file, entries, {});
  ASSERT_TRUE(w.ok());
  for (const auto& [name, t] : tensors) {
    at::Tensor ct = t.contiguous();
    ASSERT_TRUE((*w)->Append(ct.data_ptr(), ct.numel() * ct.element_size()).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

std::vector<std::pair<std::string, at::Tensor>> AllTensors(const LlamaConfig& c) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto layout = MakeLayout(c);
  auto params = RandomParams(c, 9);
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = 0; i < layout[u].param_names.size(); ++i) {
      out.emplace_back(layout[u].param_names[i], params[u][i]);
    }
  }
  return out;
}

TEST(HfModelDir, LoadsAndSlices) {
  TempDir tmp;
  LlamaConfig c = Tiny(2);
  auto tensors = AllTensors(c);
  tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({8}));
  WriteModelDir(tmp.File("m"), c, tensors);
  auto m = HfModelDir::Open(tmp.File("m"));
  ASSERT_TRUE(m.ok()) << m.status();
  auto q = (*m)->Read("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(at::equal(*q, tensors[1 + 9 + 1].second));
  auto slice = (*m)->ReadFlatSlice("model.layers.1.self_attn.q_proj.weight", 10, 20, at::kBFloat16);
  ASSERT_TRUE(slice.ok());
  EXPECT_TRUE(at::equal(*slice, q->flatten().narrow(0, 10, 10).to(at::kBFloat16)));
  EXPECT_FALSE((*m)->ReadFlatSlice("model.norm.weight", 0, 33).ok());
  EXPECT_FALSE((*m)->Read("nope").ok());
}

TEST(HfModelDir, BadInputTable) {
  TempDir tmp;
  LlamaConfig c = Tiny(2);
  struct Case {
    const char* name;
    std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)> edit;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"missing", [](auto& t) { t.erase(t.begin() + 3); }, "missing tensor \"model.layers.0.self_attn.k_proj.weight\""},
      {"shape", [](auto& t) { t[5].second = at::zeros({32, 4}); }, "o_proj.weight\" has shape [32, 4] but config.json implies [32, 32]"},
      {"int_dtype", [](auto& t) { t[1].second = at::zeros({32}, at::kLong); }, "has dtype I64"},
      {"unexpected", [](auto& t) { t.emplace_back("model.layers.0.self_attn.q_proj.bias", at::zeros({32})); }, "unexpected tensor \"model.layers.0.self_attn.q_proj.bias\""},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    auto tensors = AllTensors(c);
    cs.edit(tensors);
    const std::string dir = tmp.File(cs.name);
    WriteModelDir(dir, c, tensors);
    auto m = HfModelDir::Open(dir);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(cs.needle), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(dir), std::string::npos) << m.status();
  }
  EXPECT_NE(HfModelDir::Open(tmp.File("absent")).status().message().find("does not exist"), std::string::npos);

  // Sharded: duplicates across shards, an index naming the wrong file, a bad file name.
  auto tensors = AllTensors(c);
  const std::string dir = tmp.File("sharded");
  std::vector<std::pair<std::string, at::Tensor>> a(tensors.begin(), tensors.begin() + 10);
  std::vector<std::pair<std::string, at::Tensor>> b(tensors.begin() + 9, tensors.end());  // overlap
  WriteModelDir(dir, c, a, "a.safetensors");
  WriteModelDir(dir, c, b, "b.safetensors");
  nlohmann::json wm;
  for (auto& [n, t] : a) wm[n] = "a.safetensors";
  for (auto& [n, t] : b) wm[n] = "b.safetensors";
  auto write_index = [&](const nlohmann::json& map) {
    ASSERT_TRUE(WriteStringToFile(dir + "/model.safetensors.index.json",
                                  nlohmann::json{{"weight_map", map}}.dump()).ok());
  };
  write_index(wm);
  EXPECT_NE(HfModelDir::Open(dir).status().message().find("appears in both"), std::string::npos);
  WriteModelDir(dir, c, std::vector<std::pair<std::string, at::Tensor>>(tensors.begin() + 10, tensors.end()),
                "b.safetensors");
  wm[tensors[0].first] = "b.safetensors";
  write_index(wm);
  EXPECT_NE(HfModelDir::Open(dir).status().message().find("is mapped to b.safetensors but is not in it"),
            std::string::npos);
  wm[tensors[0].first] = "../a.safetensors";
  write_index(wm);
  EXPECT_NE(HfModelDir::Open(dir).status().message().find("bad file"), std::string::npos);
  wm = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) wm[tensors[i].first] = i < 10 ? "a.safetensors" : "b.safetensors";
  write_index(wm);
  auto ok = HfModelDir::Open(dir);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(Export, FailureLeavesNothingBehind) {
  TempDir tmp;
  LlamaConfig c = Tiny(2);
  auto layout = MakeLayout(c);
  auto params = RandomParams(c, 1);
  int calls = 0;
  auto fetch = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> {
    if (++calls == 3) return absl::DataLossError("injected failure");
    return params[u];
  };
  ExportOptions o;
  o.dtype = StDtype::kF32;
  o.max_shard_bytes = 20000;
  absl::Status s = ExportHfDir(c, layout, fetch, tmp.File("out"), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 0);

  calls = 0;
  auto all = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> { return params[u]; };
  ASSERT_TRUE(ExportHfDir(c, layout, all, tmp.File("out"), o).ok());
  EXPECT_TRUE(fs::exists(tmp.File("out/model.safetensors.index.json")));
  auto back = HfModelDir::Open(tmp.File("out"));
  ASSERT_TRUE(back.ok()) << back.status();
  auto read = (*back)->ReadAll(layout);
  ASSERT_TRUE(read.ok());
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = 0; i < params[u].size(); ++i) EXPECT_TRUE(at::equal((*read)[u][i], params[u][i]));
  }
}

}  // namespace
}  // namespace llamafleet::trainer
