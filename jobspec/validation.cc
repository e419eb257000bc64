// The rules of a job spec (ValidateJobSpec) and of the other user-supplied request fields.

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/data_sources.h"
#include "jobspec/dependencies.h"
#include "jobspec/eval_samples.h"
#include "jobspec/field_violations.h"
#include "jobspec/job_kind.h"
#include "jobspec/jobspec.h"
#include "jobspec/memory_fit.h"
#include "jobspec/model_presets.h"
#include "jobspec/parallelism.h"
#include "jobspec/sweep.h"

namespace llamafleet {
namespace {

using jobspec_internal::Violations;

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }

bool AllNameChars(absl::string_view s) { return std::all_of(s.begin(), s.end(), IsNameChar); }

void CheckPath(Violations& v, absl::string_view field, const std::string& path) {
  if (path.size() > static_cast<size_t>(kMaxPathLength)) {
    v.Add(field, absl::StrCat("must be at most ", kMaxPathLength, " characters"));
  }
  if (path.find('\0') != std::string::npos) v.Add(field, "must not contain NUL");
}

template <typename T>
void AtLeast(Violations& v, absl::string_view field, T value, T min) {
  if (value < min) v.Add(field, absl::StrCat("must be >= ", min, " (got ", value, ")"));
}

// training.global_batch_size: a multiple of micro_batch_size x data-parallel ranks
// (nodes x gpus_per_node / tensor_parallel); grad_accum (derived by ApplyDefaults when
// unset) equal to the quotient.
void CheckGlobalBatch(const v1::JobSpec& spec, Violations& v) {
  const v1::TrainingSpec& t = spec.training();
  const int64_t global = t.global_batch_size();
  const int64_t micro = t.micro_batch_size();
  const int64_t nodes = spec.resources().nodes(), gpus = spec.resources().gpus_per_node();
  if (global < 1) {
    v.Add("training.global_batch_size", absl::StrCat("must be >= 1 (got ", global, ")"));
    return;
  }
  // Reported on their own fields.
  if (micro < 1 || nodes < 1 || !jobspec_internal::DataParallelWorldIsWhole(spec)) return;
  const int tp = TensorParallelOf(spec);
  const int64_t ranks = jobspec_internal::DataParallelRanks(spec, nodes);
  // How the divisor is named: the world, or with tensor parallelism its data-parallel part.
  const std::string ranks_name = tp == 1 ? "ranks" : "data-parallel ranks";
  if (global % (micro * ranks) != 0) {
    std::vector<int64_t> work;
    if (global % micro == 0) {
      for (int64_t w = 1; w <= global / micro; ++w) {
        if ((global / micro) % w == 0) work.push_back(w);
      }
    }
    const std::string how =
        tp == 1 ? absl::StrCat("nodes ", nodes, " x gpus_per_node ", gpus)
                : absl::StrCat("nodes ", nodes, " x gpus_per_node ", gpus, " / parallelism.tensor_parallel ", tp);
    const std::string sizes = tp == 1 ? "world sizes" : "data-parallel world sizes";
    v.Add("training.global_batch_size",
          absl::StrCat("(", global, ") must be a multiple of micro_batch_size (", micro, ") x ", ranks_name, " (",
                       ranks, " = ", how, "); ",
                       work.empty() ? absl::StrCat("no ", tp == 1 ? "world size" : "data-parallel world size",
                                                   " works with micro_batch_size ", micro)
                                    : absl::StrCat(sizes, " that work: ", absl::StrJoin(work, ", "))));
    return;
  }
  if (t.grad_accum() != global / (micro * ranks)) {
    v.Add("training.grad_accum", absl::StrCat("(", t.grad_accum(), ") must equal global_batch_size / (",
                                              "micro_batch_size x ", ranks_name, ") = ", global / (micro * ranks),
                                              ", or be left unset"));
  }
}
// labels and resources.node_labels: at most kMaxLabels, keys of name characters and '/'.
void CheckLabels(Violations& v, absl::string_view field,
                 const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    v.Add(field, absl::StrCat("must have at most ", kMaxLabels, " entries"));
  }
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > static_cast<size_t>(kMaxLabelKeyLength) ||
        !std::all_of(key.begin(), key.end(), [](char c) { return IsNameChar(c) || c == '/'; })) {
      v.Add(absl::StrCat(field, ".", key),
            "key must be 1..63 characters of letters, digits, '.', '_', '-' and '/'");
    }
    if (value.size() > static_cast<size_t>(kMaxLabelValueLength)) {
      v.Add(absl::StrCat(field, ".", key),
            absl::StrCat("value must be at most ", kMaxLabelValueLength, " characters"));
    }
  }
}

