// JobSpec.kind: its rules and an evaluation job's defaults (jobspec/job_kind.h).

#include "jobspec/job_kind.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "jobspec/data_sources.h"

namespace llamafleet {

bool IsEvaluateJob(const v1::JobSpec& spec) { return spec.kind() == kJobKindEvaluate; }

namespace jobspec_internal {
namespace {

constexpr char kOnlyTraining[] = "applies only to kind train (an evaluation job does not train)";

// The training block's fields that only a training run reads, each refused when set.
void CheckTrainingFieldsUnset(const v1::TrainingSpec& t, Violations& v) {
  const std::pair<const char*, bool> fields[] = {
      {"training.epochs", t.has_epochs()},
      {"training.max_steps", t.max_steps() != 0},
      {"training.grad_accum", t.has_grad_accum()},
      {"training.global_batch_size", t.has_global_batch_size()},
      {"training.optimizer", t.optimizer() != v1::OPTIMIZER_UNSPECIFIED},
      {"training.lr", t.has_lr()},
      {"training.betas", t.betas_size() > 0},
      {"training.eps", t.has_eps()},
      {"training.weight_decay", t.weight_decay() != 0},
      {"training.lr_schedule", t.has_lr_schedule()},
      {"training.grad_clip", t.grad_clip() != 0},
      {"training.eval_every_steps", t.eval_every_steps() != 0},
      {"training.early_stopping", t.has_early_stopping()},
      {"training.objective", !t.objective().empty()},
      {"training.dpo", t.has_dpo()},
  };
  for (const auto& [field, set] : fields) {
    if (set) v.Add(field, kOnlyTraining);
  }
}

}  // namespace

void CheckJobKind(const v1::JobSpec& spec, Violations& v) {
  const std::string& kind = spec.kind();
  if (!kind.empty() && kind != kJobKindTrain && kind != kJobKindEvaluate) {
    v.Add("kind", absl::StrCat("'", absl::CHexEscape(kind.substr(0, 64)),
                               "' is not one of train, evaluate"));
    return;
  }
  if (!IsEvaluateJob(spec)) return;
  if (spec.model().path().empty()) {
    v.Add("model.path",
          "is required with kind evaluate (the model directory to score: a job's export or any "
          "HF-format model)");
  }
  const v1::DataSpec& d = spec.data();
  if (!d.train_path().empty()) v.Add("data.train_path", kOnlyTraining);
  if (d.train_size() > 0) v.Add("data.train", kOnlyTraining);
  if (!HasEvalData(spec)) {
    v.Add("data.eval", "is required with kind evaluate (or data.eval_path): the sets to score");
  }
  CheckTrainingFieldsUnset(spec.training(), v);
  // checkpoint.dir stays allowed: the coordinator gives every attempt one, and an
  // evaluation's TensorBoard events go there.
  const v1::CheckpointSpec& c = spec.checkpoint();
  const v1::OutputSpec& o = spec.output();
  const std::pair<const char*, bool> fields[] = {
      {"checkpoint.every_steps", c.every_steps() != 0},
      {"checkpoint.keep_last", c.keep_last() != 0},
      {"checkpoint.resume", !c.resume().empty()},
      {"checkpoint.async", c.has_async()},
      {"output.export_dir", !o.export_dir().empty()},
      {"output.export_dtype", o.export_dtype() != v1::PRECISION_UNSPECIFIED},
      {"output.max_shard_size_mb", o.has_max_shard_size_mb()},
      {"output.merge", o.merge()},
      {"output.export", o.export_() != v1::EXPORT_CHOICE_UNSPECIFIED},
      {"output.gguf", o.has_gguf()},
  };
  for (const auto& [field, set] : fields) {
    if (set) v.Add(field, kOnlyTraining);
  }
  const std::string& method = spec.peft().method();
  if ((method == "lora" || method == "qlora") && spec.peft().adapter_path().empty()) {
    v.Add("peft.adapter_path",
          "is required with kind evaluate and peft (the trained adapter to score; without one "
          "the model is scored as it is, so leave peft out)");
  }
}

void ApplyEvaluateDefaults(v1::JobSpec* spec) {
  v1::TrainingSpec* t = spec->mutable_training();
  if (!t->has_micro_batch_size()) t->set_micro_batch_size(4);
  if (!t->has_seq_len()) t->set_seq_len(4096);
  if (t->batching() == v1::BATCHING_UNSPECIFIED) t->set_batching(v1::PACKING);
  if (!t->has_seed()) t->set_seed(42);
  if (!t->has_log_every()) t->set_log_every(10);
}

}  // namespace jobspec_internal
}  // namespace llamafleet
