#include "clients/cli/spec_lines.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/output.h"  // FormatCount
#include "jobspec/data_sources.h"
#include "jobspec/jobspec.h"
#include "jobspec/memory_estimate.h"
#include "jobspec/model_presets.h"

namespace llamafleet::cli {

std::string MemoryEstimateLine(const v1::MemoryEstimate& e, Device device) {
  auto gib = [](int64_t b) {
    return absl::StrFormat("%.1f GiB", static_cast<double>(b) / (1 << 30));
  };
  return absl::StrCat(
      gib(e.total_bytes()), device == Device::kCpu ? " per rank on " : " per GPU on ",
      e.world_size(), e.world_size() == 1 ? " rank" : " ranks",
      " (peak early in backward): parameters ", gib(e.parameters_bytes()), ", gradients ",
      gib(e.gradients_bytes()), ", optimizer state ", gib(e.optimizer_state_bytes()),
      ", gathered parameters ", gib(e.gathered_params_bytes()), ", activations ",
      gib(e.activations_bytes()), ", communication ", gib(e.communication_bytes()), ", workspace ",
      gib(e.workspace_bytes()),
      e.checkpoint_staging_bytes() > 0
          ? absl::StrCat("; host memory for checkpoint staging ", gib(e.checkpoint_staging_bytes()))
          : "");
}

std::string StepTimeLine(const v1::StepTimeEstimate& e) {
  auto money = [](double x) { return FormatCost(x); };
  std::string out = absl::StrFormat(
      "%.2f s per step on %s (%s): %.0f tokens/s, MFU %.1f%% (compute %.2f s, exposed "
      "communication %.2f s); %.1f GPU-hours per 1,000 steps",
      e.step_seconds(), e.instance_type(), e.gpu(), e.tokens_per_second(), 100 * e.mfu(),
      e.compute_seconds(), e.exposed_communication_seconds(), e.gpu_hours_per_1000_steps());
  if (e.has_cost_per_1000_steps())
    absl::StrAppend(&out, " costing ", money(e.cost_per_1000_steps()));
  if (e.total_steps() > 0) {
    absl::StrAppend(&out, absl::StrFormat("; the job's %d steps: %.1f GPU-hours", e.total_steps(),
                                          e.gpu_hours()));
    if (e.has_cost()) absl::StrAppend(&out, " costing ", money(e.cost()));
  } else {
    absl::StrAppend(&out, "; whole job: steps set by epochs, unknown before the data is read");
  }
  if (!e.has_cost_per_1000_steps())
    absl::StrAppend(&out, " (no price for ", e.instance_type(), " in the coordinator's pricing)");
  return out;
}

namespace {

// For a preset the trainer sizes by its tokenizer: which vocabulary the coordinator's count
// of `parameters` holds (the tokenizer's when it read it, else the preset table's), solved
// from the count, as ", counted with ..."; "" for any other model.
std::string VocabularyCounted(const v1::JobSpec& spec, int64_t parameters) {
  const sched::ModelPreset* preset = sched::FindModelPreset(spec.model().preset());
  std::optional<sched::ModelShape> shape = sched::PresetShape(spec.model().preset());
  if (preset == nullptr || !shape || !preset->takes_tokenizer_vocab ||
      !spec.model().path().empty() || !DataNeedsTokenizer(spec)) {
    return "";
  }
  shape->vocab = 0;
  const int64_t per_piece = shape->hidden * (shape->tied_embeddings ? 1 : 2);
  const int64_t vocab = (parameters - shape->Parameters()) / per_piece;
  if (vocab != preset->vocab) {
    return absl::StrCat(", counted with the tokenizer's ", FormatCount(vocab), "-piece vocabulary");
  }
  return absl::StrCat(", counted with the preset's ", FormatCount(vocab),
                      "-piece vocabulary (the trainer uses the tokenizer's, which the coordinator "
                      "did not read)");
}

}  // namespace

std::string FinetuningLine(const v1::Job& job) {
  auto count = [](int64_t n) {
    return n >= 1000000000 ? absl::StrFormat("%.2fB", n / 1e9)
           : n >= 1000000  ? absl::StrFormat("%.1fM", n / 1e6)
                           : absl::StrCat(n);
  };
  const v1::PeftSpec& peft = job.spec().peft();
  const v1::MemoryEstimate& e = job.memory_estimate();
  std::string out = "full";
  if (peft.method() == "lora" || peft.method() == "qlora") {
    const std::string method = peft.method() == "qlora" ? "QLoRA (NF4 base)" : "LoRA";
    out = peft.adapter_path().empty() ? method : absl::StrCat(method, " from ", peft.adapter_path());
    if (peft.has_r()) absl::StrAppend(&out, " r ", peft.r());
    if (peft.has_alpha()) absl::StrAppend(&out, " alpha ", peft.alpha());
    if (peft.target_modules_size() > 0)
      absl::StrAppend(&out, " on ", absl::StrJoin(peft.target_modules(), ", "));
  }
  if (e.parameters() > 0) {
    absl::StrAppend(&out, ": ", count(e.trainable_parameters()), " trainable of ",
                    count(e.parameters()),
                    absl::StrFormat(" parameters (%.3g%%)",
                                    100.0 * static_cast<double>(e.trainable_parameters()) /
                                        static_cast<double>(e.parameters())));
    absl::StrAppend(&out, VocabularyCounted(job.spec(), e.parameters()));
  }
  return out;
}

std::string ParallelismLine(const v1::JobSpec& spec) {
  const int tp = TensorParallelOf(spec);
  if (tp <= 1) return "";
  const int64_t nodes = std::max(1, spec.resources().nodes()),
                gpus = std::max(1, spec.resources().gpus_per_node());
  return absl::StrCat("tensor parallel ", tp, " x data parallel ", nodes * gpus / tp, " (",
                      nodes * gpus, nodes * gpus == 1 ? " rank" : " ranks", ")");
}

std::string DataLine(const v1::JobSpec& spec) {
  const std::vector<TrainSource> train = TrainSourcesOf(spec);
  const std::vector<EvalSource> eval = EvalSetsOf(spec);
  if (spec.data().train_size() == 0 && spec.data().eval_size() == 0) return "";
  double total = 0;
  for (const TrainSource& s : train) total += s.weight;
  std::vector<std::string> parts;
  for (const TrainSource& s : train) {
    parts.push_back(absl::StrFormat("%s %.3g%%", s.path, total > 0 ? 100 * s.weight / total : 0));
  }
  std::string out =
      train.empty() ? ""
                    : absl::StrCat(train.size(), train.size() == 1 ? " source: " : " sources: ",
                                   absl::StrJoin(parts, ", "));
  if (!eval.empty()) {
    if (!out.empty()) out += "; ";
    std::vector<std::string> names;
    for (const EvalSource& s : eval) names.push_back(s.name);
    absl::StrAppend(&out, "eval ", eval.size() == 1 ? "set " : "sets ",
                    absl::StrJoin(names, ", "),
                    eval.size() > 1 ? " (the first decides early stopping and export: best)" : "");
  }
  return out;
}

}  // namespace llamafleet::cli