// name, queue, priority, labels.
void CheckIdentity(const v1::JobSpec& spec, Violations& v) {
  if (spec.name().empty()) {
    v.Add("name", "is required");
  } else if (spec.name().size() > static_cast<size_t>(kMaxNameLength)) {
    v.Add("name", absl::StrCat("must be at most ", kMaxNameLength, " characters (got ",
                               spec.name().size(), ")"));
  } else if (!AllNameChars(spec.name())) {
    v.Add("name", "may contain only letters, digits, '.', '_' and '-'");
  }
  if (spec.queue().empty() || spec.queue().size() > 63 || !AllNameChars(spec.queue())) {
    v.Add("queue", "must be 1..63 characters of letters, digits, '.', '_' and '-'");
  }
  if (spec.priority() < -1000 || spec.priority() > 1000) {
    v.Add("priority", absl::StrCat("must be in [-1000, 1000] (got ", spec.priority(), ")"));
  }
  CheckLabels(v, "labels", spec.labels());
}

// depends_on: the shape here; the references are resolved at submission
// (ResolveBatchDependencies).
void CheckDependencies(const v1::JobSpec& spec, Violations& v) {
  if (spec.depends_on_size() > kMaxDependencies) {
    v.Add("depends_on", absl::StrCat("must have at most ", kMaxDependencies, " entries (got ",
                                     spec.depends_on_size(), ")"));
  }
  for (int i = 0; i < spec.depends_on_size() && i < kMaxDependencies; ++i) {
    const v1::JobDependency& d = spec.depends_on(i);
    const std::string field = absl::StrCat("depends_on[", i, "]");
    if (d.job().empty() || d.job().size() > static_cast<size_t>(kMaxNameLength) || !AllNameChars(d.job())) {
      v.Add(absl::StrCat(field, ".job"),
            "must be a job id or the name of a job in the same batch (1..128 characters of letters, "
            "digits, '.', '_' and '-')");
    }
    if (d.on() != kDependsOnSucceeded && d.on() != kDependsOnFinished) {
      v.Add(absl::StrCat(field, ".on"), absl::StrCat("must be succeeded or finished (got \"", d.on(), "\")"));
    }
  }
}

// sweep: a job of a sweep (the coordinator expands submitted sweeps with ExpandSweep).
void CheckSweep(const v1::JobSpec& spec, Violations& v) {
  if (spec.has_sweep()) {
    const v1::SweepSpec& sw = spec.sweep();
    if (!sw.parameters().empty()) {
      v.Add("sweep.parameters", "stand for one job per point: submit the spec to the coordinator, "
                                "which creates them");
    }
    if (!sw.mode().empty() && sw.mode() != kSweepGrid && sw.mode() != kSweepZip) {
      v.Add("sweep.mode", absl::StrCat("must be grid or zip (got ", sw.mode(), ")"));
    }
    if (sw.has_point() && (sw.point().sweep().empty() || sw.point().index() < 0 ||
                           sw.point().index() >= sw.point().points())) {
      v.Add("sweep.point", "must name its sweep and an index below its number of points");
    }
  }
}

// model
void CheckModel(const v1::JobSpec& spec, Violations& v) {
  const v1::ModelSpec& m = spec.model();
  if (m.path().empty() == m.preset().empty()) {
    v.Add("model", "must set exactly one of model.path and model.preset");
  }
  const sched::ModelPreset* preset =
      m.preset().empty() ? nullptr : sched::FindModelPreset(m.preset());
  if (!m.preset().empty() && preset == nullptr) {
    v.Add("model.preset",
          absl::StrCat("'", m.preset(), "' is not one of ", sched::KnownPresetNames()));
  }
  CheckPath(v, "model.path", m.path());
  CheckPath(v, "model.tokenizer", m.tokenizer());
  if (!m.preset().empty() && m.tokenizer().empty() && DataNeedsTokenizer(spec)) {
    v.Add("model.tokenizer",
          "is required with model.preset unless every data file's format is TOKENS");
  }
}

