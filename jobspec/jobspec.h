#ifndef LLAMAFLEET_JOBSPEC_JOBSPEC_H_
#define LLAMAFLEET_JOBSPEC_JOBSPEC_H_

// Job spec documents: parsing (YAML or JSON), defaults, validation.
//
// One implementation shared by the coordinator (validates every submission), the CLI
// (parses files, --dry-run) and the trainer (`llamafleet-train train --spec`), so a spec
// means the same thing everywhere.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/proto_text.h"
#include "common/sha256.h"
#include "llamafleet/v1/job.pb.h"

namespace google::protobuf {
class Message;
}
namespace YAML {
class Node;
}

namespace llamafleet {

// Limits every component enforces.
inline constexpr int kMaxNameLength = 128;
inline constexpr int kMaxLabels = 32;
inline constexpr int kMaxLabelKeyLength = 63;
inline constexpr int kMaxLabelValueLength = 255;
inline constexpr int kMaxIdempotencyKeyLength = 128;
inline constexpr int kMaxPathLength = 4096;
inline constexpr int kMaxBatchSize = 1000;
// YAML nodes (scalars, lists, mappings, empty documents) in one job file: a full spec is
// well under a hundred, so a batch of kMaxBatchSize fits.
inline constexpr int64_t kMaxYamlNodes = 100000;

// A place in a job file: 1-based line and column counted from the start of the file (not
// of the document); 0 when unknown.
struct SourcePosition {
  int line = 0;
  int column = 0;
};

// Where each field of one parsed document is written: the field's path as validation
// names it ("training.lr", "training.betas[1]", "labels.team") mapped to the position of
// its key (of the item, for list items).
class FieldPositions {
 public:
  void Set(std::string path, SourcePosition position);
  // The position of `path`; else that of its nearest written ancestor (a rule broken by a
  // field the document leaves to its default points at the section the field belongs to);
  // {} when neither is written.
  SourcePosition Find(absl::string_view path) const;
  bool empty() const { return positions_.empty(); }

