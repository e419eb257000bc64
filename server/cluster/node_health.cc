#include "server/cluster/node_health.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llamafleet {
namespace {

constexpr size_t kMaxSummary = 300;

std::string Clean(const std::string& s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

}  // namespace

HealthDecision DecidePreflight(const std::optional<WorkerDrainRecord>& drain,
                               const v1::PreflightResult& result, absl::Time now,
                               absl::Duration cooloff) {
  HealthDecision d;
  if (!result.passed()) {
    if (!drain.has_value()) {
      d.action = HealthDecision::kDrain;
      d.reason = absl::StrCat("pre-flight ", PreflightSummary(result));
    }
    return d;
  }
  if (drain.has_value() && (drain->source == kDrainByPreflight || drain->source == kDrainByGpuHealth) &&
      now - drain->since >= cooloff) {
    d.action = HealthDecision::kUndrain;
  }
  return d;
}

DrainChanges DiffDrains(const std::map<std::string, WorkerDrainRecord>& before,
                        const std::map<std::string, WorkerDrainRecord>& after) {
  DrainChanges c;
  for (const auto& [name, r] : after) {
    auto it = before.find(name);
    if (it == before.end() || !(it->second == r)) c.drained.push_back(r);
  }
  for (const auto& [name, r] : before) {
    if (!after.count(name)) c.undrained.push_back(name);
  }
  return c;
}

std::string PreflightSummary(const v1::PreflightResult& r) {
  std::vector<std::string> failed, parts;
  for (const v1::PreflightCheck& c : r.checks()) {
    const std::string name = Clean(c.name(), 32);
    const std::string detail = Clean(c.detail(), 120);
    if (c.state() == v1::PreflightCheck::FAILED) {
      failed.push_back(detail.empty() ? name : absl::StrCat(name, ": ", detail));
    } else if (c.state() == v1::PreflightCheck::SKIPPED) {
      parts.push_back(absl::StrCat(name, " skipped", detail.empty() ? "" : absl::StrCat(": ", detail)));
    } else {
      parts.push_back(absl::StrCat(name, " ok"));
    }
  }
  std::string s;
  if (!r.passed()) {
    s = absl::StrCat("failed: ", failed.empty() ? "no check passed" : absl::StrJoin(failed, "; "));
  } else {
    s = absl::StrFormat("passed in %.3f s (%s)", r.seconds(), absl::StrJoin(parts, ", "));
  }
  return s.substr(0, kMaxSummary);
}

}  // namespace llamafleet
