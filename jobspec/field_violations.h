#ifndef LLAMAFLEET_JOBSPEC_FIELD_VIOLATIONS_H_
#define LLAMAFLEET_JOBSPEC_FIELD_VIOLATIONS_H_

// The validators' collector of violations: each one as a line of the status message
// ("<prefix><field> <rule>") and as a field violation in its payload.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::jobspec_internal {

class Violations {
 public:
  explicit Violations(absl::string_view prefix) : prefix_(prefix) {}
  void Add(absl::string_view field, absl::string_view rule);
  // OK when nothing was added; else INVALID_ARGUMENT listing every violation, joined by
  // "; ", with the field violations as its payload.
  absl::Status ToStatus() const;
  bool empty() const { return list_.empty(); }

 private:
  std::string prefix_;
  std::vector<std::string> list_;
  std::vector<v1::FieldViolation> fields_;
};

}  // namespace llamafleet::jobspec_internal

#endif  // LLAMAFLEET_JOBSPEC_FIELD_VIOLATIONS_H_
