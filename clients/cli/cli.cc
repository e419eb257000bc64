#include "clients/cli/cli.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/cli/interrupt.h"
#include "clients/cli/output.h"
#include "clients/cli/progress.h"
#include "clients/client/client.h"
#include "jobspec/jobspec.h"
#include "google/protobuf/util/json_util.h"

namespace llamafleet::cli {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";
// Marks a status as the user's mistake on the command line (exit 2, not 1).
constexpr char kUsagePayload[] = "llamafleet.dev/usage";
constexpr int kServerMaxPageSize = 1000;

absl::Status UsageError(const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// Marks a status as "stopped by this signal" (Ctrl-C): exit 128+signal, nothing printed.
constexpr char kInterruptedPayload[] = "llamafleet.dev/interrupted";

absl::Status Interrupted(int signo) {
  absl::Status status = absl::CancelledError("interrupted");
  status.SetPayload(kInterruptedPayload, absl::Cord(absl::StrCat(signo)));
  return status;
}

// The signal that interrupted a command, or 0.
int InterruptSignal(const absl::Status& status) {
  const auto payload = status.GetPayload(kInterruptedPayload);
  int signo = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &signo)) return 0;
  return signo;
}

// Prefixes the message of an error with what we were doing, keeping code and payloads.
absl::Status WithContext(const absl::Status& status, const std::string& context) {
  absl::Status out(status.code(), absl::StrCat(context, status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

enum class Format { kTable, kWide, kJson, kYaml };

// Flags every command shares.
struct GlobalFlags {
  std::string coordinator = kDefaultCoordinator;
  std::string output = "table";
  std::string user;
  std::string token;
  std::string tls_ca;
  std::string timeout = "30s";
};

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

// Set by LeaveConnectionsOpenAtExit.
bool g_leave_connections_open = false;

// A positive duration: "30s", "2m", "500ms", or a number of seconds.
absl::StatusOr<absl::Duration> ParseDuration(const std::string& flag, const std::string& text) {
  double seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' is not a duration (e.g. 30s, 2m)"));
  }
  if (d <= absl::ZeroDuration()) return UsageError(absl::StrCat(flag, " must be > 0"));
  return d;
}

absl::StatusOr<Context> MakeContext(const GlobalFlags& flags, bool watch_timeout_set) {
  Context ctx;
  if (flags.output == "table") {
    ctx.format = Format::kTable;
  } else if (flags.output == "wide") {
    ctx.format = Format::kWide;
  } else if (flags.output == "json") {
    ctx.format = Format::kJson;
  } else if (flags.output == "yaml") {
    ctx.format = Format::kYaml;
  } else {
    return UsageError(
        absl::StrCat("-o: '", flags.output, "' is not one of table, wide, json, yaml"));
  }
  absl::StatusOr<absl::Duration> timeout = ParseDuration("--timeout", flags.timeout);
  if (!timeout.ok()) return timeout.status();
  ctx.client_options.address = flags.coordinator;
  ctx.client_options.user = flags.user;
  ctx.client_options.token = flags.token;
  ctx.client_options.tls_ca_file = flags.tls_ca;
  ctx.client_options.timeout = *timeout;
  // A watch runs until the job ends; only an explicit --timeout bounds it.
  if (watch_timeout_set) ctx.watch_timeout = *timeout;
  return ctx;
}

// Scripts parse this, so every field is printed, defaults included, under its proto name.
std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = pretty;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  if (json.empty() || json.back() != '\n') json += "\n";
  return json;
}

std::string ToYaml(const google::protobuf::Message& message) {
  std::string yaml = MessageToYaml(message);
  if (yaml.empty() || yaml.back() != '\n') yaml += "\n";
  return yaml;
}

// Prints a message in a machine format; returns false for table formats.
bool PrintMachine(const Context& ctx, const google::protobuf::Message& message) {
  if (ctx.format == Format::kJson) {
    *ctx.out << ToJson(message, /*pretty=*/true);
    return true;
  }
  if (ctx.format == Format::kYaml) {
    *ctx.out << ToYaml(message);
    return true;
  }
  return false;
}

// The client for this command; RunCli owns it (see LeaveConnectionsOpenAtExit).
absl::StatusOr<Client*> Connect(const Context& ctx) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(ctx.client_options);
  if (!client.ok()) return UsageError(std::string(client.status().message()));
  ctx.clients->push_back(std::move(*client));
  return ctx.clients->back().get();
}

// ---------------------------------------------------------------------------
// submit
// ---------------------------------------------------------------------------

struct SubmitFlags {
  // Files, directories (their *.yaml, *.yml and *.json files, by name) or "-" for stdin.
  std::vector<std::string> files;
  bool dry_run = false;
  std::string idempotency_key;
};