// data.train: each source's path and weight.
void CheckTrainSources(const v1::DataSpec& d, Violations& v) {
  if (d.train_size() > kMaxTrainSources) {
    v.Add("data.train", absl::StrCat("must have at most ", kMaxTrainSources, " sources (got ",
                                     d.train_size(), ")"));
  }
  for (int i = 0; i < d.train_size(); ++i) {
    const v1::DataSource& s = d.train(i);
    const std::string at = absl::StrCat("data.train[", i, "]");
    if (s.path().empty()) v.Add(at + ".path", "is required");
    CheckPath(v, at + ".path", s.path());
    // Bounded so that the draw's cumulative weights stay exact enough to compare.
    if (s.has_weight() && !(s.weight() > 0 && s.weight() <= 1e6)) {
      v.Add(at + ".weight", absl::StrCat("must be > 0 and <= 1e6 (got ", s.weight(), ")"));
    }
  }
}

// data.eval: each set's name (a metric tag: unique, [A-Za-z0-9_-]) and path.
void CheckEvalSets(const v1::DataSpec& d, Violations& v) {
  if (d.eval_size() > kMaxEvalSets) {
    v.Add("data.eval",
          absl::StrCat("must have at most ", kMaxEvalSets, " sets (got ", d.eval_size(), ")"));
  }
  std::set<std::string> names;
  for (int i = 0; i < d.eval_size(); ++i) {
    const v1::EvalSet& s = d.eval(i);
    const std::string at = absl::StrCat("data.eval[", i, "]");
    const bool tag_chars = std::all_of(s.name().begin(), s.name().end(), [](char c) {
      return absl::ascii_isalnum(c) || c == '-' || c == '_';
    });
    if (s.name().empty()) {
      v.Add(at + ".name", "is required (the set's metric name)");
    } else if (s.name().size() > static_cast<size_t>(kMaxEvalSetNameLength) || !tag_chars) {
      v.Add(at + ".name",
            absl::StrCat("must be 1-", kMaxEvalSetNameLength, " of [A-Za-z0-9_-] (got '",
                         absl::CHexEscape(s.name().substr(0, kMaxEvalSetNameLength)), "')"));
    } else if (!names.insert(s.name()).second) {
      v.Add(at + ".name",
            absl::StrCat("'", s.name(), "' names an earlier set too (names must be unique)"));
    }
    if (s.path().empty()) v.Add(at + ".path", "is required");
    CheckPath(v, at + ".path", s.path());
  }
}

// data
void CheckData(const v1::JobSpec& spec, Violations& v) {
  const v1::DataSpec& d = spec.data();
  if (d.train_path().empty() && d.train_size() == 0 && !IsEvaluateJob(spec)) {
    v.Add("data.train_path", "is required (or data.train, a list of sources)");
  }
  if (!d.train_path().empty() && d.train_size() > 0) {
    v.Add(
        "data.train",
        "set only one of data.train_path and data.train (train_path is the one-source shorthand)");
  }
  if (!d.eval_path().empty() && d.eval_size() > 0) {
    v.Add("data.eval",
          "set only one of data.eval_path and data.eval (eval_path is the one-set shorthand)");
  }
  CheckPath(v, "data.train_path", d.train_path());
  CheckPath(v, "data.eval_path", d.eval_path());
  CheckTrainSources(d, v);
  CheckEvalSets(d, v);
  // The chat fields apply when any source or set is a chat one (a PREFERENCE record's
  // messages are rendered by the chat template too; its loss is always the answer's).
  auto chat_like = [](v1::DataFormat f) { return f == v1::CHAT || f == v1::PREFERENCE; };
  bool chat = d.format() == v1::CHAT, templated = chat_like(d.format());
  for (const v1::DataSource& s : d.train()) {
    chat = chat || s.format() == v1::CHAT;
    templated = templated || chat_like(s.format());
  }
  for (const v1::EvalSet& s : d.eval()) {
    chat = chat || s.format() == v1::CHAT;
    templated = templated || chat_like(s.format());
  }
  if (!chat && d.train_on() != v1::TRAIN_ON_UNSPECIFIED && d.train_on() != v1::ASSISTANT) {
    v.Add("data.train_on", "applies only to data.format CHAT");
  }
  if (!templated) {
    if (!d.chat_template().empty())
      v.Add("data.chat_template", "applies only to data.format CHAT or PREFERENCE");
  } else if (const std::string& t = d.chat_template(); !t.empty() && t != "model" &&
                                                       t != "llama2" && t != "llama3" &&
                                                       t != "chatml" && t != "mistral") {
    v.Add("data.chat_template",
          absl::StrCat("'", t.substr(0, 64),
                       "' is not one of model, llama2, llama3, chatml, mistral"));
  }
}

