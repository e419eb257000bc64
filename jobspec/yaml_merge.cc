// YAML into protobuf messages, guided by the descriptor: the one reader of job files.

#include "jobspec/yaml_merge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace jobspec_internal {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// yaml-cpp's marks are 0-based and count from the start of the stream, so positions of a
// later document are relative to the file; a node built in code has no mark.
SourcePosition PositionOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1};
}

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

// Names other tools give to a spec's fields (llama-recipes, HF Trainer, PEFT), and the
// field each means here.
const std::map<std::string, std::string>& KnownAliases() {
  static const auto* aliases = new std::map<std::string, std::string>{
      {"learning_rate", "lr"},
      {"batch_size", "micro_batch_size"},
      {"batch_size_training", "micro_batch_size"},
      {"per_device_train_batch_size", "micro_batch_size"},
      {"gradient_accumulation_steps", "grad_accum"},
      {"num_epochs", "epochs"},
      {"num_train_epochs", "epochs"},
      {"steps", "max_steps"},
      {"context_length", "seq_len"},
      {"max_seq_len", "seq_len"},
      {"max_seq_length", "seq_len"},
      {"seq_length", "seq_len"},
      {"max_length", "seq_len"},
      {"gradient_clipping_threshold", "grad_clip"},
      {"max_grad_norm", "grad_clip"},
      {"lora_r", "r"},
      {"lora_alpha", "alpha"},
      {"lora_dropout", "dropout"},
      {"num_nodes", "nodes"},
      {"gpus", "gpus_per_node"},
      {"nproc_per_node", "gpus_per_node"},
      {"output_dir", "export_dir"},
      {"dataset", "train_path"},
      {"model_name", "path"},
  };
  return *aliases;
}

// Every field of the job spec named `name`, by its path from the spec ("data.train_path"),
// at most `depth` messages down.
void FindFieldPaths(const Descriptor* d, const std::string& prefix, const std::string& name,
                    int depth, std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = JoinPath(prefix, f->name());
    if (f->name() == name) out->push_back(path);
    if (depth > 0 && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map()) {
      FindFieldPaths(f->message_type(), path, name, depth - 1, out);
    }
  }
}

