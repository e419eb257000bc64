#ifndef LLAMAFLEET_CLIENTS_CLI_COMMAND_H_
#define LLAMAFLEET_CLIENTS_CLI_COMMAND_H_

// What every `llamafleet` command gets (the Context), the helpers they share, and the
// commands themselves, one cmd_*.cc file each. cli.cc builds the command tree, fills in
// each command's flags and calls its Run function; a command returns a status and
// prints its results to ctx.out, never its errors (cli.h says how those reach the user).

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clients/cli/usage_output.h"
#include "clients/client/client.h"
#include "google/protobuf/message.h"

namespace llamafleet::cli {

enum class Format { kTable, kWide, kJson, kYaml };

// What a command needs once flags are parsed.
struct Context {
  Format format = Format::kTable;
  ClientOptions client_options;
  // Bounds a whole watch (reconnects included); infinite unless --timeout is given.
  absl::Duration watch_timeout = absl::InfiniteDuration();
  // `out` is a terminal: `watch` draws a live progress line instead of printing lines.
  bool out_is_tty = false;
  // Columns of that terminal (a redrawn line must not wrap).
  size_t terminal_width = 80;
  std::istream* in = nullptr;
  // Everything the coordinator sent passes through EscapeControls on its way out.
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // The same stdout without escaping, for the CLI's own control sequences only.
  std::ostream* raw_out = nullptr;
  // Clients made by Connect, owned by RunCli.
  std::vector<std::unique_ptr<Client>>* clients = nullptr;
};

// ---------------------------------------------------------------------------
// Shared helpers (command.cc).
// ---------------------------------------------------------------------------

// The user's mistake on the command line: exit 2, not 1.
absl::Status UsageError(const std::string& message);
bool IsUsageError(const absl::Status& status);

// "Stopped by signal `signo`" (Ctrl-C): exit 128+signal, nothing printed.
absl::Status Interrupted(int signo);
// The signal that interrupted a command, or 0.
int InterruptSignal(const absl::Status& status);

// A job that ended otherwise than a command waited for (FAILED, CANCELLED) or did not end
// in time: exits with `exit_code` (cli.h: kExitJobFailed, kExitJobCancelled,
// kExitJobTimeout) after the usual one-line message.
absl::Status JobOutcomeError(absl::StatusCode code, int exit_code, const std::string& message);
// That exit code, or 0.
int JobOutcomeExitCode(const absl::Status& status);

// Prefixes the message of an error with what we were doing, keeping code and payloads.
absl::Status WithContext(const absl::Status& status, const std::string& context);

// A positive duration: "30s", "2m", "500ms", or a number of seconds; a usage error
// naming `flag` otherwise.
absl::StatusOr<absl::Duration> ParseDuration(const std::string& flag, const std::string& text);

// MessageToJson (every field, defaults included), ending with a newline.
std::string ToJson(const google::protobuf::Message& message, bool pretty);
// MessageToYaml, ending with a newline.
std::string ToYaml(const google::protobuf::Message& message);

// Prints a message in a machine format (-o json|yaml); returns false for table formats.
bool PrintMachine(const Context& ctx, const google::protobuf::Message& message);

// The client for this command; RunCli owns it. A bad address or TLS file is a usage error.
absl::StatusOr<Client*> Connect(const Context& ctx);

// ---------------------------------------------------------------------------
// The commands.
// ---------------------------------------------------------------------------

// submit -f FILE... (cmd_submit.cc)
struct SubmitFlags {
  // Files, directories (their *.yaml, *.yml and *.json files, by name) or "-" for stdin.
  std::vector<std::string> files;
  bool dry_run = false;
  std::string idempotency_key;
  // Then wait for every job submitted, as `wait --for succeeded`.
  bool wait = false;
  // --set key=value, applied to every document before its key is derived (ApplySetOverride).
  std::vector<std::string> overrides;
};
absl::Status RunSubmit(const Context& ctx, const SubmitFlags& flags);
// A usage error naming the first --set that sets no field of a spec or a value its field
// cannot take; OK otherwise.
absl::Status CheckOverrides(const std::vector<std::string>& overrides);
// The line `submit` and `resubmit` print for a job: "job 4 created", with "(resubmitted
// from job 3)" for a resubmission; for a matched key "job 4 already exists (idempotency key
// K)", and for a job that FAILED or was CANCELLED how to run it again.
std::string SubmittedLine(const v1::SubmitJobResponse& response);

// resubmit ID [--set key=value]... (cmd_resubmit.cc): the job's spec as submitted
// (Job.submitted_spec) with the changes, submitted as a job derived from it, under a key
// derived from the job and the resulting spec (running the same command again is the same
// new job).
struct ResubmitFlags {
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool wait = false;
};
absl::Status RunResubmit(const Context& ctx, const std::string& id, const ResubmitFlags& flags);

// get jobs, get job ID (cmd_get.cc)
struct ListFlags {
  std::vector<std::string> states;
  std::string queue;
  std::string owner;
  std::vector<std::string> labels;
  std::string sweep;  // only the jobs of this sweep (label sweep=NAME)
  int limit = 100;
  bool all = false;
  int page_size = 0;
  std::string page_token;
};
absl::Status RunGetJobs(const Context& ctx, const ListFlags& flags);
// Follows page tokens until flags.limit jobs (or all, with flags.all) are collected; the
// returned next_page_token is set when more jobs may remain.
absl::StatusOr<v1::ListJobsResponse> ListPages(Client& client, v1::ListJobsRequest request,
                                               const ListFlags& flags);
absl::Status RunGetJob(const Context& ctx, const std::string& id);

// describe job ID (cmd_describe.cc)
absl::Status RunDescribeJob(const Context& ctx, const std::string& id);

// cancel ID, cancel --sweep NAME (cmd_cancel.cc)
absl::Status RunCancel(const Context& ctx, const std::string& id, const std::string& reason);
// cancel --sweep NAME: every unfinished job of the caller's sweep NAME (label sweep=NAME).
absl::Status RunCancelSweep(const Context& ctx, const std::string& sweep, const std::string& reason);

// delete job ID [--artifacts] (cmd_delete.cc): a finished job's records, logs and default
// checkpoint dir; with `artifacts` its export too. Prints a line per thing removed or kept.
absl::Status RunDeleteJob(const Context& ctx, const std::string& id, bool artifacts);

// release-dir PATH (cmd_release_dir.cc): an admin ends every job's claim on PATH, so it
// keeps no other user's jobs out. Prints a line per claim released.
absl::Status RunReleaseDir(const Context& ctx, const std::string& path);

// wait ID... (cmd_wait.cc): blocks on each job's watch stream until every job has ended,
// printing one line per job as it ends. `succeeded_only`: a job that FAILED or was
// CANCELLED fails the wait (--for succeeded); otherwise any end meets it (--for finished).
// Bounded by ctx.watch_timeout. Exit codes as cli.h says.
absl::Status RunWait(const Context& ctx, const std::vector<std::string>& ids, bool succeeded_only);
// The exit status `wait` gives a job that ended in `state` (OK when it meets the wait).
absl::Status JobEndStatus(const std::string& id, v1::JobState state, const std::string& reason,
                          bool succeeded_only);

// watch ID (cmd_watch.cc): `interval` is how often the job's metrics are polled.
absl::Status RunWatch(const Context& ctx, const std::string& id, bool history,
                      absl::Duration interval);

// logs ID (cmd_logs.cc)
struct LogsFlags {
  bool follow = false;
  int rank = -1;    // -1: every rank
  int attempt = 0;  // 0: the newest
  int tail = 0;     // 0: from the beginning
  bool raw = false; // the trainer's JSON records as they are, not as text (log_record.h)
};
// `rank_given`: --rank was on the command line (so a negative one is an error).
absl::Status RunLogs(const Context& ctx, const std::string& id, const LogsFlags& flags,
                     bool rank_given);

// checkpoints ID, attempts ID, samples ID: a job's recorded history (cmd_history.cc)
absl::Status RunCheckpoints(const Context& ctx, const std::string& id);
absl::Status RunAttempts(const Context& ctx, const std::string& id);
// samples ID [--step N | --latest]: the samples of every step (or one) in full (SamplesText).
absl::Status RunSamples(const Context& ctx, const std::string& id, int64_t step, bool latest);
// What `attempts` held, GPUs or CPU ranks, from the cluster's worker list (kGpu when it
// cannot be read); the unit `attempts` and `describe` show time in.
Device HeldDevice(Client& client, const std::vector<v1::Attempt>& attempts);
// ClusterDevice of the coordinator's workers: kCpu when every one is a CPU worker; kGpu
// when the list cannot be read.
Device WorkersDevice(Client& client);

// workers, queues, whoami: the cluster and the caller (cmd_cluster.cc)
absl::Status RunWorkers(const Context& ctx);
absl::Status RunQueues(const Context& ctx);
absl::Status RunWhoAmI(const Context& ctx);

// get usage [--user U] (cmd_usage.cc): GPU time and cost per user and queue.
absl::Status RunGetUsage(const Context& ctx, const std::string& user);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_COMMAND_H_
