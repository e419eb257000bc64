#include "clients/jobspec/jobspec.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/eventhandler.h"
#include "scheduler/memory_estimate.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string JoinPath(const std::string& path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

// Levenshtein distance, for "did you mean" hints on unknown fields.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string UnknownFieldMessage(const Descriptor* d, const std::string& key) {
  std::string best;
  size_t best_distance = 3;
  for (int i = 0; i < d->field_count(); ++i) {
    size_t dist = EditDistance(key, d->field(i)->name());
    if (dist < best_distance) {
      best_distance = dist;
      best = d->field(i)->name();
    }
  }
  return best.empty() ? "unknown field" : absl::StrCat("unknown field (did you mean ", best, "?)");
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "null";
    default: return absl::StrCat("'", node.Scalar(), "'");
  }
}

// Sets one scalar (or appends to a repeated field) from a YAML scalar node.
void SetScalar(const YAML::Node& node, const std::string& path, const FieldDescriptor* field,
               Message* message, std::vector<std::string>* errors) {
  const Reflection* r = message->GetReflection();
  const bool repeated = field->is_repeated();
  if (!node.IsScalar()) {
    errors->push_back(absl::StrCat(path, ": expected a scalar value, got ", Describe(node)));
    return;
  }
  const std::string& text = node.Scalar();
  auto bad = [&](absl::string_view what) {
    errors->push_back(absl::StrCat(path, ": expected ", what, ", got '", text, "'"));
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer (32-bit)");
      repeated ? r->AddInt32(message, field, v) : r->SetInt32(message, field, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      repeated ? r->AddInt64(message, field, v) : r->SetInt64(message, field, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (absl::StartsWith(text, "-") || !absl::SimpleAtoi(text, &v)) {
        return bad("a non-negative integer (32-bit)");
      }
      repeated ? r->AddUInt32(message, field, v) : r->SetUInt32(message, field, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (absl::StartsWith(text, "-") || !absl::SimpleAtoi(text, &v)) {
        return bad("a non-negative integer");
      }
      repeated ? r->AddUInt64(message, field, v) : r->SetUInt64(message, field, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v;
      if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return bad("a finite number");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        repeated ? r->AddFloat(message, field, static_cast<float>(v))
                 : r->SetFloat(message, field, static_cast<float>(v));
      } else {
        repeated ? r->AddDouble(message, field, v) : r->SetDouble(message, field, v);
      }
      return;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      std::string lower = absl::AsciiStrToLower(text);
      bool v;
      if (lower == "true") {
        v = true;
      } else if (lower == "false") {
        v = false;
      } else {
        return bad("true or false");
      }
      repeated ? r->AddBool(message, field, v) : r->SetBool(message, field, v);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      repeated ? r->AddString(message, field, text) : r->SetString(message, field, text);
      return;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumDescriptor* e = field->enum_type();
      const EnumValueDescriptor* value = nullptr;
      std::vector<std::string> allowed;
      for (int i = 0; i < e->value_count(); ++i) {
        const EnumValueDescriptor* candidate = e->value(i);
        if (candidate->number() == 0) continue;  // *_UNSPECIFIED is not a user choice.
        allowed.push_back(candidate->name());
        if (absl::EqualsIgnoreCase(candidate->name(), text)) value = candidate;
      }
      if (value == nullptr) {
        errors->push_back(absl::StrCat(path, ": unknown value '", text, "' (expected one of ",
                                       absl::StrJoin(allowed, ", "), ")"));
        return;
      }
      repeated ? r->AddEnum(message, field, value) : r->SetEnum(message, field, value);
      return;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  errors->push_back(absl::StrCat(path, ": unsupported field type"));
}

void MergeMapField(const YAML::Node& node, const std::string& path, const FieldDescriptor* field,
                   Message* message, std::vector<std::string>* errors) {
  if (!node.IsMap()) {
    errors->push_back(absl::StrCat(path, ": expected a mapping, got ", Describe(node)));
    return;
  }
  const Reflection* r = message->GetReflection();
  r->ClearField(message, field);
  const Descriptor* entry = field->message_type();
  const FieldDescriptor* key_field = entry->map_key();
  const FieldDescriptor* value_field = entry->map_value();
  for (const auto& kv : node) {
    Message* item = r->AddMessage(message, field);
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string item_path = absl::StrCat(path, ".", key);
    SetScalar(kv.first, item_path, key_field, item, errors);
    if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      MergeYamlIntoMessage(kv.second, item_path, item->GetReflection()->MutableMessage(item, value_field),
                           errors);
    } else if (kv.second.IsNull()) {
      SetScalar(YAML::Node(""), item_path, value_field, item, errors);
    } else {
      SetScalar(kv.second, item_path, value_field, item, errors);
    }
  }
}

}  // namespace

void MergeYamlIntoMessage(const YAML::Node& node, const std::string& path, Message* message,
                          std::vector<std::string>* errors) {
  if (node.IsNull()) return;
  const std::string where = path.empty() ? "document" : path;
  if (!node.IsMap()) {
    errors->push_back(absl::StrCat(where, ": expected a mapping, got ", Describe(node)));
    return;
  }
  const Descriptor* d = message->GetDescriptor();
  const Reflection* r = message->GetReflection();
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      errors->push_back(absl::StrCat(where, ": keys must be plain names"));
      continue;
    }
    const std::string key = kv.first.Scalar();
    const std::string field_path = JoinPath(path, key);
    if (!seen.insert(key).second) {
      errors->push_back(absl::StrCat(field_path, ": given more than once"));
      continue;
    }
    const FieldDescriptor* field = d->FindFieldByName(key);
    if (field == nullptr) field = d->FindFieldByCamelcaseName(key);
    if (field == nullptr) {
      errors->push_back(absl::StrCat(field_path, ": ", UnknownFieldMessage(d, key)));
      continue;
    }
    const YAML::Node& value = kv.second;
    if (value.IsNull()) {
      r->ClearField(message, field);
      continue;
    }
    if (field->is_map()) {
      MergeMapField(value, field_path, field, message, errors);
    } else if (field->is_repeated()) {
      r->ClearField(message, field);
      if (!value.IsSequence()) {
        errors->push_back(absl::StrCat(field_path, ": expected a list, got ", Describe(value)));
        continue;
      }
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string item_path = absl::StrCat(field_path, "[", i, "]");
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          MergeYamlIntoMessage(value[i], item_path, r->AddMessage(message, field), errors);
        } else {
          SetScalar(value[i], item_path, field, message, errors);
        }
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!value.IsMap()) {
        errors->push_back(absl::StrCat(field_path, ": expected a mapping, got ", Describe(value)));
        continue;
      }
      MergeYamlIntoMessage(value, field_path, r->MutableMessage(message, field), errors);
    } else {
      SetScalar(value, field_path, field, message, errors);
    }
  }
}

