// The generator (worker/trainer/generation.h) and the model's cached forward: the logits
// of every cached step equal those of the training path's full forward of each row alone
// (no padding, no cache) and those of the generator without a cache, for three prompts
// of different lengths batched together; greedy, top-k 1 and a tiny top-p agree; a seed
// reproduces its samples; EOS ids and stop strings end the right rows; bad sizes fail.
#include "generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine.h"
#include "model.h"
#include "tiny_config.h"
#include "tokenizer.h"

namespace llamafleet::trainer {
namespace {

struct TinyModel {
  TinyModel(int64_t kv_heads, bool tied)
      : config(Tiny(kv_heads, tied)),
        engine(MakeLayout(config), Params(config), at::kCPU, at::kFloat, AdamWOptions{}),
        model(config, at::kCPU, at::kFloat) {
    model.set_training(false);
  }
  static std::vector<std::vector<at::Tensor>> Params(const LlamaConfig& c) {
    std::vector<std::vector<at::Tensor>> params;
    at::manual_seed(7);
    for (const UnitLayout& u : MakeLayout(c)) {
      std::vector<at::Tensor> unit;
      // Large enough weights that the logits differ between tokens by more than rounding.
      for (const auto& shape : u.shapes) {
        unit.push_back(shape.size() == 1 ? 1.0 + 0.1 * at::randn(shape) : 0.15 * at::randn(shape));
      }
      params.push_back(unit);
    }
    return params;
  }
  // The training path's logits at the last token of `ids` run alone: Hidden, then lm_head.
  at::Tensor FullLogits(const std::vector<int32_t>& ids) {
    at::NoGradGuard no_grad;
    std::vector<int64_t> wide(ids.begin(), ids.end());
    const at::Tensor tokens = at::tensor(wide, at::kLong).view({1, -1});
    const at::Tensor y = model.Hidden(engine, tokens).select(1, tokens.size(1) - 1);
    const at::Tensor w = config.tie_word_embeddings ? engine.Acquire(EmbedUnit())[0]
                                                    : engine.Acquire(HeadUnit(config))[1];
    return at::linear(y, w).to(at::kFloat).squeeze(0);
  }
  LlamaConfig config;
  LocalEngine engine;
  LlamaModel model;
};

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 9, 13}, {1, 2, 3, 4, 5, 6, 7}, {40, 3, 8, 21, 30, 11, 2, 17, 9, 44, 12, 6}};

struct GenRun {
  std::vector<GeneratedRow> rows;
  std::vector<at::Tensor> logits;   // per step [B, V]
  std::vector<std::string> pieces;  // per row, concatenated
};

GenRun Generate(TinyModel& m, GenerationOptions o, const Tokenizer* tok = nullptr,
             const std::vector<std::vector<int32_t>>& prompts = kPrompts) {
  Generator g(m.model, m.engine, tok, at::kCPU, o);
  GenRun run;
  run.pieces.resize(prompts.size());
  g.set_logits_observer([&](const at::Tensor& l) { run.logits.push_back(l.clone()); });
  auto rows =
      g.Generate(prompts, [&](int64_t r, int32_t, const std::string& p) { run.pieces[r] += p; });
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (rows.ok()) run.rows = *rows;
  return run;
}

TEST(Generation, CachedLogitsEqualTheFullForwardOfEachRowAlone) {
  for (const auto& [kv, tied] : std::vector<std::pair<int64_t, bool>>{{2, false}, {4, true}}) {
    SCOPED_TRACE(testing::Message() << "kv_heads " << kv << " tied " << tied);
    TinyModel m(kv, tied);
    GenerationOptions o;
    o.max_new_tokens = 8;
    const GenRun cached = Generate(m, o);
    o.use_cache = false;
    const GenRun uncached = Generate(m, o);
    ASSERT_EQ(cached.logits.size(), 8u);
    ASSERT_EQ(uncached.logits.size(), 8u);
    for (size_t r = 0; r < kPrompts.size(); ++r) {
      ASSERT_EQ(cached.rows[r].ids, uncached.rows[r].ids);
      EXPECT_EQ(cached.rows[r].stop_reason, "length");
      std::vector<int32_t> seq = kPrompts[r];
      for (size_t step = 0; step < 8; ++step) {
        const at::Tensor full = m.FullLogits(seq);
        const at::Tensor got = cached.logits[step][r];
        EXPECT_LE((got - full).abs().max().item<double>(), 1e-5) << "row " << r << " step " << step;
        EXPECT_LE((uncached.logits[step][r] - full).abs().max().item<double>(), 1e-5);
        // Greedy: the argmax of the full forward.
        EXPECT_EQ(cached.rows[r].ids[step], full.argmax().item<int64_t>());
        seq.push_back(cached.rows[r].ids[step]);
      }
    }
  }
}