// training.objective and training.dpo: DPO trains a LoRA adapter on preference pairs, one
// pair's rows per sequence (PADDING), with the adapter switched off as its reference.
void CheckObjective(const v1::JobSpec& spec, Violations& v) {
  const v1::TrainingSpec& t = spec.training();
  const std::string& objective = t.objective();
  if (!objective.empty() && objective != "sft" && objective != "dpo") {
    v.Add("training.objective",
          absl::StrCat("'", objective.substr(0, 64), "' is not one of sft, dpo"));
    return;
  }
  const v1::DataSpec& d = spec.data();
  bool any_preference = d.format() == v1::PREFERENCE, all_preference = d.format() == v1::PREFERENCE;
  if (d.train_size() > 0) {
    all_preference = true;
    for (const v1::DataSource& s : d.train()) {
      any_preference = any_preference || s.format() == v1::PREFERENCE;
      all_preference = all_preference && s.format() == v1::PREFERENCE;
    }
  }
  for (const v1::EvalSet& s : d.eval())
    any_preference = any_preference || s.format() == v1::PREFERENCE;
  if (objective != "dpo") {
    if (t.has_dpo()) v.Add("training.dpo", "applies only to training.objective dpo");
    if (any_preference) v.Add("data.format", "PREFERENCE data needs training.objective: dpo");
    return;
  }
  if (!all_preference)
    v.Add("data.format", "training.objective dpo needs PREFERENCE data for every training source");
  if (!d.eval_path().empty() || d.eval_size() > 0) {
    v.Add("data.eval_path", "evaluation is not supported with training.objective dpo");
  }
  if (t.batching() == v1::PACKING) {
    v.Add("training.batching",
          "training.objective dpo needs PADDING (each answer is one row of its own)");
  }
  if (spec.peft().method() != "lora") {
    v.Add("peft.method",
          "training.objective dpo needs peft.method lora (its reference is the base with the "
          "adapter switched off; full finetuning would need a frozen copy, not supported)");
  } else if (spec.peft().has_dropout() && spec.peft().dropout() != 0) {
    v.Add("peft.dropout",
          "must be 0 with training.objective dpo (its gradient is taken in a second forward pass)");
  }
  const v1::DpoSpec& dpo = t.dpo();
  if (dpo.has_beta() && !(dpo.beta() > 0 && dpo.beta() <= 100)) {
    v.Add("training.dpo.beta", absl::StrCat("must be in (0, 100] (got ", dpo.beta(), ")"));
  }
  if (!(dpo.label_smoothing() >= 0 && dpo.label_smoothing() < 0.5)) {
    v.Add("training.dpo.label_smoothing",
          absl::StrCat("must be in [0, 0.5) (got ", dpo.label_smoothing(), ")"));
  }
}

// training.micro_batch_size and training.seq_len: the rows every kind of job runs.
void CheckRows(const v1::JobSpec& spec, Violations& v) {
  const v1::ModelSpec& m = spec.model();
  const sched::ModelPreset* preset = m.preset().empty() ? nullptr : sched::FindModelPreset(m.preset());
  const v1::TrainingSpec& t = spec.training();
  AtLeast(v, "training.micro_batch_size", t.micro_batch_size(), 1);
  AtLeast(v, "training.seq_len", t.seq_len(), 2);
  if (t.seq_len() > 1 << 17) {
    v.Add("training.seq_len", absl::StrCat("must be <= 131072 (got ", t.seq_len(), ")"));
  } else if (preset != nullptr && t.seq_len() > preset->max_positions) {
    // The trainer would cap it and fail later on data sized for the longer rows.
    v.Add("training.seq_len",
          absl::StrCat("must be <= ", preset->max_positions, ", preset ", m.preset(),
                       "'s max_position_embeddings (got ", t.seq_len(), ")"));
  }
}

