// Job files: the documents of a file as job specs with their idempotency keys and field
// positions, and the trainer's --set overrides.

#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "jobspec/jobspec.h"
#include "jobspec/yaml_merge.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

// The pass over the parser's events that runs before any node is built, and stops at the
// first of:
//   - an anchor or alias: they let a few KB of YAML stand for gigabytes once expanded
//     (the "billion laughs"), and a job spec never needs them;
//   - more than kMaxYamlNodes nodes: each costs a few hundred bytes once built;
//   - a document that starts where the one before it started: yaml-cpp (0.7) makes no
//     progress on text after a top-level flow collection ("{},", "[1] x") and returns the
//     same empty document forever.
class DocumentScan : public YAML::EventHandler {
 public:
  struct Refused {
    YAML::Mark mark;
    std::string what;
  };
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (documents_ > 0 && mark.pos == last_start_) throw Refused{mark, "unexpected text here"};
    ++documents_;
    last_start_ = mark.pos;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Node(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { throw Refused{mark, kAliases}; }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Node(mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Node(mark, anchor);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Node(mark, anchor);
  }
  void OnMapEnd() override {}
  void OnAnchor(const YAML::Mark& mark, const std::string&) override { throw Refused{mark, kAnchors}; }

 private:
  static constexpr const char* kAnchors =
      "YAML anchors (&name) are not accepted in job files; write the values out";
  static constexpr const char* kAliases =
      "YAML aliases (*name) are not accepted in job files; write the values out";
  void Node(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) throw Refused{mark, kAnchors};
    if (++nodes_ > kMaxYamlNodes) {
      throw Refused{mark, absl::StrCat("the job file holds more than ", kMaxYamlNodes,
                                       " YAML nodes (values, lists and mappings)")};
    }
  }
  int64_t nodes_ = 0;
  int documents_ = 0;
  int last_start_ = -1;
};

// The first line, up to and including `last` (0-based), indented with a tab: YAML allows
// only spaces there, and the parser's own message ("illegal map value") does not say so.
std::optional<int> TabIndentedLine(absl::string_view text, int last) {
  int line = 0;
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (line > last) break;
    const size_t content = l.find_first_not_of(" \t");
    if (content != absl::string_view::npos &&
        l.substr(0, content).find('\t') != absl::string_view::npos && l[content] != '#') {
      return line;
    }
    ++line;
  }
  return std::nullopt;
}

std::string ParseError(absl::string_view text, const YAML::Mark& mark, absl::string_view what) {
  if (std::optional<int> tab = TabIndentedLine(text, mark.line)) {
    return absl::StrCat("cannot parse job file: line ", *tab + 1,
                        ": tabs are not allowed for indentation; indent with spaces (the parser "
                        "stopped at line ",
                        mark.line + 1, ", column ", mark.column + 1, ": ", what, ")");
  }
  return absl::StrCat("cannot parse job file: line ", mark.line + 1, ", column ", mark.column + 1, ": ",
                      what);
}

absl::Status ScanDocuments(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentScan scan;
  try {
    while (parser.HandleNextDocument(scan)) {
    }
  } catch (const DocumentScan::Refused& refused) {
    return absl::InvalidArgumentError(ParseError(text, refused.mark, refused.what));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(ParseError(text, e.mark, e.msg));
  }
  return absl::OkStatus();
}

// "auto-<32 hex digits of the spec's deterministic serialization>-<occurrence>".
std::string AutoIdempotencyKey(const v1::JobSpec& spec, std::map<std::string, int>& occurrences) {
  std::string canonical;
  google::protobuf::io::StringOutputStream out(&canonical);
  {
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  const std::string digest = Sha256Hex(canonical).substr(0, 32);
  return absl::StrCat("auto-", digest, "-", occurrences[digest]++);
}

// A document that depends on an earlier one of the file by name stands for another job
// when that one changes: its key also covers its parents' keys (in file order, so a chain
// carries through). A name matches a document of that name, or a point ("NAME-<index>")
// of a sweep document named NAME.
void ChainDependentKeys(std::vector<ParsedJob>& jobs) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::string parents;
    for (const v1::JobDependency& d : jobs[i].spec.depends_on()) {
      for (size_t j = 0; j < i; ++j) {
        const std::string& name = jobs[j].spec.name();
        const bool sweep_point = jobs[j].spec.sweep().parameters_size() > 0 && absl::StartsWith(d.job(), name + "-");
        if (d.job() == name || sweep_point) absl::StrAppend(&parents, "|", jobs[j].idempotency_key);
      }
    }
    if (parents.empty()) continue;
    std::string& key = jobs[i].idempotency_key;
    const std::string occurrence = key.substr(key.rfind('-'));
    key = absl::StrCat("auto-", Sha256Hex(key + parents).substr(0, 32), occurrence);
  }
}

}  // namespace

absl::StatusOr<std::vector<ParsedJob>> ParseJobDocuments(
    absl::string_view text, const std::vector<std::string>& overrides) {
  std::vector<YAML::Node> documents;
  const std::string copy(text);
  LF_RETURN_IF_ERROR(ScanDocuments(copy));
  try {
    documents = YAML::LoadAll(copy);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(ParseError(copy, e.mark, e.msg));
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
  std::vector<LocatedFieldViolation> violations;
  std::map<std::string, int> occurrences;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<jobspec_internal::MergeProblem> problems;
    jobspec_internal::MergeYaml(specs[i], "", &jobs[i].spec, &problems, &jobs[i].positions);
    for (jobspec_internal::MergeProblem& p : problems) {
      const std::string line = p.ToString();
      errors.push_back(specs.size() == 1 ? line : absl::StrCat("document ", i + 1, ": ", line));
      LocatedFieldViolation& v = violations.emplace_back();
      v.violation.set_field(std::move(p.field));
      v.violation.set_description(std::move(p.what));
      v.position = p.position;
    }
    for (const std::string& o : overrides) {
      if (absl::Status s = ApplySetOverride(&jobs[i].spec, o); !s.ok()) {
        errors.push_back(absl::StartsWith(s.message(), "--set")
                             ? std::string(s.message())
                             : absl::StrCat("--set ", s.message()));
        break;
      }
    }
    jobs[i].idempotency_key = AutoIdempotencyKey(jobs[i].spec, occurrences);
  }
  if (!errors.empty()) {
    return WithLocatedFieldViolations(absl::InvalidArgumentError(absl::StrJoin(errors, "; ")),
                                      violations);
  }
  ChainDependentKeys(jobs);
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
  std::vector<std::string> errors;
  for (const jobspec_internal::MergeProblem& p : jobspec_internal::SetFieldFromYaml(spec, key, parsed)) {
    errors.push_back(p.ToString());
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  return absl::OkStatus();
}

}  // namespace llamafleet