absl::StatusOr<std::string> ReadInput(const std::string& file, std::istream& in) {
  if (file == "-") {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ifstream stream(file, std::ios::binary);
  if (!stream)
    return absl::NotFoundError(absl::StrCat("cannot read ", file, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) return absl::DataLossError(absl::StrCat("cannot read ", file));
  return text.str();
}

// The job files `-f` names: a directory stands for its *.yaml, *.yml and *.json files
// (not recursive, sorted by name, so a re-run batches them the same way).
absl::StatusOr<std::vector<std::string>> ExpandJobFiles(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  for (const std::string& arg : args) {
    struct stat st = {};
    if (arg == "-" || stat(arg.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      files.push_back(arg);  // a missing file is reported when it is read
      continue;
    }
    DIR* dir = opendir(arg.c_str());
    if (dir == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot read ", arg, ": ", std::strerror(errno)));
    }
    std::vector<std::string> names;
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.') continue;
      if (!absl::EndsWith(name, ".yaml") && !absl::EndsWith(name, ".yml") &&
          !absl::EndsWith(name, ".json")) {
        continue;
      }
      const std::string path = absl::StrCat(arg, absl::EndsWith(arg, "/") ? "" : "/", name);
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(path);
    }
    closedir(dir);
    if (names.empty()) {
      return UsageError(absl::StrCat("-f ", arg, ": no *.yaml, *.yml or *.json files in it"));
    }
    std::sort(names.begin(), names.end());
    files.insert(files.end(), names.begin(), names.end());
  }
  if (std::count(files.begin(), files.end(), "-") > 1) {
    return UsageError("-f -: stdin can be read only once");
  }
  return files;
}

// Submission errors read in terms of the file the user wrote.
// `documents` names each job of the batch by file and document ("b.yaml document 2") when
// the batch came from several files; empty otherwise.
absl::Status SubmitError(const absl::Status& status, const std::vector<std::string>& documents) {
  const absl::string_view message = status.message();
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !(absl::StartsWith(message, "spec.") || absl::StartsWith(message, "jobs["))) {
    return status;  // not about the spec (e.g. a malformed --user)
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid job spec: ", SpecErrorsForFile(std::string(status.message()), documents)));
}

void PrintSubmitted(const Context& ctx, const v1::SubmitJobsResponse& response, bool dry_run) {
  if (PrintMachine(ctx, response)) return;
  for (int i = 0; i < response.jobs_size(); ++i) {
    const v1::SubmitJobResponse& r = response.jobs(i);
    if (dry_run) {
      // The effective specs, as a multi-document YAML that could be submitted as is.
      if (i > 0) *ctx.out << "---\n";
      *ctx.out << "# " << r.job().spec().name() << ": valid (dry run, nothing stored)\n";
      if (r.job().has_memory_estimate()) {
        *ctx.out << "# memory estimate: " << MemoryEstimateLine(r.job().memory_estimate()) << "\n";
      }
      *ctx.out << ToYaml(r.job().spec());
    } else if (r.created()) {
      *ctx.out << "job " << r.job().id() << " created\n";
    } else {
      *ctx.out << "job " << r.job().id() << " already exists (idempotency key "
               << r.job().idempotency_key() << ")\n";
    }
  }
}

absl::Status RunSubmit(const Context& ctx, const SubmitFlags& flags) {
  absl::StatusOr<std::vector<std::string>> files = ExpandJobFiles(flags.files);
  if (!files.ok()) return files.status();
  // Every document of every file, in order; `documents` names each one for errors.
  std::vector<ParsedJob> parsed;
  std::vector<std::string> documents;
  for (const std::string& file : *files) {
    absl::StatusOr<std::string> text = ReadInput(file, *ctx.in);
    if (!text.ok()) return text.status();
    const std::string source = file == "-" ? "stdin" : file;
    absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(*text);
    if (!jobs.ok()) return WithContext(jobs.status(), absl::StrCat(source, ": "));
    for (size_t i = 0; i < jobs->size(); ++i) {
      documents.push_back(jobs->size() == 1 ? source
                                            : absl::StrCat(source, " document ", i + 1));
      parsed.push_back(std::move((*jobs)[i]));
    }
  }
  if (!flags.idempotency_key.empty() && parsed.size() > 1) {
    return UsageError(absl::StrCat("--idempotency-key applies to a single job; ",
                                   files->size() == 1 ? (*files)[0] : "the files",
                                   " hold ", parsed.size(),
                                   " (each gets a key derived from its document)"));
  }
  // One file keeps its errors as "document N"; several name the file.
  if (files->size() == 1) documents.clear();
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();

  v1::SubmitJobsResponse responses;
  if (parsed.size() == 1) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = std::move(parsed[0].spec);
    request.set_idempotency_key(flags.idempotency_key.empty() ? parsed[0].idempotency_key
                                                              : flags.idempotency_key);
    request.set_dry_run(flags.dry_run);
    absl::StatusOr<v1::SubmitJobResponse> response = (*client)->SubmitJob(request);
    if (!response.ok()) return SubmitError(response.status(), documents);
    *responses.add_jobs() = std::move(*response);
  } else {
    // One call per kMaxBatchSize jobs: the coordinator stores each batch whole or not at
    // all. A later batch that fails leaves the earlier ones stored; re-running the same
    // command is safe, since every document keeps its derived idempotency key.
    for (size_t begin = 0; begin < parsed.size(); begin += kMaxBatchSize) {
      const size_t end = std::min(parsed.size(), begin + static_cast<size_t>(kMaxBatchSize));
      v1::SubmitJobsRequest request;
      request.set_dry_run(flags.dry_run);
      for (size_t i = begin; i < end; ++i) {
        v1::SubmitJobRequest* item = request.add_jobs();
        *item->mutable_spec() = std::move(parsed[i].spec);
        item->set_idempotency_key(parsed[i].idempotency_key);
      }
      absl::StatusOr<v1::SubmitJobsResponse> response = (*client)->SubmitJobs(request);
      if (!response.ok()) {
        const std::vector<std::string> names =
            documents.empty() ? documents
                              : std::vector<std::string>(documents.begin() + begin,
                                                         documents.begin() + end);
        absl::Status status = SubmitError(response.status(), names);
        if (begin > 0) {
          PrintSubmitted(ctx, responses, flags.dry_run);
          status = WithContext(status, absl::StrCat("jobs ", begin + 1, "-", end, " (the first ",
                                                    begin, " were submitted): "));
        }
        return status;
      }
      for (v1::SubmitJobResponse& r : *response->mutable_jobs()) {
        *responses.add_jobs() = std::move(r);
      }
    }
  }
  PrintSubmitted(ctx, responses, flags.dry_run);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// get jobs / get job
// ---------------------------------------------------------------------------

struct ListFlags {
  std::vector<std::string> states;
  std::string queue;
  std::string owner;
  std::vector<std::string> labels;
  int limit = 100;
  bool all = false;
  int page_size = 0;
  std::string page_token;
};

absl::StatusOr<v1::ListJobsRequest> MakeListRequest(const ListFlags& flags) {
  v1::ListJobsRequest request;
  for (const std::string& value : flags.states) {
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      v1::JobState state;
      const std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
      if (!v1::JobState_Parse(name, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
        return UsageError(absl::StrCat(
            "--state: '", part,
            "' is not one of queued, scheduled, running, succeeded, failed, cancelled, "
            "restarting, preempting"));
      }
      request.add_states(state);
    }
  }
  for (const std::string& label : flags.labels) {
    if (label.find('=') == std::string::npos || label.front() == '=') {
      return UsageError(absl::StrCat("--label expects key=value, got '", label, "'"));
    }
    request.add_labels(label);
  }
  if (flags.limit < 1) return UsageError("--limit must be >= 1");
  if (flags.page_size < 0) return UsageError("--page-size must be >= 0");
  request.set_queue(flags.queue);
  request.set_owner(flags.owner);
  request.set_page_token(flags.page_token);
  return request;
}

// Follows page tokens until `limit` jobs (or all, with --all) are collected. The
// returned next_page_token is set when more jobs may remain.
absl::StatusOr<v1::ListJobsResponse> ListPages(Client& client, v1::ListJobsRequest request,
                                               const ListFlags& flags) {
  v1::ListJobsResponse collected;
  while (true) {
    const int remaining = flags.all ? kServerMaxPageSize : flags.limit - collected.jobs_size();
    int page = std::min(remaining, kServerMaxPageSize);
    if (flags.page_size > 0) page = std::min(page, flags.page_size);
    request.set_page_size(page);
    absl::StatusOr<v1::ListJobsResponse> response = client.ListJobs(request);
    if (!response.ok()) return response.status();
    for (v1::Job& job : *response->mutable_jobs()) *collected.add_jobs() = std::move(job);
    collected.set_next_page_token(response->next_page_token());
    // An empty page with a token would loop forever; treat it as the end.
    if (response->next_page_token().empty() || response->jobs_size() == 0) return collected;
    if (!flags.all && collected.jobs_size() >= flags.limit) return collected;
    request.set_page_token(response->next_page_token());
  }
}

absl::Status RunGetJobs(const Context& ctx, const ListFlags& flags) {
  absl::StatusOr<v1::ListJobsRequest> request = MakeListRequest(flags);
  if (!request.ok()) return request.status();
  // The plain table needs only the summary; -o wide shows model and sharding, and
  // -o json/yaml print whole jobs.
  request->set_view(ctx.format == Format::kTable ? v1::JOB_VIEW_BASIC : v1::JOB_VIEW_FULL);
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ListJobsResponse> response = ListPages(**client, *request, flags);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  if (response->jobs_size() == 0) {
    *ctx.out << "No jobs found.\n";
    return absl::OkStatus();
  }
  std::vector<v1::Job> jobs(response->jobs().begin(), response->jobs().end());
  *ctx.out << JobsTable(jobs, ctx.format == Format::kWide, absl::Now());
  if (!response->next_page_token().empty()) {
    // A note, not an error: the table itself is complete as requested.
    *ctx.err << "llamafleet: showing the newest " << response->jobs_size()
             << " jobs; more may exist (use --limit N or --all)\n";
  }
  return absl::OkStatus();
}

absl::Status RunGetJob(const Context& ctx, const std::string& id) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::Job> job = (*client)->GetJob(id);
  if (!job.ok()) return job.status();
  if (PrintMachine(ctx, *job)) return absl::OkStatus();
  *ctx.out << JobsTable({*job}, ctx.format == Format::kWide, absl::Now());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// describe job
// ---------------------------------------------------------------------------

absl::Status RunDescribeJob(const Context& ctx, const std::string& id) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::Job> job = (*client)->GetJob(id);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::vector<v1::JobEvent>> events = (*client)->GetAllJobEvents(id);
  if (!events.ok()) return events.status();
  absl::StatusOr<v1::ListCheckpointsResponse> checkpoints = (*client)->ListCheckpoints(id);
  if (!checkpoints.ok()) return checkpoints.status();
  v1::GetJobEventsResponse event_list;
  for (const v1::JobEvent& e : *events) *event_list.add_events() = e;
  // No proto message holds a job with its events and checkpoints; compose the stable
  // renderings: {"job": Job, "events": [JobEvent], "checkpoints": [Checkpoint]}.
  if (ctx.format == Format::kJson) {
    std::string job_json = ToJson(*job, /*pretty=*/false);
    std::string events_json = ToJson(event_list, /*pretty=*/false);
    std::string checkpoints_json = ToJson(*checkpoints, /*pretty=*/false);
    job_json.pop_back();
    // Keep only the arrays of {"events":[...]} and {"checkpoints":[...]}.
    events_json = events_json.substr(events_json.find('['));
    events_json.resize(events_json.rfind(']') + 1);
    checkpoints_json = checkpoints_json.substr(checkpoints_json.find('['));
    checkpoints_json.resize(checkpoints_json.rfind(']') + 1);
    *ctx.out << "{\"job\":" << job_json << ",\"events\":" << events_json
             << ",\"checkpoints\":" << checkpoints_json << "}\n";
    return absl::OkStatus();
  }
  if (ctx.format == Format::kYaml) {
    *ctx.out << "job:\n" << Indent(ToYaml(*job), 2);
    if (events->empty()) {
      *ctx.out << "events: []\n";
    } else {
      *ctx.out << ToYaml(event_list);
    }
    if (checkpoints->checkpoints().empty()) {
      *ctx.out << "checkpoints: []\n";
    } else {
      *ctx.out << ToYaml(*checkpoints);
    }
    return absl::OkStatus();
  }
  const std::vector<v1::Checkpoint> checkpoint_list(checkpoints->checkpoints().begin(),
                                                    checkpoints->checkpoints().end());
  absl::StatusOr<v1::ListAttemptsResponse> attempts = (*client)->ListAttempts(id);
  if (!attempts.ok()) return attempts.status();
  *ctx.out << DescribeJob(*job, *events, checkpoint_list, absl::Now(),
                          {attempts->attempts().begin(), attempts->attempts().end()});
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// cancel
// ---------------------------------------------------------------------------

absl::Status RunCancel(const Context& ctx, const std::string& id, const std::string& reason) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason(reason);
  absl::StatusOr<v1::CancelJobResponse> response = (*client)->CancelJob(request);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  // The server says "cancelled", or a full sentence ("job 7 is already SUCCEEDED").
  const std::string& message = response->message();
  if (absl::StartsWith(message, "job ")) {
    *ctx.out << message << "\n";
  } else {
    *ctx.out << "job " << response->job().id() << " " << message << "\n";
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// watch
// ---------------------------------------------------------------------------

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

// How long a watch keeps trying to resume after losing the coordinator.
constexpr absl::Duration kWatchResumeWindow = absl::Seconds(60);
// A metrics poll must not hold up the end of a watch for a whole --timeout.
constexpr absl::Duration kMaxPollTimeout = absl::Seconds(5);
// Metrics history points fetched once to start the ETA estimate.
constexpr int kEtaHistoryPoints = 200;

// Erases the terminal line the cursor is on (after '\r').
constexpr char kClearLine[] = "\r\x1b[K";

// Prints a watch, across reconnects: the first snapshot, then each event once. In the
// table formats it also shows training progress from the metrics polls: a live line
// redrawn in place on a terminal, a "step ..." line per new step through a pipe.
// -o json|yaml print only the WatchJobResponse messages, one per line/document.
//
// Thread-safe: the event stream (main thread) and the metrics poller call in.
class WatchPrinter {
 public:
  enum class Mode { kMachine, kLines, kProgress };

  // `fetch` reads the job now; it is used to show the final metrics before the event
  // that ends the job.
  WatchPrinter(const Context& ctx, bool history, std::function<absl::StatusOr<v1::Job>()> fetch)
      : ctx_(ctx),
        history_(history),
        fetch_(std::move(fetch)),
        mode_(ctx.format == Format::kJson || ctx.format == Format::kYaml ? Mode::kMachine
              : ctx.out_is_tty                                           ? Mode::kProgress
                                                                         : Mode::kLines) {}

  Mode mode() const { return mode_; }

  // Where a (re)started stream should begin.
  int64_t after_seq() const {
    std::lock_guard<std::mutex> lock(mu_);
    return have_snapshot_ ? last_seq_ : 0;
  }
  bool have_snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return have_snapshot_;
  }
  // The state the event stream has reached.
  v1::JobState state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }

  absl::Status OnMessage(const v1::WatchJobResponse& received) {
    const v1::WatchJobResponse* message = &received;
    v1::WatchJobResponse completed;
    if (mode_ != Mode::kMachine) {
      // The job's final metrics come before the event that ends it.
      if (received.has_event() && IsTerminal(received.event().to_state())) {
        if (absl::StatusOr<v1::Job> job = fetch_(); job.ok()) OnPoll(*job);
      }
      // The stream's snapshot carries no pending explanation; GetJob has it.
      if (received.has_job() && received.job().state() == v1::QUEUED &&
          !received.job().has_pending() && !have_snapshot()) {
        absl::StatusOr<v1::Job> job = fetch_();
        if (job.ok() && job->state() == v1::QUEUED && job->has_pending()) {
          completed = received;
          *completed.mutable_job()->mutable_pending() = job->pending();
          message = &completed;
        }
      }
    }
    return OnStreamMessage(*message);
  }

  // Metrics history, oldest first: starts the ETA estimate before two polls have passed.
  void OnHistory(const v1::GetJobMetricsResponse& history) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const v1::JobMetricsPoint& p : history.points()) eta_.Observe(p);
  }

  // The job as a poll found it.
  void OnPoll(const v1::Job& job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kMachine || !have_snapshot_) return;
    // An event newer than this poll already moved the line on; keep its state.
    if (job.last_event_seq() >= job_.last_event_seq()) {
      job_ = job;
    } else {
      *job_.mutable_latest_metrics() = job.latest_metrics();
    }
    UpdateMetricsLocked(job);
  }

  // Ends the live line, so whatever follows starts on a fresh one.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kProgress && drawn_) {
      *ctx_.out << "\n";
      ctx_.out->flush();
      drawn_ = false;
    }
  }

 private:
  // The snapshot or event as received (after OnMessage completed it).
  absl::Status OnStreamMessage(const v1::WatchJobResponse& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (message.has_job()) {
      state_ = message.job().state();
      // A resumed stream starts with a fresh snapshot; the events tell the story.
      if (have_snapshot_) return absl::OkStatus();
      have_snapshot_ = true;
      // The server replays history from seq 1; without --history only what happens from
      // now on is shown, i.e. everything newer than the snapshot.
      last_seq_ = history_ ? 0 : message.job().last_event_seq();
      job_ = message.job();
      PrintLocked(message);
      UpdateMetricsLocked(message.job());
      return absl::OkStatus();
    }
    if (message.has_event()) {
      if (message.event().seq() <= last_seq_) return absl::OkStatus();
      last_seq_ = message.event().seq();
      state_ = message.event().to_state();
      // The live line shows the newest state even between polls.
      if (message.event().seq() > job_.last_event_seq()) {
        job_.set_last_event_seq(message.event().seq());
        job_.set_state(state_);
        job_.set_status_reason(message.event().reason());
        job_.clear_pending();
      }
      PrintLocked(message);
    }
    return absl::OkStatus();
  }

  void PrintLocked(const v1::WatchJobResponse& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ctx_.format == Format::kJson) {
      *ctx_.out << ToJson(message, /*pretty=*/false);
    } else if (ctx_.format == Format::kYaml) {
      *ctx_.out << "---\n" << ToYaml(message);
    } else {
      if (drawn_) *ctx_.raw_out << kClearLine;
      if (message.has_job()) {
        *ctx_.out << JobStateLine(message.job()) << "\n";
      } else {
        *ctx_.out << EventLine(message.event()) << "\n";
      }
      drawn_ = false;
      if (mode_ == Mode::kProgress) DrawLocked();
    }
    // Someone may be following along through a pipe.
    ctx_.out->flush();
  }

  // Feeds the ETA; through a pipe prints a line per new step; on a terminal redraws.
  void UpdateMetricsLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (mode_ == Mode::kMachine) return;
    if (job.has_latest_metrics()) {
      const v1::JobMetricsPoint& m = job.latest_metrics();
      eta_.Observe(m);
      const bool is_new = m.attempt() != printed_attempt_ || m.step() != printed_step_;
      if (mode_ == Mode::kLines && is_new) {
        *ctx_.out << MetricsLine(m, eta_.Remaining(absl::Now())) << "\n";
        ctx_.out->flush();
      }
      printed_attempt_ = m.attempt();
      printed_step_ = m.step();
    }
    if (mode_ == Mode::kProgress) DrawLocked();
  }

  void DrawLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // One column short of the width: a line that fills it exactly wraps on some terminals.
    const size_t width = ctx_.terminal_width > 1 ? ctx_.terminal_width - 1 : 79;
    *ctx_.raw_out << kClearLine;
    *ctx_.out << ProgressLine(job_, eta_.Remaining(absl::Now()), width);
    ctx_.out->flush();
    drawn_ = true;
  }

  // Constant after construction.
  const Context& ctx_;
  const bool history_;
  const std::function<absl::StatusOr<v1::Job>()> fetch_;
  const Mode mode_;

  mutable std::mutex mu_;
  bool have_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::JOB_STATE_UNSPECIFIED;
  // What the live line shows: the newest of the stream's and the polls' view.
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  EtaEstimator eta_ ABSL_GUARDED_BY(mu_);
  int32_t printed_attempt_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t printed_step_ ABSL_GUARDED_BY(mu_) = -1;
  // The live line is on screen (the cursor is at its end).
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

