#ifndef LLAMAFLEET_JOBSPEC_YAML_MERGE_H_
#define LLAMAFLEET_JOBSPEC_YAML_MERGE_H_

// Merging YAML nodes into protobuf messages (MergeYamlIntoMessage), with each problem kept
// as data: the field, what is wrong with it and where it is written, so a caller can both
// print it and report it as a located field violation.

#include <string>
#include <vector>

#include "jobspec/jobspec.h"

namespace llamafleet::jobspec_internal {

struct MergeProblem {
  std::string field;        // path of the field; "" for the document itself
  std::string what;         // "unknown field (did you mean lr?)"
  SourcePosition position;  // of the field's key, or of the node that is wrong
  // "<field>: <what>", "document: <what>" for the document itself.
  std::string ToString() const;
};

// MergeYamlIntoMessage with problems as data; when `positions` is given, the position of
// every field the node writes is recorded there (paths relative to the document).
void MergeYaml(const YAML::Node& node, const std::string& path,
               google::protobuf::Message* message, std::vector<MergeProblem>* problems,
               FieldPositions* positions);

// Sets the field at `path` ("training.lr": dot-separated names) of `spec` to `value`, as
// if `value` were written there in a job file. On a problem the spec is unchanged and the
// problems are returned, named by their paths ("training.lrr: unknown field ...").
std::vector<MergeProblem> SetFieldFromYaml(v1::JobSpec* spec, const std::string& path, const YAML::Node& value);

}  // namespace llamafleet::jobspec_internal

#endif  // LLAMAFLEET_JOBSPEC_YAML_MERGE_H_
