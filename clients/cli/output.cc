#include "clients/cli/output.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "clients/jobspec/jobspec.h"

namespace llamafleet::cli {
namespace {

// A table column wider than this pushes the reason off a normal terminal.
constexpr size_t kReasonWidth = 60;

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

bool IsSet(const google::protobuf::Timestamp& t) { return t.seconds() != 0 || t.nanos() != 0; }

std::string Shorten(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return absl::StrCat(s.substr(0, width - 3), "...");
}

// Table cells must stay on one line whatever a reason contains.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string ModelName(const v1::ModelSpec& model) {
  return model.preset().empty() ? OrDash(model.path()) : model.preset();
}

}  // namespace

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

std::string StateName(v1::JobState state) {
  return state == v1::JOB_STATE_UNSPECIFIED ? "-" : v1::JobState_Name(state);
}

std::string FormatTime(const google::protobuf::Timestamp& time) {
  if (!IsSet(time)) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", ToTime(time), absl::UTCTimeZone());
}

std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now) {
  if (!IsSet(time)) return "-";
  const int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(now - ToTime(time)));
  if (seconds < 120) return absl::StrCat(seconds, "s");
  if (seconds < 120 * 60) return absl::StrCat(seconds / 60, "m");
  if (seconds < 48 * 3600) return absl::StrCat(seconds / 3600, "h");
  return absl::StrCat(seconds / 86400, "d");
}

std::string JobsTable(const std::vector<v1::Job>& jobs, bool wide, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  if (wide) {
    rows.push_back({"ID", "NAME", "OWNER", "QUEUE", "PRIORITY", "STATE", "NODES", "GPUS/NODE",
                    "MODEL", "SHARDING", "ATTEMPTS", "CREATED", "AGE", "REASON"});
  } else {
    rows.push_back({"ID", "NAME", "OWNER", "QUEUE", "PRIORITY", "STATE", "AGE", "REASON"});
  }
  for (const v1::Job& job : jobs) {
    const v1::JobSpec& spec = job.spec();
    const std::string reason = OneLine(job.status_reason());
    if (wide) {
      rows.push_back({job.id(), spec.name(), job.owner(), spec.queue(),
                      absl::StrCat(spec.priority()), StateName(job.state()),
                      absl::StrCat(spec.resources().nodes()),
                      absl::StrCat(spec.resources().gpus_per_node()), ModelName(spec.model()),
                      v1::ShardingStrategy_Name(spec.fsdp().sharding()),
                      absl::StrCat(job.attempts()), FormatTime(job.create_time()),
                      FormatAge(job.create_time(), now), reason});
    } else {
      rows.push_back({job.id(), spec.name(), job.owner(), spec.queue(),
                      absl::StrCat(spec.priority()), StateName(job.state()),
                      FormatAge(job.create_time(), now), Shorten(reason, kReasonWidth)});
    }
  }
  return FormatTable(rows);
}

std::string EventLine(const v1::JobEvent& event) {
  std::string line = absl::StrCat(event.seq(), " ", FormatTime(event.time()), " ",
                                  StateName(event.from_state()), " -> ",
                                  StateName(event.to_state()));
  if (!event.reason().empty()) absl::StrAppend(&line, " ", OneLine(event.reason()));
  return line;
}

std::string JobStateLine(const v1::Job& job) {
  std::string line = absl::StrCat("job ", job.id(), " (", job.spec().name(), ") is ",
                                  StateName(job.state()));
  if (!job.status_reason().empty()) absl::StrAppend(&line, ": ", OneLine(job.status_reason()));
  return line;
}

std::string Indent(const std::string& text, int spaces) {
  const std::string pad(spaces, ' ');
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty()) absl::StrAppend(&out, pad, line);
    absl::StrAppend(&out, "\n");
  }
  // StrSplit yields an empty last piece after a trailing newline; do not double it.
  if (!text.empty() && text.back() == '\n') out.pop_back();
  return out;
}

std::string DescribeJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                        absl::Time now) {
  std::vector<std::vector<std::string>> fields = {
      {"ID:", job.id()},
      {"Name:", job.spec().name()},
      {"Owner:", job.owner()},
      {"Queue:", job.spec().queue()},
      {"Priority:", absl::StrCat(job.spec().priority())},
      {"State:", StateName(job.state())},
      {"Reason:", OrDash(OneLine(job.status_reason()))},
      {"Created:", absl::StrCat(FormatTime(job.create_time()), " (",
                                FormatAge(job.create_time(), now), " ago)")},
      {"Updated:", FormatTime(job.update_time())},
      {"Attempts:", absl::StrCat(job.attempts())},
      {"Idempotency key:", OrDash(job.idempotency_key())},
  };
  std::string out = FormatTable(fields);
  absl::StrAppend(&out, "Spec:\n", Indent(MessageToYaml(job.spec()), 2));
  if (out.back() != '\n') out += "\n";
  absl::StrAppend(&out, "Events:\n");
  if (events.empty()) {
    absl::StrAppend(&out, "  <none>\n");
    return out;
  }
  std::vector<std::vector<std::string>> rows = {{"SEQ", "TIME", "TYPE", "FROM", "TO", "REASON"}};
  for (const v1::JobEvent& e : events) {
    rows.push_back({absl::StrCat(e.seq()), FormatTime(e.time()), e.type(),
                    StateName(e.from_state()), StateName(e.to_state()), OneLine(e.reason())});
  }
  absl::StrAppend(&out, Indent(FormatTable(rows), 2));
  return out;
}

std::string SpecErrorsForFile(const std::string& server_message) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(server_message, "; ")) {
    absl::string_view rest = part;
    if (absl::ConsumePrefix(&rest, "spec.")) {
      parts.emplace_back(rest);
      continue;
    }
    // jobs[N].spec.field or jobs[N].idempotency_key
    int index = 0;
    absl::string_view probe = part;
    const size_t close = probe.find("].");
    if (absl::ConsumePrefix(&probe, "jobs[") && close != absl::string_view::npos &&
        absl::SimpleAtoi(part.substr(5, close - 5), &index)) {
      absl::string_view field = part.substr(close + 2);
      absl::ConsumePrefix(&field, "spec.");
      parts.push_back(absl::StrCat("document ", index + 1, ": ", field));
      continue;
    }
    parts.emplace_back(part);
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace llamafleet::cli