// training: what a training run reads besides its rows.
void CheckTraining(const v1::JobSpec& spec, Violations& v) {
  const v1::TrainingSpec& t = spec.training();
  if (t.has_epochs()) AtLeast(v, "training.epochs", t.epochs(), 1);
  AtLeast<int64_t>(v, "training.max_steps", t.max_steps(), 0);
  if (t.has_global_batch_size()) {
    CheckGlobalBatch(spec, v);
  } else {
    AtLeast(v, "training.grad_accum", t.grad_accum(), 1);
  }
  if (!(t.lr() > 0)) v.Add("training.lr", absl::StrCat("must be > 0 (got ", t.lr(), ")"));
  if (t.lr() > 1) v.Add("training.lr", absl::StrCat("must be <= 1 (got ", t.lr(), ")"));
  if (t.betas_size() != 2) {
    v.Add("training.betas", absl::StrCat("must have 2 values (got ", t.betas_size(), ")"));
  } else {
    for (int i = 0; i < 2; ++i) {
      if (!(t.betas(i) >= 0 && t.betas(i) < 1)) {
        v.Add(absl::StrCat("training.betas[", i, "]"),
              absl::StrCat("must be in [0, 1) (got ", t.betas(i), ")"));
      }
    }
  }
  if (!(t.eps() > 0)) v.Add("training.eps", absl::StrCat("must be > 0 (got ", t.eps(), ")"));
  AtLeast(v, "training.weight_decay", t.weight_decay(), 0.0);
  AtLeast(v, "training.grad_clip", t.grad_clip(), 0.0);
  AtLeast(v, "training.log_every", t.log_every(), 1);
  AtLeast<int64_t>(v, "training.eval_every_steps", t.eval_every_steps(), 0);
  if (t.eval_every_steps() > 0 && !HasEvalData(spec)) {
    v.Add("training.eval_every_steps",
          "needs data.eval_path or data.eval (the data to evaluate on)");
  }
}

// training.early_stopping and training.lr_schedule.
void CheckTrainingSchedules(const v1::JobSpec& spec, Violations& v) {
  const v1::TrainingSpec& t = spec.training();
  if (t.has_early_stopping()) {
    const v1::EarlyStopping& es = t.early_stopping();
    AtLeast(v, "training.early_stopping.patience", es.patience(), 0);
    if (!(es.min_delta() >= 0 && es.min_delta() < 1e6)) {
      v.Add("training.early_stopping.min_delta", absl::StrCat("must be in [0, 1e6) (got ", es.min_delta(), ")"));
    }
    if (es.patience() > 0 && t.eval_every_steps() <= 0) {
      v.Add("training.early_stopping", "needs training.eval_every_steps (evaluations to compare)");
    }
  }
  const v1::LrSchedule& s = t.lr_schedule();
  if (s.has_gamma() && !(s.gamma() > 0 && s.gamma() <= 1)) {
    v.Add("training.lr_schedule.gamma", absl::StrCat("must be in (0, 1] (got ", s.gamma(), ")"));
  }
  AtLeast<int64_t>(v, "training.lr_schedule.warmup_steps", s.warmup_steps(), 0);
  if (!(s.min_lr_ratio() >= 0 && s.min_lr_ratio() <= 1)) {
    v.Add("training.lr_schedule.min_lr_ratio",
          absl::StrCat("must be in [0, 1] (got ", s.min_lr_ratio(), ")"));
  }
}

