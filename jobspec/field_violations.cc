// Field violations as absl::Status payloads (ErrorDetails), each with the position of its field in the job file when known.

#include "jobspec/field_violations.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
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

absl::Status WithLocatedFieldViolations(absl::Status status,
                                        const std::vector<LocatedFieldViolation>& violations) {
  std::vector<v1::FieldViolation> plain;
  for (const LocatedFieldViolation& v : violations) {
    v1::FieldViolation& out = plain.emplace_back(v.violation);
    out.set_line(v.position.line);
    out.set_column(v.position.column);
  }
  return WithFieldViolations(std::move(status), plain);
}

std::vector<LocatedFieldViolation> LocatedFieldViolationsOf(const absl::Status& status) {
  std::vector<LocatedFieldViolation> out;
  for (v1::FieldViolation& v : FieldViolationsOf(status)) {
    LocatedFieldViolation& located = out.emplace_back();
    located.position = SourcePosition{v.line(), v.column()};
    located.violation = std::move(v);
  }
  return out;
}

absl::Status LocateFieldViolations(absl::Status status, const FieldPositions& positions,
                                   absl::string_view prefix) {
  std::vector<LocatedFieldViolation> located = LocatedFieldViolationsOf(status);
  if (located.empty() || positions.empty()) return status;
  for (LocatedFieldViolation& v : located) {
    const std::string& field = v.violation.field();
    if (v.position.line > 0 || !absl::StartsWith(field, prefix)) continue;
    v.position = positions.Find(absl::string_view(field).substr(prefix.size()));
  }
  return WithLocatedFieldViolations(std::move(status), located);
}

namespace jobspec_internal {

void Violations::Add(absl::string_view field, absl::string_view rule) {
  list_.push_back(absl::StrCat(prefix_, field, " ", rule));
  v1::FieldViolation v;
  v.set_field(absl::StrCat(prefix_, field));
  v.set_description(std::string(rule));
  fields_.push_back(std::move(v));
}

absl::Status Violations::ToStatus() const {
  if (list_.empty()) return absl::OkStatus();
  return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(list_, "; ")), fields_);
}

}  // namespace jobspec_internal
}  // namespace llamafleet