// Calls `poll` every `interval` on its own thread until stopped (or destroyed).
class Poller {
 public:
  Poller(absl::Duration interval, std::function<void()> poll)
      : interval_(interval), poll_(std::move(poll)), thread_([this] { Run(); }) {}
  ~Poller() { Stop(); }

  // Waits for a poll in progress to return; no poll starts after this.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      lock.unlock();
      poll_();
      lock.lock();
      cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [this] { return stopped_; });
    }
  }

  const absl::Duration interval_;
  const std::function<void()> poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is ready
};

absl::Status RunWatch(const Context& ctx, const std::string& id, bool history,
                      absl::Duration interval) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  // Polls get their own short deadline, so a coordinator that went away does not hold up
  // the end of the watch.
  ClientOptions poll_options = ctx.client_options;
  poll_options.timeout = std::min(poll_options.timeout, kMaxPollTimeout);
  absl::StatusOr<std::unique_ptr<Client>> poll_client = Client::Create(poll_options);
  if (!poll_client.ok()) return UsageError(std::string(poll_client.status().message()));
  const absl::Time deadline = ctx.watch_timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + ctx.watch_timeout;
  WatchPrinter printer(ctx, history, [&] { return (*poll_client)->GetJob(id); });

  std::optional<Poller> poller;
  InterruptWatcher interrupt([&] {
    (*client)->CancelStreams();
    (*poll_client)->CancelStreams();
  });
  if (printer.mode() != WatchPrinter::Mode::kMachine) {
    poller.emplace(interval, [&, seeded = false]() mutable {
      if (!printer.have_snapshot()) return;  // the first line comes from the stream
      absl::StatusOr<v1::Job> job = (*poll_client)->GetJob(id);
      if (!job.ok()) return;  // the stream reports a coordinator that is gone
      if (!seeded && job->has_latest_metrics()) {
        seeded = true;
        absl::StatusOr<v1::GetJobMetricsResponse> history_points =
            (*poll_client)->GetJobMetrics(id, kEtaHistoryPoints);
        if (history_points.ok()) printer.OnHistory(*history_points);
      }
      printer.OnPoll(*job);
    });
  }

  absl::Time give_up = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Status status;
  while (interrupt.signal() == 0) {
    v1::WatchJobRequest request;
    request.set_job_id(id);
    request.set_after_seq(printer.after_seq());
    const int64_t before = printer.after_seq();
    status = (*client)->WatchJob(
        request, [&printer](const v1::WatchJobResponse& m) { return printer.OnMessage(m); },
        deadline);
    if (interrupt.signal() != 0) break;
    // Resume only a watch that once worked: an address that never answered is a typo.
    // CANCELLED counts as an interruption too: we never cancel a watch we keep, and a
    // coordinator shutting down cancels the streams it still has.
    const bool interrupted = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kCancelled;
    if (!interrupted || !printer.have_snapshot()) break;
    if (printer.after_seq() != before) give_up = absl::InfiniteFuture();  // made progress
    if (give_up == absl::InfiniteFuture()) {
      printer.Close();
      *ctx.err << "llamafleet: watch interrupted (" << status.message() << "); resuming\n";
      give_up = absl::Now() + kWatchResumeWindow;
      backoff = absl::Milliseconds(200);
    }
    if (absl::Now() + backoff > std::min(give_up, deadline)) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  if (poller.has_value()) poller->Stop();
  printer.Close();
  if (interrupt.signal() != 0) return Interrupted(interrupt.signal());
  if (status.code() == absl::StatusCode::kDeadlineExceeded ||
      (!status.ok() && absl::Now() >= deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("job ", id, " is still ",
                                                    StateName(printer.state()), " after --timeout ",
                                                    absl::FormatDuration(ctx.watch_timeout)));
  }
  if (!status.ok()) return status;
  if (!IsTerminal(printer.state())) {
    return absl::UnavailableError(
        absl::StrCat("watch of job ", id, " ended while it was ", StateName(printer.state())));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// logs
// ---------------------------------------------------------------------------

struct LogsFlags {
  bool follow = false;
  int rank = -1;    // -1: every rank
  int attempt = 0;  // 0: the newest
  int tail = 0;     // 0: from the beginning
};

absl::Status RunLogs(const Context& ctx, const std::string& id, const LogsFlags& flags,
                     bool rank_given) {
  if (rank_given && flags.rank < 0) return UsageError("--rank must be >= 0");
  if (flags.attempt < 0) return UsageError("--attempt must be >= 1 (or 0 for the newest)");
  if (flags.tail < 0) return UsageError("--tail must be >= 0");
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::Job> job = (*client)->GetJob(id);
  if (!job.ok()) return job.status();
  const v1::ResourceSpec& resources = job->spec().resources();
  const int64_t world = static_cast<int64_t>(std::max(resources.nodes(), resources.max_nodes())) *
                        std::max(resources.gpus_per_node(), 1);
  if (flags.rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, " has ranks 0..", world - 1,
                                                   "; --rank ", flags.rank, " is not one of them"));
  }
  if (flags.attempt > job->attempts()) {
    return absl::InvalidArgumentError(absl::StrCat("job ", id, " has no attempt ", flags.attempt,
                                                   " (attempts so far: ", job->attempts(), ")"));
  }
  // Several ranks interleave by chunk; each line says whose it is.
  const bool prefix = flags.rank < 0 && world > 1;

  v1::StreamJobLogsRequest request;
  request.set_job_id(id);
  request.set_attempt(flags.attempt);
  request.set_rank(flags.rank);
  request.set_follow(flags.follow);
  request.set_tail_lines(flags.tail);
  int64_t lines = 0;
  auto print = [&](const v1::LogChunk& chunk) {
    if (ctx.format == Format::kJson) {
      *ctx.out << ToJson(chunk, /*pretty=*/false);
    } else if (ctx.format == Format::kYaml) {
      *ctx.out << "---\n" << ToYaml(chunk);
    } else {
      for (const std::string& line : chunk.lines()) {
        if (prefix) *ctx.out << "[rank " << chunk.rank() << "] ";
        *ctx.out << line << "\n";
      }
    }
    lines += chunk.lines_size();
    ctx.out->flush();
    return absl::OkStatus();
  };
  absl::Status status;
  if (flags.follow) {
    InterruptWatcher interrupt([&] { (*client)->CancelStreams(); });
    status = (*client)->StreamJobLogs(request, print);
    if (interrupt.signal() != 0) return Interrupted(interrupt.signal());
  } else {
    status = (*client)->StreamJobLogs(request, print, absl::Now() + ctx.client_options.timeout);
  }
  if (!status.ok()) return status;
  if (lines == 0 && !flags.follow && job->attempts() == 0) {
    // A note, not an error: stdout stays empty, as the log is.
    *ctx.err << "llamafleet: job " << id << " has not started yet (" << StateName(job->state())
             << "); use -f to wait for its logs\n";
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// checkpoints, workers
// ---------------------------------------------------------------------------

absl::Status RunCheckpoints(const Context& ctx, const std::string& id) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ListCheckpointsResponse> response = (*client)->ListCheckpoints(id);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  if (response->checkpoints().empty()) {
    *ctx.out << "No checkpoints recorded for job " << id << ".\n";
    return absl::OkStatus();
  }
  *ctx.out << CheckpointsTable({response->checkpoints().begin(), response->checkpoints().end()});
  return absl::OkStatus();
}

absl::Status RunAttempts(const Context& ctx, const std::string& id) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ListAttemptsResponse> response = (*client)->ListAttempts(id);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  if (response->attempts().empty()) {
    *ctx.out << "Job " << id << " has not started yet.\n";
    return absl::OkStatus();
  }
  *ctx.out << AttemptsTable({response->attempts().begin(), response->attempts().end()});
  return absl::OkStatus();
}