// resources
void CheckResources(const v1::JobSpec& spec, Violations& v) {
  const v1::ResourceSpec& res = spec.resources();
  AtLeast(v, "resources.nodes", res.nodes(), 1);
  if (res.nodes() > 4096) {
    v.Add("resources.nodes", absl::StrCat("must be <= 4096 (got ", res.nodes(), ")"));
  }
  AtLeast(v, "resources.gpus_per_node", res.gpus_per_node(), 1);
  if (res.gpus_per_node() > 64) {
    v.Add("resources.gpus_per_node", absl::StrCat("must be <= 64 (got ", res.gpus_per_node(), ")"));
  }
  AtLeast(v, "resources.efa_per_node", res.efa_per_node(), 0);
  if (!res.instance_type().empty() &&
      (res.instance_type().size() > 63 || !AllNameChars(res.instance_type()))) {
    v.Add("resources.instance_type", "must be 1..63 characters of letters, digits, '.', '_', '-'");
  }
  CheckLabels(v, "resources.node_labels", res.node_labels());
  AtLeast(v, "resources.min_nodes", res.min_nodes(), 0);
  AtLeast(v, "resources.max_nodes", res.max_nodes(), 0);
  AtLeast<int64_t>(v, "resources.elastic_cooldown_seconds", res.elastic_cooldown_seconds(), 0);
  if (res.min_nodes() > 0 && res.min_nodes() > res.nodes()) {
    v.Add("resources.min_nodes", absl::StrCat("(", res.min_nodes(), ") must be <= resources.nodes (",
                                              res.nodes(), ")"));
  }
  if (res.max_nodes() > 0 && res.max_nodes() < res.nodes()) {
    v.Add("resources.max_nodes", absl::StrCat("(", res.max_nodes(), ") must be >= resources.nodes (",
                                              res.nodes(), ")"));
  } else if (res.max_nodes() > res.nodes()) {
    v.Add("resources.max_nodes",
          absl::StrCat("(", res.max_nodes(), ") above resources.nodes (", res.nodes(),
                       ") is not supported: an elastic gang runs on min_nodes..nodes; set max_nodes to ",
                       res.nodes(), " or leave it unset"));
  }
}

// resources.min_nodes below nodes: an elastic gang, whose result must not depend on how
// many nodes it gets.
void CheckElastic(const v1::JobSpec& spec, Violations& v) {
  const v1::ResourceSpec& res = spec.resources();
  if (res.min_nodes() > 0 && res.min_nodes() < res.nodes()) {
    // Elastic: the result must not depend on how many nodes the gang gets.
    if (!spec.training().has_global_batch_size()) {
      v.Add("training.global_batch_size", absl::StrCat("is required for an elastic job (resources.min_nodes ",
                                                       res.min_nodes(), " < nodes ", res.nodes(), ")"));
    } else if (spec.training().global_batch_size() > 0 && spec.training().micro_batch_size() > 0 &&
               jobspec_internal::DataParallelWorldIsWhole(spec)) {
      // Over the data-parallel ranks each node count leaves (gpus_per_node / tensor_parallel
      // per node).
      const int64_t global = spec.training().global_batch_size();
      std::vector<std::string> bad;
      for (int k = std::max(1, res.min_nodes()); k < res.nodes(); ++k) {
        const int64_t per = int64_t{spec.training().micro_batch_size()} * jobspec_internal::DataParallelRanks(spec, k);
        if (global % per != 0) bad.push_back(absl::StrCat(k));
      }
      if (!bad.empty()) {
        v.Add("training.global_batch_size",
              absl::StrCat("(", global, ") must be a multiple of micro_batch_size x gpus_per_node",
                           TensorParallelOf(spec) == 1 ? "" : " / parallelism.tensor_parallel",
                           " x nodes for every node count the elastic gang may run on; it is not for ",
                           absl::StrJoin(bad, ", "), " nodes"));
      }
    }
  }
}

// fsdp
void CheckFsdp(const v1::JobSpec& spec, Violations& v) {
  const v1::FsdpSpec& f = spec.fsdp();
  const v1::ResourceSpec& res = spec.resources();
  const int64_t world_size = static_cast<int64_t>(res.nodes()) * res.gpus_per_node();
  if (f.sharding() == v1::HYBRID_SHARD) {
    const int g = f.hybrid_shard_group_size();
    if (g < 1) {
      v.Add("fsdp.hybrid_shard_group_size", absl::StrCat("must be >= 1 (got ", g, ")"));
    } else if (world_size > 0 && world_size % g != 0) {
      v.Add("fsdp.hybrid_shard_group_size",
            absl::StrCat("(", g, ") must divide the world size (", world_size, ")"));
    }
  } else if (f.hybrid_shard_group_size() != 0) {
    v.Add("fsdp.hybrid_shard_group_size", "is only valid with sharding HYBRID_SHARD");
  }
  AtLeast(v, "fsdp.max_inflight_all_gathers", f.max_inflight_all_gathers(), 1);
  if (f.activation_checkpointing_mode() == v1::AC_NONE && f.activation_checkpointing()) {
    v.Add("fsdp.activation_checkpointing_mode", "AC_NONE contradicts fsdp.activation_checkpointing true");
  }
  if (f.mixed_precision() == v1::FP16 && f.reduce_precision() == v1::BF16) {
    v.Add("fsdp.reduce_precision", "BF16 cannot be combined with FP16 compute");
  }
}