// `key` is no field of `d` (the message at `path`): the nearest field name of `d` (edit
// distance under 3); else the field a known alias means, here or elsewhere in the spec;
// else the field of that name at another level of the spec ("data.train_path").
std::string UnknownFieldMessage(const Descriptor* d, const std::string& path,
                                const std::string& key) {
  std::string best;
  size_t best_distance = 3;
  for (int i = 0; i < d->field_count(); ++i) {
    size_t dist = EditDistance(key, d->field(i)->name());
    if (dist < best_distance) {
      best_distance = dist;
      best = d->field(i)->name();
    }
  }
  if (best.empty()) {
    const auto alias = KnownAliases().find(absl::AsciiStrToLower(key));
    const std::string wanted = alias == KnownAliases().end() ? key : alias->second;
    if (d->FindFieldByName(wanted) != nullptr) {
      best = wanted;
    } else if (d->file() == v1::JobSpec::descriptor()->file()) {
      std::vector<std::string> paths;
      FindFieldPaths(v1::JobSpec::descriptor(), "", wanted, 4, &paths);
      // Named in full: the field is at another level than where it was written.
      if (paths.size() == 1 && paths[0] != JoinPath(path, wanted)) best = paths[0];
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

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), which
// protobuf requires of every string field: a spec holding anything else could not be
// sent to the coordinator or read back from it.
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Sets one scalar (or appends to a repeated field) from a YAML scalar node; a problem is
// placed at `where` (the field's key or list item).
void SetScalar(const YAML::Node& node, const std::string& path, const FieldDescriptor* field,
               Message* message, std::vector<MergeProblem>* problems, SourcePosition where) {
  const Reflection* r = message->GetReflection();
  const bool repeated = field->is_repeated();
  if (!node.IsScalar()) {
    problems->push_back({path, absl::StrCat("expected a scalar value, got ", Describe(node)), where});
    return;
  }
  const std::string& text = node.Scalar();
  auto bad = [&](absl::string_view what) {
    problems->push_back({path, absl::StrCat("expected ", what, ", got '", text, "'"), where});
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
      if (!IsUtf8(text)) {
        // The bytes are not echoed: the message itself must stay UTF-8.
        problems->push_back({path, "expected UTF-8 text (the value holds bytes that are not UTF-8)", where});
        return;
      }
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
        problems->push_back({path,
                             absl::StrCat("unknown value '", text, "' (expected one of ",
                                          absl::StrJoin(allowed, ", "), ")"),
                             where});
        return;
      }
      repeated ? r->AddEnum(message, field, value) : r->SetEnum(message, field, value);
      return;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  problems->push_back({path, "unsupported field type", where});
}

// A bool switch with an enum companion named `<switch>_mode` (fsdp.activation_checkpointing
// and fsdp.activation_checkpointing_mode) also takes the companion's value names, with or
// without their prefix ("selective" for AC_SELECTIVE): the companion is set, and the switch
// becomes false for a value whose name ends in NONE and true otherwise. true/false set the
// switch and clear the companion, so a later override always wins. Returns false when
// `field` has no companion (the caller sets it as a plain scalar).
bool SetSwitchWithMode(const YAML::Node& node, const std::string& path,
                       const FieldDescriptor* field, Message* message,
                       std::vector<MergeProblem>* problems, SourcePosition where) {
  if (field->cpp_type() != FieldDescriptor::CPPTYPE_BOOL || field->is_repeated()) return false;
  const FieldDescriptor* mode =
      message->GetDescriptor()->FindFieldByName(absl::StrCat(field->name(), "_mode"));
  if (mode == nullptr || mode->cpp_type() != FieldDescriptor::CPPTYPE_ENUM || mode->is_repeated())
    return false;
  const Reflection* r = message->GetReflection();
  if (!node.IsScalar()) {
    problems->push_back(
        {path, absl::StrCat("expected a scalar value, got ", Describe(node)), where});
    return true;
  }
  const std::string text = absl::AsciiStrToLower(node.Scalar());
  if (text == "true" || text == "false") {
    r->SetBool(message, field, text == "true");
    r->ClearField(message, mode);
    return true;
  }
  const EnumDescriptor* e = mode->enum_type();
  std::vector<std::string> allowed = {"true", "false"};
  for (int i = 0; i < e->value_count(); ++i) {
    const EnumValueDescriptor* v = e->value(i);
    if (v->number() == 0) continue;
    const std::string name = absl::AsciiStrToLower(v->name());
    const size_t cut = name.rfind('_');
    const std::string short_name = cut == std::string::npos ? name : name.substr(cut + 1);
    allowed.push_back(short_name);
    if (text == name || text == short_name) {
      r->SetEnum(message, mode, v);
      r->SetBool(message, field, !absl::EndsWith(name, "none"));
      return true;
    }
  }
  problems->push_back(
      {path, absl::StrCat("expected ", absl::StrJoin(allowed, ", "), ", got '", node.Scalar(), "'"),
       where});
  return true;
}

void MergeMapField(const YAML::Node& node, const std::string& path, const FieldDescriptor* field,
                   Message* message, std::vector<MergeProblem>* problems,
                   FieldPositions* positions, SourcePosition where) {
  if (!node.IsMap()) {
    problems->push_back({path, absl::StrCat("expected a mapping, got ", Describe(node)), where});
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
    const SourcePosition at = PositionOf(kv.first);
    if (positions != nullptr) positions->Set(item_path, at);
    SetScalar(kv.first, item_path, key_field, item, problems, at);
    if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* value = item->GetReflection()->MutableMessage(item, value_field);
      const Descriptor* vd = value->GetDescriptor();
      if (kv.second.IsSequence() && vd->field_count() == 1 && vd->field(0)->is_repeated()) {
        // A value message that is only a list may be written as that list
        // (sweep.parameters: `training.lr: [1e-4, 3e-4]`).
        YAML::Node wrapped(YAML::NodeType::Map);
        wrapped[vd->field(0)->name()] = kv.second;
        MergeYaml(wrapped, item_path, value, problems, positions);
      } else {
        MergeYaml(kv.second, item_path, value, problems, positions);
      }
    } else if (kv.second.IsNull()) {
      SetScalar(YAML::Node(""), item_path, value_field, item, problems, at);
    } else {
      SetScalar(kv.second, item_path, value_field, item, problems, at);
    }
  }
}

}  // namespace

