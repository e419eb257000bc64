#include "clients/cli/cli.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
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
#include "clients/cli/output.h"
#include "clients/client/client.h"
#include "clients/jobspec/jobspec.h"
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
  std::string timeout = "30s";
};

// What a command needs once flags are parsed.
struct Context {
  Format format = Format::kTable;
  ClientOptions client_options;
  // Bounds a whole watch (reconnects included); infinite unless --timeout is given.
  absl::Duration watch_timeout = absl::InfiniteDuration();
  std::istream* in = nullptr;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text) {
  double seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return UsageError(absl::StrCat("--timeout: '", text, "' is not a duration (e.g. 30s, 2m)"));
  }
  if (d <= absl::ZeroDuration()) return UsageError("--timeout must be > 0");
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
  absl::StatusOr<absl::Duration> timeout = ParseTimeout(flags.timeout);
  if (!timeout.ok()) return timeout.status();
  ctx.client_options.address = flags.coordinator;
  ctx.client_options.user = flags.user;
  ctx.client_options.token = flags.token;
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

absl::StatusOr<std::unique_ptr<Client>> Connect(const Context& ctx) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(ctx.client_options);
  if (!client.ok()) return UsageError(std::string(client.status().message()));
  return client;
}

// ---------------------------------------------------------------------------
// submit
// ---------------------------------------------------------------------------

struct SubmitFlags {
  std::string file;
  bool dry_run = false;
  std::string idempotency_key;
};

