// Field violations as absl::Status payloads, with the positions of their fields beside them.

#include "jobspec/field_violations.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
namespace {

constexpr char kFieldViolationsUrl[] = "type.googleapis.com/llamafleet.v1.ErrorDetails";
// "line:column,line:column,...", one entry per field violation in payload order. Only
// this library writes or reads it.
constexpr char kFieldPositionsUrl[] = "llamafleet/jobspec/field-positions";

std::vector<SourcePosition> PositionsOf(const absl::Status& status, size_t count) {
  std::vector<SourcePosition> out(count);
  auto payload = status.GetPayload(kFieldPositionsUrl);
  if (!payload.has_value()) return out;
  const std::string text(*payload);
  const std::vector<absl::string_view> entries = absl::StrSplit(text, ',');
  if (entries.size() != count) return out;  // not written for these violations
  for (size_t i = 0; i < count; ++i) {
    std::pair<absl::string_view, absl::string_view> lc = absl::StrSplit(entries[i], ':');
    if (!absl::SimpleAtoi(lc.first, &out[i].line) || !absl::SimpleAtoi(lc.second, &out[i].column)) {
      return std::vector<SourcePosition>(count);
    }
  }
  return out;
}

}  // namespace

absl::Status WithFieldViolations(absl::Status status,
                                 const std::vector<v1::FieldViolation>& violations) {
  if (status.ok() || violations.empty()) return status;
  v1::ErrorDetails details;
  for (const v1::FieldViolation& v : violations) *details.add_field_violations() = v;
  status.SetPayload(kFieldViolationsUrl, absl::Cord(details.SerializeAsString()));
  status.ErasePayload(kFieldPositionsUrl);  // they were for other violations
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
  std::vector<std::string> positions;
  bool any_position = false;
  for (const LocatedFieldViolation& v : violations) {
    plain.push_back(v.violation);
    positions.push_back(absl::StrCat(v.position.line, ":", v.position.column));
    any_position = any_position || v.position.line > 0;
  }
  status = WithFieldViolations(std::move(status), plain);
  if (!status.ok() && any_position) {
    status.SetPayload(kFieldPositionsUrl, absl::Cord(absl::StrJoin(positions, ",")));
  }
  return status;
}

std::vector<LocatedFieldViolation> LocatedFieldViolationsOf(const absl::Status& status) {
  std::vector<v1::FieldViolation> plain = FieldViolationsOf(status);
  const std::vector<SourcePosition> positions = PositionsOf(status, plain.size());
  std::vector<LocatedFieldViolation> out(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    out[i].violation = std::move(plain[i]);
    out[i].position = positions[i];
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
