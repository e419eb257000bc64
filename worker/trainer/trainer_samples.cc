// eval.samples in the trainer (eval_samples.h): the prompts read at start, and the samples
// each evaluation makes on rank 0 from the model as it is at that step.
#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine.h"
#include "generate_command.h"
#include "lora.h"
#include "trainer.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

// MemAvailable of /proc/meminfo in bytes; the free pages where it cannot be read.
uint64_t AvailableHostBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib << 10;
  }
  return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

absl::Status Trainer::LoadSamples() {
  if (!opt_.samples.enabled()) return absl::OkStatus();
  const std::vector<EvalSetOptions> sets = EvalSetsOf(opt_);
  if (sets.empty()) {
    return absl::InvalidArgumentError(
        "eval.samples needs data.eval or data.eval_path (samples are made at each evaluation)");
  }
  // "messages" prompts need a template even when no data is CHAT: the model's (or
  // data.chat_template's), else such a record names what is missing.
  std::optional<ChatTemplate> chat = chat_template_;
  if (!chat && tokenizer_) {
    absl::StatusOr<std::optional<ChatTemplate>> t =
        MaybeResolveChatTemplate(DataFormat::kChat, opt_.chat_template, tokenizer_.get());
    if (t.ok()) chat = *std::move(t);
  }
  const PromptEncoding encoding{tokenizer_.get(), chat ? &*chat : nullptr};
  LF_ASSIGN_OR_RETURN(sample_prompts_,
                      LoadSamplePrompts(opt_.samples, sets.front().path, sets.front().format,
                                        encoding, config_.max_position_embeddings));
  const std::vector<int32_t> stop = tokenizer_ ? tokenizer_->stop_ids() : std::vector<int32_t>{};
  if (opt_.model_path.empty()) {
    sample_eos_ids_ = stop;
  } else {
    LF_ASSIGN_OR_RETURN(sample_eos_ids_, ModelEosIds(opt_.model_path, stop));
  }
  if (rank0_) {
    LogInfo(absl::StrFormat(
        "eval.samples: %d prompts, %d new tokens each, temperature %g, at every evaluation",
        sample_prompts_.size(), opt_.samples.max_new_tokens, opt_.samples.temperature));
  }
  return absl::OkStatus();
}

void Trainer::SampleAt(int64_t step) {
  if (sample_prompts_.empty()) return;  // alike on every rank
  const Clock::time_point start = Clock::now();
  // Rank 0 holds the gathered copy in fp32 on the host (twice while a CPU device copies
  // it): when its host lacks that memory, every rank skips this step (one all-reduce).
  uint64_t numel = 0;
  for (const UnitLayout& unit : MakeLayout(config_)) numel += static_cast<uint64_t>(unit.numel());
  const uint64_t need = numel * sizeof(float) * (device_.is_cpu() ? 2 : 1);
  const uint64_t available = rank0_ ? AvailableHostBytes() : 0;
  if (engine_->AnyRank(rank0_ && need > available)) {
    if (rank0_) {
      LogWarning(
          absl::StrFormat("eval.samples at step %d skipped: the full model's fp32 copy needs %.1f "
                          "GiB of host memory, %.1f GiB "
                          "are available",
                          step, need / 1073741824.0, available / 1073741824.0));
    }
    return;
  }
  // The full weights in the base layout (LoRA merged in): gathering a unit is collective,
  // rank 0 keeps them (fp32, on the host).
  std::vector<std::vector<at::Tensor>> params;
  for (size_t u = 0; u < layout_.size(); ++u) {
    std::vector<at::Tensor> unit = engine_->FullUnit(static_cast<int>(u));
    if (!rank0_) continue;
    params.push_back(lora_.enabled ? MergeUnit(lora_, full_layout_[u], unit) : std::move(unit));
  }
  if (rank0_) {
    const absl::Status s = CatchTorch("eval.samples", [&]() -> absl::Status {
      std::vector<UnitLayout> base = MakeLayout(config_);
      for (UnitLayout& unit : base) unit.frozen.assign(unit.param_names.size(), true);
      LocalEngine local(std::move(base), std::move(params), device_, compute_dtype_,
                        AdamWOptions{});
      LlamaModel model(config_, device_, compute_dtype_);
      model.set_training(false);
      LF_ASSIGN_OR_RETURN(std::vector<trainer_events::Sample> samples,
                          GenerateSamples(model, local, tokenizer_.get(), device_, sample_prompts_,
                                          opt_.samples, sample_eos_ids_, step, opt_.seed));
      int64_t tokens = 0;
      for (const trainer_events::Sample& sample : samples) {
        EmitJsonLine(trainer_events::ToLine(sample));
        tokens += sample.tokens;
      }
      ToTensorBoardText(step, "samples", SamplesMarkdown(samples));
      LogInfo(absl::StrFormat("eval.samples at step %d: %d samples, %d tokens in %.2f s", step,
                              samples.size(), tokens,
                              std::chrono::duration<double>(Clock::now() - start).count()));
      return absl::OkStatus();
    });
    params.clear();
    if (!s.ok()) LogWarning(absl::StrCat("eval.samples at step ", step, " skipped: ", s.message()));
  }
  // Every rank leaves together: the others wait here while rank 0 generates.
  (void)engine_->AnyRank(false);
}

}  // namespace llamafleet::trainer