absl::StatusOr<std::string> ReadInput(const std::string& file, std::istream& in) {
  if (file == "-") {
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ifstream stream(file, std::ios::binary);
  if (!stream) return absl::NotFoundError(absl::StrCat("cannot read ", file, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) return absl::DataLossError(absl::StrCat("cannot read ", file));
  return text.str();
}

// Submission errors read in terms of the file the user wrote.
absl::Status SubmitError(const absl::Status& status) {
  const absl::string_view message = status.message();
  if (status.code() != absl::StatusCode::kInvalidArgument ||
      !(absl::StartsWith(message, "spec.") || absl::StartsWith(message, "jobs["))) {
    return status;  // not about the spec (e.g. a malformed --user)
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid job spec: ", SpecErrorsForFile(std::string(status.message()))));
}

void PrintSubmitted(const Context& ctx, const v1::SubmitJobsResponse& response, bool dry_run) {
  if (PrintMachine(ctx, response)) return;
  for (int i = 0; i < response.jobs_size(); ++i) {
    const v1::SubmitJobResponse& r = response.jobs(i);
    if (dry_run) {
      // The effective specs, as a multi-document YAML that could be submitted as is.
      if (i > 0) *ctx.out << "---\n";
      *ctx.out << "# " << r.job().spec().name() << ": valid (dry run, nothing stored)\n"
               << ToYaml(r.job().spec());
    } else if (r.created()) {
      *ctx.out << "job " << r.job().id() << " created\n";
    } else {
      *ctx.out << "job " << r.job().id() << " already exists (idempotency key "
               << r.job().idempotency_key() << ")\n";
    }
  }
}

absl::Status RunSubmit(const Context& ctx, const SubmitFlags& flags) {
  absl::StatusOr<std::string> text = ReadInput(flags.file, *ctx.in);
  if (!text.ok()) return text.status();
  const std::string source = flags.file == "-" ? "stdin" : flags.file;
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(*text);
  if (!parsed.ok()) return WithContext(parsed.status(), absl::StrCat(source, ": "));
  if (!flags.idempotency_key.empty() && parsed->size() > 1) {
    return UsageError(absl::StrCat("--idempotency-key applies to a single job; ", source,
                                   " holds ", parsed->size(),
                                   " (each gets a key derived from its document)"));
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
  if (!client.ok()) return client.status();

  v1::SubmitJobsResponse responses;
  if (parsed->size() == 1) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = std::move((*parsed)[0].spec);
    request.set_idempotency_key(flags.idempotency_key.empty() ? (*parsed)[0].idempotency_key
                                                              : flags.idempotency_key);
    request.set_dry_run(flags.dry_run);
    absl::StatusOr<v1::SubmitJobResponse> response = (*client)->SubmitJob(request);
    if (!response.ok()) return SubmitError(response.status());
    *responses.add_jobs() = std::move(*response);
  } else {
    // One call: the coordinator stores the whole batch or none of it.
    v1::SubmitJobsRequest request;
    request.set_dry_run(flags.dry_run);
    for (ParsedJob& job : *parsed) {
      v1::SubmitJobRequest* item = request.add_jobs();
      *item->mutable_spec() = std::move(job.spec);
      item->set_idempotency_key(job.idempotency_key);
    }
    absl::StatusOr<v1::SubmitJobsResponse> response = (*client)->SubmitJobs(request);
    if (!response.ok()) return SubmitError(response.status());
    responses = std::move(*response);
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
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
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
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
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
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
  if (!client.ok()) return client.status();
  absl::StatusOr<v1::Job> job = (*client)->GetJob(id);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::vector<v1::JobEvent>> events = (*client)->GetAllJobEvents(id);
  if (!events.ok()) return events.status();
  v1::GetJobEventsResponse event_list;
  for (const v1::JobEvent& e : *events) *event_list.add_events() = e;
  // No proto message holds a job with its events; compose the two stable renderings.
  if (ctx.format == Format::kJson) {
    std::string job_json = ToJson(*job, /*pretty=*/false);
    std::string events_json = ToJson(event_list, /*pretty=*/false);
    job_json.pop_back();
    events_json.pop_back();
    // Keep the events array and the closing brace of {"events":[...]}.
    *ctx.out << "{\"job\":" << job_json << ",\"events\":"
             << events_json.substr(events_json.find('[')) << "\n";
    return absl::OkStatus();
  }
  if (ctx.format == Format::kYaml) {
    *ctx.out << "job:\n" << Indent(ToYaml(*job), 2);
    if (events->empty()) {
      *ctx.out << "events: []\n";
    } else {
      *ctx.out << ToYaml(event_list);
    }
    return absl::OkStatus();
  }
  *ctx.out << DescribeJob(*job, *events, absl::Now());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// cancel
// ---------------------------------------------------------------------------

absl::Status RunCancel(const Context& ctx, const std::string& id, const std::string& reason) {
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
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

// Prints a watch, across reconnects: the first snapshot, then each event once.
class WatchPrinter {
 public:
  WatchPrinter(const Context& ctx, bool history) : ctx_(ctx), history_(history) {}

  // Where a (re)started stream should begin.
  int64_t after_seq() const { return have_snapshot_ ? last_seq_ : 0; }
  bool have_snapshot() const { return have_snapshot_; }
  v1::JobState state() const { return state_; }

  absl::Status OnMessage(const v1::WatchJobResponse& message) {
    if (message.has_job()) {
      state_ = message.job().state();
      // A resumed stream starts with a fresh snapshot; the events tell the story.
      if (have_snapshot_) return absl::OkStatus();
      have_snapshot_ = true;
      // The server replays history from seq 1; without --history only what happens from
      // now on is shown, i.e. everything newer than the snapshot.
      last_seq_ = history_ ? 0 : message.job().last_event_seq();
      Print(message);
      return absl::OkStatus();
    }
    if (message.has_event()) {
      if (message.event().seq() <= last_seq_) return absl::OkStatus();
      last_seq_ = message.event().seq();
      state_ = message.event().to_state();
      Print(message);
    }
    return absl::OkStatus();
  }

 private:
  void Print(const v1::WatchJobResponse& message) {
    if (ctx_.format == Format::kJson) {
      *ctx_.out << ToJson(message, /*pretty=*/false);
    } else if (ctx_.format == Format::kYaml) {
      *ctx_.out << "---\n" << ToYaml(message);
    } else if (message.has_job()) {
      *ctx_.out << JobStateLine(message.job()) << "\n";
    } else {
      *ctx_.out << EventLine(message.event()) << "\n";
    }
    // Someone may be following along through a pipe.
    ctx_.out->flush();
  }

  const Context& ctx_;
  const bool history_;
  bool have_snapshot_ = false;
  int64_t last_seq_ = 0;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
};

absl::Status RunWatch(const Context& ctx, const std::string& id, bool history) {
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(ctx);
  if (!client.ok()) return client.status();
  const absl::Time deadline = ctx.watch_timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + ctx.watch_timeout;
  WatchPrinter printer(ctx, history);
  absl::Time give_up = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Status status;
  while (true) {
    v1::WatchJobRequest request;
    request.set_job_id(id);
    request.set_after_seq(printer.after_seq());
    const int64_t before = printer.after_seq();
    status = (*client)->WatchJob(
        request, [&printer](const v1::WatchJobResponse& m) { return printer.OnMessage(m); },
        deadline);
    // Resume only a watch that once worked: an address that never answered is a typo.
    // CANCELLED counts as an interruption too: we never cancel a watch we keep, and a
    // coordinator shutting down cancels the streams it still has.
    const bool interrupted = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kCancelled;
    if (!interrupted || !printer.have_snapshot()) break;
    if (printer.after_seq() != before) give_up = absl::InfiniteFuture();  // made progress
    if (give_up == absl::InfiniteFuture()) {
      *ctx.err << "llamafleet: watch interrupted (" << status.message() << "); resuming\n";
      give_up = absl::Now() + kWatchResumeWindow;
      backoff = absl::Milliseconds(200);
    }
    if (absl::Now() + backoff > std::min(give_up, deadline)) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  if (status.code() == absl::StatusCode::kDeadlineExceeded ||
      (!status.ok() && absl::Now() >= deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("job ", id, " is still ",
                                                    StateName(printer.state()), " after --timeout ",
                                                    absl::FormatDuration(ctx.watch_timeout)));
  }
  if (!status.ok()) return status;
  if (!IsTerminal(printer.state())) {
    return absl::UnavailableError(absl::StrCat("watch of job ", id, " ended while it was ",
                                               StateName(printer.state())));
  }
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
      return absl::StrCat("'", command->get_display_name(), "' needs a command: ",
                          absl::StrJoin(names, ", "), " (see llamafleet --help)");
    }
  }
  return absl::StrCat(e.what(), " (see llamafleet --help)");
}

int Finish(const absl::Status& status, std::ostream& err) {
  if (status.ok()) return kExitOk;
  std::string message(status.message());
  // One line, whatever the message holds.
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  err << "llamafleet: " << message << std::endl;
  return IsUsageError(status) ? kExitUsage : kExitFailure;
}

}  // namespace

int RunCli(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  CLI::App app{"llamafleet: submit and follow Llama-2 finetuning jobs on a llamafleet coordinator",
               "llamafleet"};
  app.set_version_flag("--version", "llamafleet " LLAMAFLEET_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global flags are accepted after the command, too

  GlobalFlags global;
  // The login name when $USER is not set (cron, containers, CI).
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr) global.user = pw->pw_name;
  app.add_option("--coordinator", global.coordinator, "coordinator address HOST:PORT")
      ->envname("LLAMAFLEET_COORDINATOR")
      ->capture_default_str();
  app.add_option("-o,--output", global.output, "output format: table, wide, json, yaml")
      ->capture_default_str();
  app.add_option("--user", global.user, "caller identity sent to the coordinator")
      ->envname("USER");
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
  submit_cmd->add_option("-f,--file", submit.file, "job file, or - for stdin")->required();
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
  CLI::App* describe_cmd = app.add_subcommand("describe", "show a job's spec and events");
  describe_cmd->require_subcommand(1);
  CLI::App* describe_job_cmd = describe_cmd->add_subcommand("job", "show a job's spec and events");
  describe_job_cmd->add_option("ID", job_id, "job id")->required();

  // cancel ID
  std::string reason;
  CLI::App* cancel_cmd = app.add_subcommand("cancel", "cancel a job (a finished job stays as is)");
  cancel_cmd->add_option("ID", job_id, "job id")->required();
  cancel_cmd->add_option("--reason", reason, "why, recorded in the job's events");

  // watch ID
  bool history = false;
  CLI::App* watch_cmd =
      app.add_subcommand("watch", "follow a job's events until it finishes");
  watch_cmd->add_option("ID", job_id, "job id")->required();
  watch_cmd->add_flag("--history", history, "print the job's earlier events first");

  for (CLI::App* sub : {submit_cmd, get_cmd, get_jobs_cmd, get_job_cmd, describe_cmd,
                        describe_job_cmd, cancel_cmd, watch_cmd}) {
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

  absl::StatusOr<Context> ctx = MakeContext(global, timeout_option->count() > 0);
  if (!ctx.ok()) return Finish(ctx.status(), err);
  ctx->in = &in;
  ctx->out = &out;
  ctx->err = &err;

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
    status = RunWatch(*ctx, job_id, history);
  }
  out.flush();
  return Finish(status, err);
}

}  // namespace llamafleet::cli
