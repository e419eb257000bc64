#ifndef LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_
#define LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_

// How the CLI shows jobs and events to people: tables, ages, event lines, `describe`.
// Pure functions of their inputs (the current time is passed in), so they are testable
// without a coordinator. Machine-readable output (-o json|yaml) is protobuf's JSON
// mapping and lives in jobspec.h, not here.

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::cli {

// Left-aligned columns separated by three spaces; rows[0] is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// "-" for JOB_STATE_UNSPECIFIED (an event without a previous state), else the enum name.
std::string StateName(v1::JobState state);

// RFC 3339 in UTC with second precision: 2026-11-30T00:31:05Z; "-" when unset.
std::string FormatTime(const google::protobuf::Timestamp& time);

// Compact age as kubectl shows it: 45s, 12m, 5h, 3d; "-" when unset.
std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now);

// The `get jobs` table. `wide` adds resource and model columns and never shortens the
// reason.
std::string JobsTable(const std::vector<v1::Job>& jobs, bool wide, absl::Time now);

// "SEQ TIME FROM -> TO reason", one event per line, as `watch` prints them.
std::string EventLine(const v1::JobEvent& event);

// The first line of `watch`: "job 42 (name) is QUEUED: reason".
std::string JobStateLine(const v1::Job& job);

// `describe job`: the job's fields, its spec as YAML, and its events as a table.
std::string DescribeJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                        absl::Time now);

// The coordinator names fields by request path (spec.training.lr, jobs[2].spec.model);
// a person thinks in the file they wrote. Rewrites each "; "-separated violation to
// "training.lr ..." (single document) or "document 3: model ..." (batch).
std::string SpecErrorsForFile(const std::string& server_message);

// Indents every non-empty line by `spaces`.
std::string Indent(const std::string& text, int spaces);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_