// checkpoint
void CheckCheckpoint(const v1::JobSpec& spec, Violations& v) {
  const v1::CheckpointSpec& c = spec.checkpoint();
  CheckPath(v, "checkpoint.dir", c.dir());
  AtLeast<int64_t>(v, "checkpoint.every_steps", c.every_steps(), 0);
  AtLeast(v, "checkpoint.keep_last", c.keep_last(), 0);
  CheckPath(v, "checkpoint.resume", c.resume());
}

// run_policy
void CheckRunPolicy(const v1::JobSpec& spec, Violations& v) {
  const v1::RunPolicy& p = spec.run_policy();
  AtLeast(v, "run_policy.max_restarts", p.max_restarts(), 0);
  if (p.max_restarts() > 1000) {
    v.Add("run_policy.max_restarts", absl::StrCat("must be <= 1000 (got ", p.max_restarts(), ")"));
  }
  AtLeast<int64_t>(v, "run_policy.restart_backoff_seconds", p.restart_backoff_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.active_deadline_seconds", p.active_deadline_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.ttl_after_finished_seconds", p.ttl_after_finished_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.stall_timeout_seconds", p.stall_timeout_seconds(), 1);
}

// output
void CheckOutput(const v1::JobSpec& spec, Violations& v) {
  CheckPath(v, "output.export_dir", spec.output().export_dir());
  AtLeast(v, "output.max_shard_size_mb", spec.output().max_shard_size_mb(), 1);
  if (spec.output().export_dtype() == v1::FP16 || spec.output().export_dtype() == v1::BF16 ||
      spec.output().export_dtype() == v1::FP32) {
  } else {
    v.Add("output.export_dtype", "must be FP32, BF16 or FP16");
  }
  if (spec.output().has_gguf()) {
    const v1::GgufSpec::Type dtype = spec.output().gguf().dtype();
    if (dtype == v1::GgufSpec::TYPE_UNSPECIFIED) {
      v.Add("output.gguf.dtype", "is required: f16, bf16 or q8_0");
    } else if (!v1::GgufSpec::Type_IsValid(dtype)) {
      v.Add("output.gguf.dtype", "must be F16, BF16 or Q8_0");
    }
    if (spec.output().export_dir().empty()) v.Add("output.gguf", "needs output.export_dir (the GGUF is written there)");
    if (!spec.model().preset().empty() && spec.model().tokenizer().empty() &&
        spec.data().format() == v1::TOKENS) {
      v.Add("output.gguf", "needs a tokenizer (model.tokenizer): a GGUF carries the vocabulary");
    }
  }
}

// peft
void CheckPeft(const v1::JobSpec& spec, Violations& v) {
  const v1::PeftSpec& peft = spec.peft();
  // qlora is lora with the targeted base weights NF4-quantized: the same fields apply.
  const bool lora = peft.method() == "lora" || peft.method() == "qlora";
  if (!peft.method().empty() && !lora) {
    v.Add("peft.method", "must be \"lora\" or \"qlora\" (or absent for full finetuning)");
  }
  if (!lora && (peft.has_r() || peft.has_alpha() || peft.has_dropout() || peft.target_modules_size() > 0 ||
                !peft.adapter_path().empty())) {
    v.Add("peft.method", "must be \"lora\" or \"qlora\" when other peft fields are set");
  }
  if (lora) {
    if (peft.has_r() && (peft.r() < 1 || peft.r() > 4096)) {
      v.Add("peft.r", absl::StrCat("must be in [1, 4096] (got ", peft.r(), ")"));
    }
    if (peft.has_alpha() && !(peft.alpha() > 0 && peft.alpha() < 1e6)) {
      v.Add("peft.alpha", absl::StrCat("must be in (0, 1e6) (got ", peft.alpha(), ")"));
    }
    if (peft.has_dropout() && !(peft.dropout() >= 0 && peft.dropout() < 1)) {
      v.Add("peft.dropout", absl::StrCat("must be in [0, 1) (got ", peft.dropout(), ")"));
    }
    static const std::set<std::string> kModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};
    std::set<std::string> seen;
    for (int i = 0; i < peft.target_modules_size(); ++i) {
      const std::string& m = peft.target_modules(i);
      const std::string field = absl::StrCat("peft.target_modules[", i, "]");
      if (!kModules.count(m)) {
        v.Add(field, absl::StrCat("unknown module \"", m.substr(0, 64),
                                  "\" (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"));
      } else if (!seen.insert(m).second) {
        v.Add(field, absl::StrCat("\"", m, "\" is listed twice"));
      }
    }
    CheckPath(v, "peft.adapter_path", peft.adapter_path());
  }
}