TEST(Generation, SeededSamplingIsReproducibleAndTopK1IsGreedy) {
  TinyModel m(2, false);
  GenerationOptions o;
  o.max_new_tokens = 12;
  const GenRun greedy = Generate(m, o);
  o.temperature = 1.0;
  o.top_k = 1;
  const GenRun top1 = Generate(m, o);
  o.top_k = 0;
  o.top_p = 1e-4;
  const GenRun top_p = Generate(m, o);
  o.top_p = 0.9;
  o.top_k = 20;
  o.seed = 1;
  const GenRun a = Generate(m, o), b = Generate(m, o);
  o.seed = 2;
  const GenRun c = Generate(m, o);
  bool differ = false;
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    EXPECT_EQ(top1.rows[r].ids, greedy.rows[r].ids);
    EXPECT_EQ(top_p.rows[r].ids, greedy.rows[r].ids);
    EXPECT_EQ(a.rows[r].ids, b.rows[r].ids);
    differ = differ || a.rows[r].ids != c.rows[r].ids;
  }
  EXPECT_TRUE(differ) << "seeds 1 and 2 drew the same 36 tokens";
}

TEST(Generation, PickNextTokensKeepsOnlyTheTopKAndTopP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two, top-k 3 three.
  const at::Tensor logits =
      at::log(at::tensor({0.05f, 0.5f, 0.15f, 0.3f})).view({1, 4}).repeat({400, 1});
  at::Generator gen = at::detail::createCPUGenerator(3);
  GenerationOptions o;
  o.temperature = 1;
  o.top_p = 0.7;
  const at::Tensor p = PickNextTokens(logits, o, gen);
  EXPECT_TRUE(p.eq(1).logical_or(p.eq(3)).all().item<bool>());
  EXPECT_TRUE(p.eq(3).any().item<bool>());
  o.top_p = 1;
  o.top_k = 3;
  const at::Tensor k = PickNextTokens(logits, o, gen);
  EXPECT_FALSE(k.eq(0).any().item<bool>());
  EXPECT_TRUE(k.eq(2).any().item<bool>());
}

TEST(Generation, EosIdsEndTheRowsThatDrawThem) {
  TinyModel m(2, false);
  GenerationOptions o;
  o.max_new_tokens = 10;
  const GenRun free = Generate(m, o);
  const int32_t eos = free.rows[0].ids[2];
  o.eos_ids = {eos, 49};
  const GenRun run = Generate(m, o);
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    const auto& ids = free.rows[r].ids;
    size_t end = 0;
    while (end < ids.size() && ids[end] != eos && ids[end] != 49) ++end;
    const bool stopped = end < ids.size();
    SCOPED_TRACE(r);
    EXPECT_EQ(run.rows[r].stop_reason, stopped ? "eos" : "length");
    EXPECT_EQ(run.rows[r].ids,
              std::vector<int32_t>(ids.begin(), ids.begin() + (stopped ? end + 1 : ids.size())));
  }
  EXPECT_EQ(run.rows[0].stop_reason, "eos");
}

TEST(Generation, StopStringsCutTheTextOfTheirRows) {
  auto tok = Tokenizer::Load(LLAMAFLEET_GENERATION_TOKENIZER);
  ASSERT_TRUE(tok.ok()) << tok.status();
  TinyModel m(2, false);
  GenerationOptions o;
  o.max_new_tokens = 12;
  const GenRun free = Generate(m, o, tok->get());
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    EXPECT_EQ(free.pieces[r], free.rows[r].text);
    EXPECT_EQ(free.rows[r].text, (*tok)->Decode(free.rows[r].ids));
  }
  const std::string text = free.rows[1].text;
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(3, 2);
  o.stop = {stop};
  const GenRun run = Generate(m, o, tok->get());
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    SCOPED_TRACE(r);
    const std::string& whole = free.rows[r].text;
    const size_t at = whole.find(stop);
    EXPECT_EQ(run.rows[r].stop_reason, at == std::string::npos ? "length" : "stop");
    EXPECT_EQ(run.rows[r].text, at == std::string::npos ? whole : whole.substr(0, at));
    EXPECT_EQ(run.pieces[r], run.rows[r].text);
  }
  EXPECT_EQ(run.rows[1].stop_reason, "stop");
  EXPECT_EQ(run.rows[1].text, text.substr(0, text.find(stop)));
}

TEST(Generation, RefusesOversizePromptsAndBadOptions) {
  TinyModel m(2, false);
  GenerationOptions o;
  o.max_new_tokens = 10;
  Generator g(m.model, m.engine, nullptr, at::kCPU, o);
  auto r = g.Generate({{1, 2}, std::vector<int32_t>(60, 3)}, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "prompt 1: 60 prompt tokens")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "max_position_embeddings 64")) << r.status();
  r = g.Generate({{1, 50}}, nullptr);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "token id 50")) << r.status();
  for (auto bad : std::vector<std::function<void(GenerationOptions&)>>{
           [](GenerationOptions& x) { x.max_new_tokens = 0; },
           [](GenerationOptions& x) { x.max_new_tokens = kMaxNewTokens + 1; },
           [](GenerationOptions& x) { x.temperature = -1; },
           [](GenerationOptions& x) { x.top_p = 0; }, [](GenerationOptions& x) { x.top_k = -1; },
           [](GenerationOptions& x) { x.stop = {""}; }}) {
    GenerationOptions b;
    bad(b);
    EXPECT_FALSE(ValidateGenerationOptions(b).ok());
  }
}

TEST(Generation, CompleteUtf8Prefix) {
  EXPECT_EQ(CompleteUtf8Prefix("ab"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("\xE2\x82"), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("x\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

}  // namespace
}  // namespace llamafleet::trainer