std::string MergeProblem::ToString() const {
  return absl::StrCat(field.empty() ? "document" : field, ": ", what);
}

void MergeYaml(const YAML::Node& node, const std::string& path, Message* message,
               std::vector<MergeProblem>* problems, FieldPositions* positions) {
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    problems->push_back({path, absl::StrCat("expected a mapping, got ", Describe(node)),
                         PositionOf(node)});
    return;
  }
  const Descriptor* d = message->GetDescriptor();
  const Reflection* r = message->GetReflection();
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const SourcePosition at = PositionOf(kv.first);
    if (!kv.first.IsScalar()) {
      problems->push_back({path, "keys must be plain names", at});
      continue;
    }
    const std::string key = kv.first.Scalar();
    const std::string field_path = JoinPath(path, key);
    if (!seen.insert(key).second) {
      problems->push_back({field_path, "given more than once", at});
      continue;
    }
    const FieldDescriptor* field = d->FindFieldByName(key);
    if (field == nullptr) field = d->FindFieldByCamelcaseName(key);
    if (field == nullptr) {
      problems->push_back({field_path, UnknownFieldMessage(d, path, key), at});
      continue;
    }
    if (positions != nullptr) positions->Set(field_path, at);
    const YAML::Node& value = kv.second;
    if (value.IsNull()) {
      r->ClearField(message, field);
      continue;
    }
    if (field->is_map()) {
      MergeMapField(value, field_path, field, message, problems, positions, at);
    } else if (field->is_repeated()) {
      r->ClearField(message, field);
      if (!value.IsSequence()) {
        problems->push_back({field_path, absl::StrCat("expected a list, got ", Describe(value)), at});
        continue;
      }
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string item_path = absl::StrCat(field_path, "[", i, "]");
        const SourcePosition item_at = PositionOf(value[i]);
        if (positions != nullptr) positions->Set(item_path, item_at);
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          MergeYaml(value[i], item_path, r->AddMessage(message, field), problems, positions);
        } else {
          SetScalar(value[i], item_path, field, message, problems, item_at);
        }
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!value.IsMap()) {
        problems->push_back({field_path, absl::StrCat("expected a mapping, got ", Describe(value)), at});
        continue;
      }
      MergeYaml(value, field_path, r->MutableMessage(message, field), problems, positions);
    } else if (!SetSwitchWithMode(value, field_path, field, message, problems, at)) {
      SetScalar(value, field_path, field, message, problems, at);
    }
  }
}

std::vector<MergeProblem> SetFieldFromYaml(v1::JobSpec* spec, const std::string& path, const YAML::Node& value) {
  // Wrap the value in mappings along the path: a.b=v becomes {a: {b: v}}.
  YAML::Node root = value;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node wrapper(YAML::NodeType::Map);
    wrapper[*it] = root;
    root = wrapper;
  }
  std::vector<MergeProblem> problems;
  v1::JobSpec updated = *spec;
  MergeYaml(root, "", &updated, &problems, nullptr);
  if (problems.empty()) *spec = std::move(updated);
  return problems;
}

}  // namespace jobspec_internal

void MergeYamlIntoMessage(const YAML::Node& node, const std::string& path,
                          google::protobuf::Message* message, std::vector<std::string>* errors) {
  std::vector<jobspec_internal::MergeProblem> problems;
  jobspec_internal::MergeYaml(node, path, message, &problems, nullptr);
  for (const jobspec_internal::MergeProblem& p : problems) errors->push_back(p.ToString());
}

}  // namespace llamafleet