absl::Status RunQueues(const Context& ctx) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ListQueuesResponse> response = (*client)->ListQueues();
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  if (response->queues().empty()) {
    *ctx.out << "No queues: nothing queued or running, no quotas configured.\n";
    return absl::OkStatus();
  }
  *ctx.out << QueuesTable({response->queues().begin(), response->queues().end()}, absl::Now());
  return absl::OkStatus();
}

absl::Status RunWhoAmI(const Context& ctx) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::WhoAmIResponse> response = (*client)->WhoAmI();
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  std::string role = absl::AsciiStrToLower(v1::Role_Name(response->role()));
  *ctx.out << response->user() << " (" << role << ")"
           << (response->auth_enabled() ? "" : "; the coordinator runs without authentication")
           << "\n";
  return absl::OkStatus();
}

absl::Status RunWorkers(const Context& ctx) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::ListWorkersResponse> response = (*client)->ListWorkers();
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  if (response->workers().empty()) {
    *ctx.out << "No workers registered.\n";
    return absl::OkStatus();
  }
  std::vector<v1::WorkerInfo> workers(response->workers().begin(), response->workers().end());
  std::sort(workers.begin(), workers.end(),
            [](const v1::WorkerInfo& a, const v1::WorkerInfo& b) { return a.name() < b.name(); });
  *ctx.out << WorkersTable(workers, ctx.format == Format::kWide, absl::Now());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The command tree.