namespace {

// Anchors and aliases let a few KB of YAML stand for gigabytes once expanded (the "billion
// laughs"); a job spec never needs them. This pass walks the parser's events, building
// nothing, and stops at the first anchor or alias.
class AnchorFinder : public YAML::EventHandler {
 public:
  struct Found {
    YAML::Mark mark;
    bool alias;
  };
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Check(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { throw Found{mark, true}; }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Check(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Check(mark, anchor);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Check(mark, anchor);
  }
  void OnMapEnd() override {}
  void OnAnchor(const YAML::Mark& mark, const std::string&) override { throw Found{mark, false}; }

 private:
  static void Check(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) throw Found{mark, false};
  }
};

absl::Status RefuseAnchors(const std::string& text) {
  // An anchor starts with '&' and an alias with '*': text with neither has none, and is
  // not parsed twice (most job files; a submission's parse is most of its CPU).
  if (text.find_first_of("&*") == std::string::npos) return absl::OkStatus();
  std::istringstream in(text);
  YAML::Parser parser(in);
  AnchorFinder finder;
  try {
    while (parser.HandleNextDocument(finder)) {
    }
  } catch (const AnchorFinder::Found& found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse job file: line ", found.mark.line + 1, ", column ", found.mark.column + 1,
        ": YAML ", found.alias ? "aliases (*name)" : "anchors (&name)",
        " are not accepted in job files; write the values out"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse job file: line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ParsedJob>> ParseJobDocuments(absl::string_view text) {
  std::vector<YAML::Node> documents;
  const std::string copy(text);
  if (absl::Status s = RefuseAnchors(copy); !s.ok()) return s;
  try {
    documents = YAML::LoadAll(copy);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse job file: line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
  // Flatten: each document is a spec, or a list of specs.
  std::vector<YAML::Node> specs;
  for (const YAML::Node& doc : documents) {
    if (doc.IsNull()) continue;  // An empty document ("---" at the end) is not a job.
    if (doc.IsSequence()) {
      for (const YAML::Node& item : doc) specs.push_back(item);
    } else {
      specs.push_back(doc);
    }
  }
  if (specs.empty()) return absl::InvalidArgumentError("job file contains no job spec");
  if (specs.size() > static_cast<size_t>(kMaxBatchSize)) {
    return absl::InvalidArgumentError(absl::StrCat("job file contains ", specs.size(),
                                                   " specs; at most ", kMaxBatchSize, " per batch"));
  }

  std::vector<ParsedJob> jobs(specs.size());
  std::vector<std::string> errors;
  std::map<std::string, int> occurrences;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::string> doc_errors;
    MergeYamlIntoMessage(specs[i], "", &jobs[i].spec, &doc_errors);
    for (const std::string& e : doc_errors) {
      errors.push_back(specs.size() == 1 ? e : absl::StrCat("document ", i + 1, ": ", e));
    }
    std::string canonical;
    google::protobuf::io::StringOutputStream out(&canonical);
    {
      google::protobuf::io::CodedOutputStream coded(&out);
      coded.SetSerializationDeterministic(true);
      jobs[i].spec.SerializeToCodedStream(&coded);
    }
    const std::string digest = Sha256Hex(canonical).substr(0, 32);
    jobs[i].idempotency_key = absl::StrCat("auto-", digest, "-", occurrences[digest]++);
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  return jobs;
}

absl::Status ApplySetOverride(v1::JobSpec* spec, absl::string_view key_eq_value) {
  const size_t eq = key_eq_value.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set expects key=value (e.g. training.lr=1e-4), got '", key_eq_value, "'"));
  }
  const std::string key(key_eq_value.substr(0, eq));
  const std::string value(key_eq_value.substr(eq + 1));
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", key, ": cannot parse value: ", e.msg));
  }
  // Wrap the value in mappings along the path: a.b=v becomes {a: {b: v}}.
  YAML::Node root = parsed;
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node wrapper(YAML::NodeType::Map);
    wrapper[*it] = root;
    root = wrapper;
  }
  std::vector<std::string> errors;
  v1::JobSpec updated = *spec;
  MergeYamlIntoMessage(root, "", &updated, &errors);
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  *spec = std::move(updated);
  return absl::OkStatus();
}

void ApplyDefaults(v1::JobSpec* spec) {
  if (spec->queue().empty()) spec->set_queue("default");
  if (spec->data().format() == v1::DATA_FORMAT_UNSPECIFIED) {
    spec->mutable_data()->set_format(v1::TEXT);
  }

  v1::TrainingSpec* t = spec->mutable_training();
  if (!t->has_epochs() && t->max_steps() == 0) t->set_epochs(1);
  if (!t->has_micro_batch_size()) t->set_micro_batch_size(4);
  if (t->has_global_batch_size() && !t->has_grad_accum()) {
    // Derived for the nominal world size; left unset (and reported by validation) when it
    // does not divide. The trainer derives it again from the world it actually runs on.
    const int64_t per_step = static_cast<int64_t>(t->micro_batch_size()) *
                             std::max(1, spec->resources().has_nodes() ? spec->resources().nodes() : 1) *
                             std::max(1, spec->resources().has_gpus_per_node() ? spec->resources().gpus_per_node() : 1);
    if (per_step > 0 && t->global_batch_size() > 0 && t->global_batch_size() % per_step == 0) {
      t->set_grad_accum(static_cast<int32_t>(t->global_batch_size() / per_step));
    }
  }
  if (!t->has_grad_accum() && !t->has_global_batch_size()) t->set_grad_accum(1);
  if (!t->has_seq_len()) t->set_seq_len(4096);
  if (t->batching() == v1::BATCHING_UNSPECIFIED) t->set_batching(v1::PACKING);
  if (t->optimizer() == v1::OPTIMIZER_UNSPECIFIED) t->set_optimizer(v1::ADAMW);
  if (!t->has_lr()) t->set_lr(1e-4);
  if (t->betas_size() == 0) {
    t->add_betas(0.9);
    t->add_betas(0.999);
  }
  if (!t->has_eps()) t->set_eps(1e-8);
  v1::LrSchedule* schedule = t->mutable_lr_schedule();
  if (schedule->type() == v1::LR_SCHEDULE_TYPE_UNSPECIFIED) schedule->set_type(v1::CONSTANT);
  if (schedule->type() == v1::STEP && !schedule->has_gamma()) schedule->set_gamma(0.85);
  if (!t->has_seed()) t->set_seed(42);
  if (!t->has_log_every()) t->set_log_every(10);

  v1::FsdpSpec* f = spec->mutable_fsdp();
  if (f->sharding() == v1::SHARDING_STRATEGY_UNSPECIFIED) f->set_sharding(v1::FULL_SHARD);
  if (f->mixed_precision() == v1::PRECISION_UNSPECIFIED) f->set_mixed_precision(v1::BF16);
  if (f->reduce_precision() == v1::PRECISION_UNSPECIFIED) f->set_reduce_precision(v1::FP32);
  if (!f->has_activation_checkpointing()) f->set_activation_checkpointing(true);
  if (!f->has_max_inflight_all_gathers()) f->set_max_inflight_all_gathers(2);

  v1::ResourceSpec* res = spec->mutable_resources();
  if (!res->has_nodes()) res->set_nodes(1);
  if (!res->has_gpus_per_node()) res->set_gpus_per_node(1);
  if (!res->has_elastic_cooldown_seconds()) res->set_elastic_cooldown_seconds(300);
  if (f->sharding() == v1::HYBRID_SHARD && f->hybrid_shard_group_size() == 0) {
    f->set_hybrid_shard_group_size(res->gpus_per_node());
  }

  v1::RunPolicy* p = spec->mutable_run_policy();
  if (!p->has_max_restarts()) p->set_max_restarts(3);
  if (!p->has_restart_backoff_seconds()) p->set_restart_backoff_seconds(30);
  if (!p->has_stall_timeout_seconds()) p->set_stall_timeout_seconds(300);

  v1::OutputSpec* o = spec->mutable_output();
  if (o->export_dtype() == v1::PRECISION_UNSPECIFIED) o->set_export_dtype(v1::BF16);
  if (!o->has_max_shard_size_mb()) o->set_max_shard_size_mb(5120);
}

namespace {

// Collects violations with their field paths.
class Violations {
 public:
  explicit Violations(absl::string_view prefix) : prefix_(prefix) {}
  void Add(absl::string_view field, absl::string_view rule) {
    list_.push_back(absl::StrCat(prefix_, field, " ", rule));
    v1::FieldViolation v;
    v.set_field(absl::StrCat(prefix_, field));
    v.set_description(std::string(rule));
    fields_.push_back(std::move(v));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(list_, "; ")), fields_);
  }
  bool empty() const { return list_.empty(); }