// output.export best and output.merge: what they need from the rest of the spec.
void CheckExport(const v1::JobSpec& spec, Violations& v) {
  const bool lora = spec.peft().method() == "lora" || spec.peft().method() == "qlora";
  if (spec.output().export_() == v1::BEST) {
    if (spec.output().export_dir().empty()) v.Add("output.export", "best needs output.export_dir");
    if (spec.training().eval_every_steps() <= 0) {
      v.Add("output.export", "best needs training.eval_every_steps (evaluations to choose from)");
    }
  }
  if (spec.output().merge() && !lora) v.Add("output.merge", "needs peft.method: lora (or qlora)");
  if (spec.output().merge() && spec.output().export_dir().empty()) v.Add("output.merge", "needs output.export_dir");
  if (spec.output().has_gguf() && lora && !spec.output().merge()) {
    v.Add("output.gguf", "with peft needs output.merge: true (the GGUF holds the merged model, in <export_dir>/merged)");
  }
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec, absl::string_view path_prefix) {
  Violations v(path_prefix);
  // In the order of the spec's sections: a caller sees the violations in that order.
  // An evaluation job refuses the training-only fields (CheckJobKind), so their rules
  // are checked for training jobs only.
  const bool train = !IsEvaluateJob(spec);
  CheckIdentity(spec, v);
  jobspec_internal::CheckJobKind(spec, v);
  CheckDependencies(spec, v);
  CheckSweep(spec, v);
  CheckModel(spec, v);
  CheckData(spec, v);
  CheckRows(spec, v);
  if (train) {
    CheckTraining(spec, v);
    CheckObjective(spec, v);
    CheckTrainingSchedules(spec, v);
  }
  CheckResources(spec, v);
  if (train) CheckElastic(spec, v);
  CheckFsdp(spec, v);
  // parallelism (after fsdp: a tensor-parallel group never crosses a shard group)
  jobspec_internal::CheckTensorParallel(spec, v);
  CheckCheckpoint(spec, v);
  CheckRunPolicy(spec, v);
  if (train) CheckOutput(spec, v);
  CheckPeft(spec, v);
  if (train) CheckExport(spec, v);
  jobspec_internal::CheckEvalSamples(spec, v);
  // The named instance type: enough GPUs, and GPUs that hold the memory estimate (checked
  // last, on an otherwise valid spec, so the estimate reads sane values).
  if (v.empty() && !spec.resources().instance_type().empty()) {
    jobspec_internal::CheckInstanceFit(spec, v);
  }
  return v.ToStatus();
}

absl::Status ValidateIdempotencyKey(absl::string_view key, absl::string_view path) {
  Violations v("");
  if (key.size() > static_cast<size_t>(kMaxIdempotencyKeyLength)) {
    v.Add(path, absl::StrCat("must be at most ", kMaxIdempotencyKeyLength, " characters"));
  } else if (!std::all_of(key.begin(), key.end(),
                          [](char c) { return absl::ascii_isprint(static_cast<unsigned char>(c)); })) {
    v.Add(path, "must be printable ASCII");
  }
  return v.ToStatus();
}

}  // namespace llamafleet