 private:
  std::map<std::string, SourcePosition, std::less<>> positions_;
};

struct ParsedJob {
  v1::JobSpec spec;
  // Derived from the document's content and its occurrence in the file, so submitting
  // the same file twice maps each document to the same key; a document that depends on
  // an earlier one of the file by name also covers that one's key (a changed parent
  // makes a new dependent).
  std::string idempotency_key;
  // Where the document's fields are written in the file, to place violations found later
  // (LocateFieldViolations).
  FieldPositions positions;
};

// Parses a job file: one YAML/JSON document holding a JobSpec, several YAML documents
// ("---"), or a list of JobSpecs. Unknown fields are rejected by name; enum values are
// case-insensitive ("full_shard"). Returns INVALID_ARGUMENT naming the document and the
// field path ("document 2: training.lrr: unknown field (did you mean lr?)"), with one
// field violation per problem (field: the path within its document, "" for the document
// itself) placed where the field is written (LocatedFieldViolationsOf). Before any node
// is built, YAML anchors and aliases (expanding them lets a small file cost gigabytes),
// more than kMaxYamlNodes nodes, and text the YAML parser cannot get past are refused
// (INVALID_ARGUMENT naming the line).
// `overrides` ("training.lr=2e-5", as ApplySetOverride takes them) are applied to every
// document, in order, before its idempotency key is derived: the same file with other
// values is another job. A bad one is INVALID_ARGUMENT naming it.
// Does not apply defaults or validate.
absl::StatusOr<std::vector<ParsedJob>> ParseJobDocuments(
    absl::string_view text, const std::vector<std::string>& overrides = {});

// Merges a YAML node into `message` guided by its descriptor. Fields present in the node
// replace those in the message (repeated fields and maps are replaced whole). Every
// problem is appended to `errors` as "<path>: <what>"; on error the message may be
// partially filled.
void MergeYamlIntoMessage(const YAML::Node& node, const std::string& path,
                          google::protobuf::Message* message, std::vector<std::string>* errors);

// Applies "a.b.c=value" (value in YAML syntax) to the spec, as the trainer's --set and the
// CLI's `submit --set` and `resubmit --set`. INVALID_ARGUMENT naming the field for an
// unknown field or a value it cannot take (the spec is then unchanged), and for text that
// is not key=value.
absl::Status ApplySetOverride(v1::JobSpec* spec, absl::string_view key_eq_value);

// Fills every unset field that has a default (see job.proto). Idempotent.
void ApplyDefaults(v1::JobSpec* spec);

// Checks every rule; returns OK or INVALID_ARGUMENT whose message lists each violation
// with its field path, prefixed by `path_prefix` ("jobs[3]." for batches), joined by "; ".
// Expects defaults applied.
absl::Status ValidateJobSpec(const v1::JobSpec& spec, absl::string_view path_prefix = "");

// parallelism.tensor_parallel, or 1 when unset (ApplyDefaults leaves it unset). The
// data-parallel world is nodes x gpus_per_node / TensorParallelOf(spec).
int TensorParallelOf(const v1::JobSpec& spec);

// The recompute a job's trainer runs: AC_NONE when fsdp.activation_checkpointing is false;
// otherwise AC_SELECTIVE when activation_checkpointing_mode says so, else AC_FULL (and
// AC_NONE for a mode of AC_NONE with the switch unset).
v1::ActivationCheckpointingMode ActivationCheckpointingOf(const v1::FsdpSpec& fsdp);

// Memory one rank of `spec` needs at its peak on a GPU (jobspec/memory_estimate.h), for
// `world_size` ranks (0 = nodes x gpus_per_node). nullopt when the shape is unknown here
// (model.path: only the trainer reads config.json). Expects defaults applied.
std::optional<v1::MemoryEstimate> EstimateJobMemory(const v1::JobSpec& spec, int world_size = 0);

// Time per optimizer step of `spec` on its resources.instance_type (jobspec/
// step_time_estimate.h), with tokens/s, MFU, and GPU-hours (training.max_steps; and per
// 1,000 steps) priced at `price_per_instance_hour` when given. nullopt when the shape or
// the instance type is not known here. Expects defaults applied.
std::optional<v1::StepTimeEstimate> EstimateJobStepTime(const v1::JobSpec& spec,
                                                        std::optional<double> price_per_instance_hour);

// Validation of the other user-supplied request fields.
absl::Status ValidateIdempotencyKey(absl::string_view key, absl::string_view path);

// Field-level detail carried by INVALID_ARGUMENT statuses from the validators above (as
// an absl::Status payload): which field, and what rule it broke. Clients get it as
// grpc-status-details-bin (ErrorDetails) and in HTTP error bodies, to mark the field.
// WithFieldViolations replaces the violations (and positions) the status had.
absl::Status WithFieldViolations(absl::Status status,
                                 const std::vector<v1::FieldViolation>& violations);
std::vector<v1::FieldViolation> FieldViolationsOf(const absl::Status& status);

// A field violation with where its field is written in the job file. The position travels
// as a second payload of the status, beside FieldViolationsOf's, in the same order; it
// does not cross gRPC or HTTP (FieldViolation has no place for it).
struct LocatedFieldViolation {
  v1::FieldViolation violation;
  SourcePosition position;
};
absl::Status WithLocatedFieldViolations(absl::Status status,
                                        const std::vector<LocatedFieldViolation>& violations);
// Every field violation of `status`, with its position ({} where unknown).
std::vector<LocatedFieldViolation> LocatedFieldViolationsOf(const absl::Status& status);

// Places the violations of `status` that ValidateJobSpec(spec, prefix) (or another
// validator given `prefix`) reported on a document parsed with `positions`: each one whose
// field starts with `prefix` and has no position yet gets positions.Find(the rest). Call
// once per document of a batch, each with its prefix. Other statuses pass through.
absl::Status LocateFieldViolations(absl::Status status, const FieldPositions& positions,
                                   absl::string_view prefix = "");

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_JOBSPEC_H_