// ---------------------------------------------------------------------------

// CLI11 reports an unknown command as a missing one; name what was typed instead.
std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  // Fallthrough hands a stray word to the parent, so look at every level's leftovers.
  const std::vector<std::string> rest = app.remaining(/*recurse=*/true);
  if (command->get_require_subcommand_min() > 0 && command->get_subcommands().empty()) {
    std::vector<std::string> names;
    for (const CLI::App* sub : command->get_subcommands({})) names.push_back(sub->get_name());
    if (!rest.empty() && !rest.front().empty() && rest.front()[0] != '-') {
      return absl::StrCat("unknown command '", rest.front(), "' (expected one of ",
                          absl::StrJoin(names, ", "), "; see llamafleet --help)");
    }
    if (rest.empty()) {
      return absl::StrCat("'", command->get_display_name(),
                          "' needs a command: ", absl::StrJoin(names, ", "),
                          " (see llamafleet --help)");
    }
  }
  return absl::StrCat(e.what(), " (see llamafleet --help)");
}

int Finish(const absl::Status& status, std::ostream& err) {
  if (status.ok()) return kExitOk;
  // The user stopped it; they know why, and the output so far is complete.
  if (const int signo = InterruptSignal(status); signo != 0) return kExitSignalBase + signo;
  std::string message(status.message());
  // One line, whatever the message holds.
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  err << "llamafleet: " << message << std::endl;
  return IsUsageError(status) ? kExitUsage : kExitFailure;
}

