#ifndef LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_
#define LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_

// How the CLI shows jobs, events, workers and checkpoints to people: tables, ages, event
// lines, `describe`.
// Pure functions of their inputs (the current time is passed in), so they are testable
// without a coordinator. Machine-readable output (-o json|yaml) is protobuf's JSON
// mapping and lives in jobspec.h, not here.

#include <streambuf>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "clients/cli/escape.h"
#include "clients/cli/spec_lines.h"
#include "clients/cli/usage_output.h"  // Device
#include "common/byte_size.h"          // FormatBytes
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::cli {

// Left-aligned columns separated by three spaces; rows[0] is the header. Every cell goes
// through EscapeTableCell: the table has exactly one line per row and no control
// character but the '\n' ending each line.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// "-" for JOB_STATE_UNSPECIFIED (an event without a previous state), else the enum name.
std::string StateName(v1::JobState state);

// RFC 3339 in UTC with second precision: 2026-11-30T00:31:05Z; "-" when unset.
std::string FormatTime(const google::protobuf::Timestamp& time);

// Compact age as kubectl shows it: 45s, 12m, 5h, 3d; "-" when unset.
std::string FormatAge(const google::protobuf::Timestamp& time, absl::Time now);

// Thousands separated: 1,234,567 (negative numbers keep their sign).
std::string FormatCount(int64_t n);

// A countdown as people read it: 45s, 1m05s, 2h03m, 3d04h; a fraction of a second
// rounds up. Negative counts as zero.
std::string FormatEta(absl::Duration d);

// Why a job is where it is, on one line: the scheduler's message for a pending QUEUED
// job, otherwise the job's status reason.
std::string JobReason(const v1::Job& job);

// The `get jobs` table. `wide` adds resource, model, GPU-hours (CPU-hours when `device`
// is kCpu), cost and queue-position columns and never shortens the reason.
std::string JobsTable(const std::vector<v1::Job>& jobs, bool wide, absl::Time now,
                      Device device = Device::kGpu);

// The `workers` table: NAME STATE SLOTS GPU-MODEL EFA INSTANCE LAST-HEARTBEAT TASKS.
// SLOTS is allocated/total GPUs (CPU ranks on a CPU worker, whose GPU-MODEL is "cpu").
// `wide` adds host, address, CPUs, memory, labels and mean GPU utilisation.
std::string WorkersTable(const std::vector<v1::WorkerInfo>& workers, bool wide, absl::Time now);
// QUEUE QUEUED RUNNING GPUS (allocated/quota) OLDEST-QUEUED
std::string QueuesTable(const std::vector<v1::Queue>& queues, absl::Time now);

// The `checkpoints` table: STEP ATTEMPT LOSS SIZE TIME PATH, in the order given.
std::string CheckpointsTable(const std::vector<v1::Checkpoint>& checkpoints);

// The `attempts` table: ATTEMPT STATE NODES WORKERS STARTED ENDED STARTUP CLASS RESIZE
// GPU-TIME COST REASON, in the order given. NODES is the gang size (the task count for
// records older than it); STARTUP is placement to the first step ("1.93 s"), else the phase
// the start has reached ("at rendezvous"), else "-"; GPU-TIME and COST as usage_output.h
// formats them (an active attempt's up to when it was read), CPU-TIME for kCpu.
std::string AttemptsTable(const std::vector<v1::Attempt>& attempts, Device device = Device::kGpu);
// One attempt's start-up phases: PHASE AT (seconds since placed) TOOK (the phase's own
// seconds; for "placed", the time queued) DETAIL, in the order they were done.
std::string AttemptPhasesTable(const v1::Attempt& attempt);
// AttemptsTable, then "Start-up of attempt N ...:" and its AttemptPhasesTable for each
// attempt with phases (what `attempts` and `describe` print).
std::string AttemptsSection(const std::vector<v1::Attempt>& attempts, Device device = Device::kGpu);

// "SEQ TIME FROM -> TO reason", one event per line, as `watch` prints them.
std::string EventLine(const v1::JobEvent& event);

// The first line of `watch`: "job 42 (name) is QUEUED: reason" (JobReason).
std::string JobStateLine(const v1::Job& job);

// `describe job`: the job's fields (restarts, workers, GPU time and cost), why it is pending, its
// latest metrics, its checkpoints, its attempts (gang size, resizes), its spec as YAML, and its
// events as a table. `device`: what the time was held on ("CPU time:" for kCpu). `evals`:
// the job's evaluation history (GetJobMetrics), from which a job with named eval sets
// (data.eval) shows each set's latest loss. DPO's rewards with the latest metrics.
// `samples`: the latest evaluation's samples (SamplesSummary), after the metrics.
std::string DescribeJob(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                        const std::vector<v1::Checkpoint>& checkpoints, absl::Time now,
                        const std::vector<v1::Attempt>& attempts = {}, Device device = Device::kGpu,
                        const std::vector<v1::EvalPoint>& evals = {},
                        const std::vector<v1::Sample>& samples = {});

// Where a submitted job came from: its file and where each of its fields is written.
struct JobSource {
  std::string file;
  FieldPositions positions;
};

// The coordinator names fields by request path (spec.training.lr, jobs[2].spec.model);
// a person thinks in the file they wrote. Writes each violation as "training.lr <rule>"
// (single job) or "document 3: model <rule>" (batch); with `documents` (one name per batch
// entry, e.g. "b.yaml document 2"), "<name>: model <rule>". With `sources` (one per batch
// entry), a violation whose field (or its nearest written parent) is in the file reads
// "<file>:<line>: model <rule>", as compilers print errors. Joined by "; ".
std::string SpecErrorsForFile(const std::vector<v1::FieldViolation>& violations,
                              const std::vector<std::string>& documents = {},
                              const std::vector<JobSource>& sources = {});

// Indents every non-empty line by `spaces`.
std::string Indent(const std::string& text, int spaces);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_OUTPUT_H_