 private:
  std::string prefix_;
  std::vector<std::string> list_;
  std::vector<v1::FieldViolation> fields_;
};

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }

bool AllNameChars(absl::string_view s) { return std::all_of(s.begin(), s.end(), IsNameChar); }

const std::set<std::string>& KnownPresets() {
  static const auto* presets =
      new std::set<std::string>{"llama2-7b", "llama2-13b", "llama2-70b", "tiny", "tiny-gqa"};
  return *presets;
}

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

// training.global_batch_size: a multiple of micro_batch_size x ranks; grad_accum (derived
// by ApplyDefaults when unset) equal to the quotient.
void CheckGlobalBatch(const v1::JobSpec& spec, Violations& v) {
  const v1::TrainingSpec& t = spec.training();
  const int64_t global = t.global_batch_size();
  const int64_t micro = t.micro_batch_size();
  const int64_t nodes = spec.resources().nodes(), gpus = spec.resources().gpus_per_node();
  const int64_t ranks = nodes * gpus;
  if (global < 1) {
    v.Add("training.global_batch_size", absl::StrCat("must be >= 1 (got ", global, ")"));
    return;
  }
  if (micro < 1 || ranks < 1) return;  // reported on their own fields
  if (global % (micro * ranks) != 0) {
    std::vector<int64_t> work;
    if (global % micro == 0) {
      for (int64_t w = 1; w <= global / micro; ++w) {
        if ((global / micro) % w == 0) work.push_back(w);
      }
    }
    v.Add("training.global_batch_size",
          absl::StrCat("(", global, ") must be a multiple of micro_batch_size (", micro, ") x ranks (",
                       ranks, " = nodes ", nodes, " x gpus_per_node ", gpus, "); ",
                       work.empty() ? absl::StrCat("no world size works with micro_batch_size ", micro)
                                    : absl::StrCat("world sizes that work: ", absl::StrJoin(work, ", "))));
    return;
  }
  if (t.grad_accum() != global / (micro * ranks)) {
    v.Add("training.grad_accum", absl::StrCat("(", t.grad_accum(), ") must equal global_batch_size / (",
                                              "micro_batch_size x ranks) = ", global / (micro * ranks),
                                              ", or be left unset"));
  }
}