// Columns of the terminal on stdout: the window size, else $COLUMNS, else 80.
size_t TerminalWidth() {
  winsize size = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  int columns = 0;
  if (const char* env = std::getenv("COLUMNS");
      env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) {
    return static_cast<size_t>(columns);
  }
  return 80;
}

}  // namespace

int RunCli(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  CLI::App app{"llamafleet: submit and follow Llama-2 finetuning jobs on a llamafleet coordinator",
               "llamafleet"};
  app.set_version_flag("--version", "llamafleet " LLAMAFLEET_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global flags are accepted after the command, too

  GlobalFlags global;
  // The login name when $USER is not set (cron, containers, CI). Only then: the passwd
  // lookup loads NSS modules, a cost every scripted invocation would pay.
  if (std::getenv("USER") == nullptr) {
    if (const passwd* pw = getpwuid(getuid()); pw != nullptr) global.user = pw->pw_name;
  }
  app.add_option("--coordinator", global.coordinator, "coordinator address HOST:PORT")
      ->envname("LLAMAFLEET_COORDINATOR")
      ->capture_default_str();
  app.add_option("-o,--output", global.output, "output format: table, wide, json, yaml")
      ->capture_default_str();
  app.add_option("--user", global.user,
                 "caller name, used only by a coordinator running with --insecure-no-auth")
      ->envname("USER");
  app.add_option("--tls-ca", global.tls_ca, "PEM CA certificate: talk TLS to the coordinator")
      ->envname("LLAMAFLEET_TLS_CA");
  app.add_option("--token", global.token, "bearer token for the coordinator")
      ->envname("LLAMAFLEET_TOKEN");
  CLI::Option* timeout_option =
      app.add_option("--timeout", global.timeout,
                     "deadline per request (30s, 2m, or seconds); bounds watch only if given")
          ->capture_default_str();

  // submit
  SubmitFlags submit;
  CLI::App* submit_cmd = app.add_subcommand(
      "submit",
      "submit jobs from a YAML or JSON file (several documents or a list: one batch); "
      "-o json|yaml prints {jobs: [{job, created}]} whether the file holds one job or many");
  submit_cmd
      ->add_option("-f,--file", submit.files,
                   "job file, directory (its *.yaml, *.yml, *.json files) or - for stdin; "
                   "repeatable: every document of every file goes in one batch")
      ->required();
  submit_cmd->add_flag("--dry-run", submit.dry_run,
                       "validate on the coordinator and print the effective spec; store nothing");
  submit_cmd->add_option("--idempotency-key", submit.idempotency_key,
                         "key for a single job (default: derived from the document, so "
                         "re-submitting the same file creates nothing new)");

  // get jobs / get job ID
  CLI::App* get_cmd = app.add_subcommand("get", "list jobs or show one");
  get_cmd->require_subcommand(1);
  ListFlags list;
  CLI::App* get_jobs_cmd = get_cmd->add_subcommand("jobs", "list jobs, newest first");
  get_jobs_cmd->add_option("--state", list.states,
                           "only these states (repeatable or comma-separated)");
  get_jobs_cmd->add_option("--queue", list.queue, "only this queue");
  get_jobs_cmd->add_option("--owner", list.owner, "only this owner");
  get_jobs_cmd->add_option("--label", list.labels, "only jobs with label key=value (repeatable)");
  get_jobs_cmd->add_option("--limit", list.limit, "show at most N jobs")->capture_default_str();
  get_jobs_cmd->add_flag("--all", list.all, "show every job, following page tokens");
  get_jobs_cmd->add_option("--page-size", list.page_size, "jobs per request (default: as needed)");
  get_jobs_cmd->add_option("--page-token", list.page_token,
                           "continue from a previous -o json next_page_token");
  std::string job_id;
  CLI::App* get_job_cmd = get_cmd->add_subcommand("job", "show one job");
  get_job_cmd->add_option("ID", job_id, "job id")->required();

  // describe job ID
  CLI::App* describe_cmd = app.add_subcommand("describe", "show a job in detail");
  describe_cmd->require_subcommand(1);
  CLI::App* describe_job_cmd = describe_cmd->add_subcommand(
      "job",
      "show a job: why it is pending, restarts, workers, latest metrics, checkpoints, spec, "
      "events; -o json prints {job, events, checkpoints}");
  describe_job_cmd->add_option("ID", job_id, "job id")->required();

  // cancel ID
  std::string reason;
  CLI::App* cancel_cmd = app.add_subcommand("cancel", "cancel a job (a finished job stays as is)");
  cancel_cmd->add_option("ID", job_id, "job id")->required();
  cancel_cmd->add_option("--reason", reason, "why, recorded in the job's events");

  // watch ID
  bool history = false;
  std::string interval_text = "1s";
  CLI::App* watch_cmd = app.add_subcommand(
      "watch",
      "follow a job's events until it finishes; on a terminal with a live progress line "
      "(step/total, loss, tokens/s, ETA), through a pipe with a 'step ...' line per new step; "
      "-o json|yaml prints only the WatchJobResponse messages; Ctrl-C stops watching, not the "
      "job");
  watch_cmd->add_option("ID", job_id, "job id")->required();
  watch_cmd->add_flag("--history", history, "print the job's earlier events first");
  watch_cmd->add_option("--interval", interval_text, "how often to poll the job's metrics")
      ->capture_default_str();

  // logs ID
  LogsFlags logs;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "print a job's trainer output (each line prefixed [rank N] when several ranks "
      "are shown); -o json prints one LogChunk per line");
  logs_cmd->add_option("ID", job_id, "job id")->required();
  logs_cmd->add_flag("-f,--follow", logs.follow, "keep printing new lines until the job ends");
  CLI::Option* rank_option = logs_cmd->add_option("--rank", logs.rank, "only this global rank");
  logs_cmd->add_option("--attempt", logs.attempt, "this attempt (1, 2, ...; default the newest)");
  logs_cmd->add_option("--tail", logs.tail, "start N lines before the end of each rank's log");

  // checkpoints ID
  CLI::App* checkpoints_cmd =
      app.add_subcommand("checkpoints", "list a job's recorded checkpoints, newest first");
  checkpoints_cmd->add_option("ID", job_id, "job id")->required();

  // attempts ID
  CLI::App* attempts_cmd = app.add_subcommand(
      "attempts", "list a job's attempts, newest first: gang size, workers, how each ended, resizes");
  attempts_cmd->add_option("ID", job_id, "job id")->required();

  // workers
  CLI::App* workers_cmd =
      app.add_subcommand("workers", "list the workers, their capacity and what they run");
  CLI::App* queues_cmd =
      app.add_subcommand("queues", "list the queues: depth, running jobs, GPUs used and quota");
  CLI::App* whoami_cmd = app.add_subcommand("whoami", "show the user and role your token names");

  for (CLI::App* sub :
       {submit_cmd, get_cmd, get_jobs_cmd, get_job_cmd, describe_cmd, describe_job_cmd, cancel_cmd,
        watch_cmd, logs_cmd, checkpoints_cmd, attempts_cmd, workers_cmd, queues_cmd, whoami_cmd}) {
    sub->fallthrough();
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    return Finish(UsageError(ParseErrorMessage(app, e)), err);
  }

  // Text from the coordinator reaches the terminal only through these (EscapeControls).
  EscapingStreambuf safe_out_buf(out.rdbuf());
  EscapingStreambuf safe_err_buf(err.rdbuf());
  std::ostream safe_out(&safe_out_buf);
  std::ostream safe_err(&safe_err_buf);
  absl::StatusOr<Context> ctx = MakeContext(global, timeout_option->count() > 0);
  if (!ctx.ok()) return Finish(ctx.status(), safe_err);
  ctx->in = &in;
  ctx->out = &safe_out;
  ctx->err = &safe_err;
  ctx->raw_out = &out;
  auto clients = std::make_unique<std::vector<std::unique_ptr<Client>>>();
  ctx->clients = clients.get();
  // Only the process's own stdout can be a terminal; tests hand in string streams.
  ctx->out_is_tty = &out == &std::cout && isatty(STDOUT_FILENO) == 1;
  if (ctx->out_is_tty) ctx->terminal_width = TerminalWidth();

  absl::Status status;
  if (submit_cmd->parsed()) {
    status = RunSubmit(*ctx, submit);
  } else if (get_jobs_cmd->parsed()) {
    status = RunGetJobs(*ctx, list);
  } else if (get_job_cmd->parsed()) {
    status = RunGetJob(*ctx, job_id);
  } else if (describe_job_cmd->parsed()) {
    status = RunDescribeJob(*ctx, job_id);
  } else if (cancel_cmd->parsed()) {
    status = RunCancel(*ctx, job_id, reason);
  } else if (watch_cmd->parsed()) {
    absl::StatusOr<absl::Duration> interval = ParseDuration("--interval", interval_text);
    status = interval.ok() ? RunWatch(*ctx, job_id, history, *interval) : interval.status();
  } else if (logs_cmd->parsed()) {
    status = RunLogs(*ctx, job_id, logs, rank_option->count() > 0);
  } else if (checkpoints_cmd->parsed()) {
    status = RunCheckpoints(*ctx, job_id);
  } else if (attempts_cmd->parsed()) {
    status = RunAttempts(*ctx, job_id);
  } else if (workers_cmd->parsed()) {
    status = RunWorkers(*ctx);
  } else if (queues_cmd->parsed()) {
    status = RunQueues(*ctx);
  } else if (whoami_cmd->parsed()) {
    status = RunWhoAmI(*ctx);
  }
  safe_out.flush();
  out.flush();
  // The process ends right after: closing the channels would only add gRPC's teardown.
  if (g_leave_connections_open) (void)clients.release();
  return Finish(status, safe_err);
}

void LeaveConnectionsOpenAtExit() { g_leave_connections_open = true; }

}  // namespace llamafleet::cli