sched::Strategy ToStrategy(v1::ShardingStrategy s) {
  switch (s) {
    case v1::SHARD_GRAD_OP: return sched::Strategy::kShardGradOp;
    case v1::HYBRID_SHARD: return sched::Strategy::kHybridShard;
    case v1::NO_SHARD: return sched::Strategy::kNoShard;
    default: return sched::Strategy::kFullShard;
  }
}

std::optional<sched::MemoryInputs> MemoryInputsOf(const v1::JobSpec& spec, int world_size) {
  std::optional<sched::ModelShape> shape = sched::PresetShape(spec.model().preset());
  if (!shape) return std::nullopt;
  const v1::TrainingSpec& t = spec.training();
  const v1::FsdpSpec& f = spec.fsdp();
  const v1::ResourceSpec& r = spec.resources();
  sched::MemoryInputs in;
  in.model = *shape;
  in.strategy = ToStrategy(f.sharding());
  in.world_size = world_size > 0 ? world_size : std::max(1, r.nodes()) * std::max(1, r.gpus_per_node());
  in.shard_group_size = f.hybrid_shard_group_size();
  in.compute_bytes = f.mixed_precision() == v1::FP32 ? 4 : 2;
  in.reduce_bytes = f.reduce_precision() == v1::FP32 ? 4 : 2;
  in.activation_checkpointing = f.activation_checkpointing();
  in.micro_batch = std::max(1, t.micro_batch_size());
  // The trainer caps seq_len at max_position_embeddings (4096 for every preset).
  in.seq_len = std::min(std::max(1, t.seq_len()), 4096);
  in.grad_accum = std::max(1, t.grad_accum());
  in.max_inflight_all_gathers = std::max(1, f.max_inflight_all_gathers());
  in.async_checkpoints = !spec.checkpoint().has_async() || spec.checkpoint().async();
  return in;
}

v1::MemoryEstimate ToProto(const sched::MemoryEstimate& e, int world_size) {
  v1::MemoryEstimate out;
  out.set_total_bytes(e.total);
  out.set_parameters_bytes(e.parameters);
  out.set_gradients_bytes(e.gradients);
  out.set_optimizer_state_bytes(e.optimizer_state);
  out.set_gathered_params_bytes(e.gathered_params);
  out.set_activations_bytes(e.activations);
  out.set_communication_bytes(e.communication);
  out.set_workspace_bytes(e.workspace);
  out.set_checkpoint_staging_bytes(e.checkpoint_staging);
  out.set_peak_phase(e.peak_phase);
  out.set_world_size(world_size);
  return out;
}

// resources.instance_type names a known GPU instance: gpus_per_node must not exceed its
// GPUs, and the estimate must fit one of them. The refusal says what would fit.
void CheckInstanceFit(const v1::JobSpec& spec, Violations& v) {
  const sched::InstanceType* type = sched::FindInstanceType(spec.resources().instance_type());
  if (type == nullptr) return;  // a site-specific type: the scheduler checks real workers
  const v1::ResourceSpec& res = spec.resources();
  if (res.gpus_per_node() > type->gpus) {
    v.Add("resources.gpus_per_node", absl::StrCat("(", res.gpus_per_node(), ") exceeds the ", type->gpus,
                                                  " GPUs of ", type->name));
    return;
  }
  std::optional<sched::MemoryInputs> in = MemoryInputsOf(spec, 0);
  if (!in) return;
  const sched::MemoryEstimate e = sched::EstimateMemory(*in);
  if (e.total <= type->gpu_memory_bytes) return;

  std::vector<std::string> fits;
  auto total_with = [&](const sched::MemoryInputs& alt) { return sched::EstimateMemory(alt).total; };
  if (in->strategy != sched::Strategy::kFullShard) {
    sched::MemoryInputs alt = *in;
    alt.strategy = sched::Strategy::kFullShard;
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) fits.push_back(absl::StrCat("fsdp.sharding FULL_SHARD (", sched::FormatGiB(b), ")"));
  }
  if (!in->activation_checkpointing) {
    sched::MemoryInputs alt = *in;
    alt.activation_checkpointing = true;
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) {
      fits.push_back(absl::StrCat("fsdp.activation_checkpointing true (", sched::FormatGiB(b), ")"));
    }
  }
  {
    // More nodes, FULL_SHARD, activation checkpointing, every GPU of the instance.
    sched::MemoryInputs alt = *in;
    alt.strategy = sched::Strategy::kFullShard;
    alt.activation_checkpointing = true;
    for (int nodes = std::max(1, res.nodes()); nodes <= 4096; nodes *= 2) {
      alt.world_size = nodes * type->gpus;
      const int64_t b = total_with(alt);
      if (b <= type->gpu_memory_bytes) {
        fits.push_back(absl::StrCat(nodes, " nodes x ", type->gpus, " GPUs with FULL_SHARD and activation "
                                    "checkpointing (", sched::FormatGiB(b), ")"));
        break;
      }
    }
  }
  for (const sched::InstanceType& other : sched::KnownInstanceTypes()) {
    if (other.gpu_memory_bytes > type->gpu_memory_bytes && e.total <= other.gpu_memory_bytes &&
        res.gpus_per_node() <= other.gpus) {
      fits.push_back(absl::StrCat("instance type ", other.name, " (", other.gpu, ")"));
      break;
    }
  }
  v.Add("resources.instance_type",
        absl::StrCat(type->name, ": estimated ", sched::FormatGiB(e.total), " per GPU (parameters ",
                     sched::FormatGiB(e.parameters), ", gradients ", sched::FormatGiB(e.gradients),
                     ", optimizer state ", sched::FormatGiB(e.optimizer_state), ", gathered parameters ",
                     sched::FormatGiB(e.gathered_params), ", activations ", sched::FormatGiB(e.activations),
                     ", communication ", sched::FormatGiB(e.communication), ", workspace ",
                     sched::FormatGiB(e.workspace), ") does not fit its ", sched::FormatGiB(type->gpu_memory_bytes),
                     " ", type->gpu, " GPUs; ",
                     fits.empty() ? "nothing within 4096 nodes fits this model with this engine"
                                  : absl::StrCat("would fit: ", absl::StrJoin(fits, "; or "))));
}

}  // namespace

std::optional<v1::MemoryEstimate> EstimateJobMemory(const v1::JobSpec& spec, int world_size) {
  std::optional<sched::MemoryInputs> in = MemoryInputsOf(spec, world_size);
  if (!in) return std::nullopt;
  return ToProto(sched::EstimateMemory(*in), in->world_size);
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec, absl::string_view path_prefix) {
  Violations v(path_prefix);

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
  auto check_labels = [&](absl::string_view field,
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
  };
  check_labels("labels", spec.labels());

  // model
  const v1::ModelSpec& m = spec.model();
  if (m.path().empty() == m.preset().empty()) {
    v.Add("model", "must set exactly one of model.path and model.preset");
  }
  if (!m.preset().empty() && !KnownPresets().count(m.preset())) {
    v.Add("model.preset", absl::StrCat("'", m.preset(), "' is not one of ",
                                       absl::StrJoin(KnownPresets(), ", ")));
  }
  CheckPath(v, "model.path", m.path());
  CheckPath(v, "model.tokenizer", m.tokenizer());
  if (!m.preset().empty() && m.tokenizer().empty() && spec.data().format() != v1::TOKENS) {
    v.Add("model.tokenizer", "is required with model.preset unless data.format is TOKENS");
  }

  // data
  if (spec.data().train_path().empty()) v.Add("data.train_path", "is required");
  CheckPath(v, "data.train_path", spec.data().train_path());
  CheckPath(v, "data.eval_path", spec.data().eval_path());

  // training
  const v1::TrainingSpec& t = spec.training();
  if (t.has_epochs()) AtLeast(v, "training.epochs", t.epochs(), 1);
  AtLeast<int64_t>(v, "training.max_steps", t.max_steps(), 0);
  AtLeast(v, "training.micro_batch_size", t.micro_batch_size(), 1);
  if (t.has_global_batch_size()) {
    CheckGlobalBatch(spec, v);
  } else {
    AtLeast(v, "training.grad_accum", t.grad_accum(), 1);
  }
  AtLeast(v, "training.seq_len", t.seq_len(), 2);
  if (t.seq_len() > 1 << 17) v.Add("training.seq_len", "must be <= 131072");
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
  const v1::LrSchedule& s = t.lr_schedule();
  if (s.has_gamma() && !(s.gamma() > 0 && s.gamma() <= 1)) {
    v.Add("training.lr_schedule.gamma", absl::StrCat("must be in (0, 1] (got ", s.gamma(), ")"));
  }
  AtLeast<int64_t>(v, "training.lr_schedule.warmup_steps", s.warmup_steps(), 0);
  if (!(s.min_lr_ratio() >= 0 && s.min_lr_ratio() <= 1)) {
    v.Add("training.lr_schedule.min_lr_ratio",
          absl::StrCat("must be in [0, 1] (got ", s.min_lr_ratio(), ")"));
  }

  // resources
  const v1::ResourceSpec& res = spec.resources();
  AtLeast(v, "resources.nodes", res.nodes(), 1);
  if (res.nodes() > 4096) v.Add("resources.nodes", "must be <= 4096");
  AtLeast(v, "resources.gpus_per_node", res.gpus_per_node(), 1);
  if (res.gpus_per_node() > 64) v.Add("resources.gpus_per_node", "must be <= 64");
  AtLeast(v, "resources.efa_per_node", res.efa_per_node(), 0);
  if (!res.instance_type().empty() &&
      (res.instance_type().size() > 63 || !AllNameChars(res.instance_type()))) {
    v.Add("resources.instance_type", "must be 1..63 characters of letters, digits, '.', '_', '-'");
  }
  check_labels("resources.node_labels", res.node_labels());
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
  if (res.min_nodes() > 0 && res.min_nodes() < res.nodes()) {
    // Elastic: the result must not depend on how many nodes the gang gets.
    if (!spec.training().has_global_batch_size()) {
      v.Add("training.global_batch_size", absl::StrCat("is required for an elastic job (resources.min_nodes ",
                                                       res.min_nodes(), " < nodes ", res.nodes(), ")"));
    } else if (spec.training().global_batch_size() > 0 && spec.training().micro_batch_size() > 0 &&
               res.gpus_per_node() > 0) {
      const int64_t global = spec.training().global_batch_size();
      std::vector<std::string> bad;
      for (int k = std::max(1, res.min_nodes()); k < res.nodes(); ++k) {
        const int64_t per = int64_t{spec.training().micro_batch_size()} * k * res.gpus_per_node();
        if (global % per != 0) bad.push_back(absl::StrCat(k));
      }
      if (!bad.empty()) {
        v.Add("training.global_batch_size",
              absl::StrCat("(", global, ") must be a multiple of micro_batch_size x gpus_per_node x nodes for every ",
                           "node count the elastic gang may run on; it is not for ", absl::StrJoin(bad, ", "),
                           " nodes"));
      }
    }
  }

  // fsdp
  const v1::FsdpSpec& f = spec.fsdp();
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
  if (f.mixed_precision() == v1::FP16 && f.reduce_precision() == v1::BF16) {
    v.Add("fsdp.reduce_precision", "BF16 cannot be combined with FP16 compute");
  }

  // checkpoint
  const v1::CheckpointSpec& c = spec.checkpoint();
  CheckPath(v, "checkpoint.dir", c.dir());
  AtLeast<int64_t>(v, "checkpoint.every_steps", c.every_steps(), 0);
  AtLeast(v, "checkpoint.keep_last", c.keep_last(), 0);
  CheckPath(v, "checkpoint.resume", c.resume());

  // run_policy
  const v1::RunPolicy& p = spec.run_policy();
  AtLeast(v, "run_policy.max_restarts", p.max_restarts(), 0);
  if (p.max_restarts() > 1000) v.Add("run_policy.max_restarts", "must be <= 1000");
  AtLeast<int64_t>(v, "run_policy.restart_backoff_seconds", p.restart_backoff_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.active_deadline_seconds", p.active_deadline_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.ttl_after_finished_seconds", p.ttl_after_finished_seconds(), 0);
  AtLeast<int64_t>(v, "run_policy.stall_timeout_seconds", p.stall_timeout_seconds(), 1);

  // output
  CheckPath(v, "output.export_dir", spec.output().export_dir());
  AtLeast(v, "output.max_shard_size_mb", spec.output().max_shard_size_mb(), 1);
  if (spec.output().export_dtype() == v1::FP16 || spec.output().export_dtype() == v1::BF16 ||
      spec.output().export_dtype() == v1::FP32) {
  } else {
    v.Add("output.export_dtype", "must be FP32, BF16 or FP16");
  }

  // The named instance type: enough GPUs, and GPUs that hold the memory estimate (checked
  // last, on an otherwise valid spec, so the estimate reads sane values).
  if (v.empty() && !res.instance_type().empty()) CheckInstanceFit(spec, v);

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

namespace {
constexpr char kFieldViolationsUrl[] = "type.googleapis.com/llamafleet.v1.ErrorDetails";
}  // namespace

absl::Status WithFieldViolations(absl::Status status,
                                 const std::vector<v1::FieldViolation>& violations) {
  if (status.ok() || violations.empty()) return status;
  v1::ErrorDetails details;
  for (const v1::FieldViolation& v : violations) *details.add_field_violations() = v;
  status.SetPayload(kFieldViolationsUrl, absl::Cord(details.SerializeAsString()));
  return status;
}

std::vector<v1::FieldViolation> FieldViolationsOf(const absl::Status& status) {
  std::vector<v1::FieldViolation> out;
  auto payload = status.GetPayload(kFieldViolationsUrl);
  v1::ErrorDetails details;
  if (!payload.has_value() || !details.ParseFromString(std::string(*payload))) return out;
  for (v1::FieldViolation& v : *details.mutable_field_violations()) out.push_back(std::move(v));
  return out;
}

std::string MessageToJson(const Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

namespace {
void SetBlockStyle(YAML::Node node) {
  if (node.IsMap() || node.IsSequence()) {
    node.SetStyle(YAML::EmitterStyle::Block);
    for (auto it = node.begin(); it != node.end(); ++it) {
      SetBlockStyle(node.IsMap() ? it->second : *it);
    }
  }
}
}  // namespace

std::string MessageToYaml(const Message& message) {
  YAML::Node node = YAML::Load(MessageToJson(message));
  SetBlockStyle(node);
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

std::string Sha256Hex(absl::string_view data) {
  // Not the one-shot SHA256(): in OpenSSL 3 it fetches the digest through the provider
  // machinery, whose first use loads openssl.cnf and the default provider (1.5 ms of CPU,
  // paid by every CLI invocation) and looks the digest up again on every call (paid per
  // request by the coordinator's token check). The low-level functions hash directly;
  // they are deprecated in OpenSSL 3 but still part of its API.
  unsigned char digest[SHA256_DIGEST_LENGTH];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, data.data(), data.size());
  SHA256_Final(digest, &ctx);
#pragma GCC diagnostic pop
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace llamafleet
