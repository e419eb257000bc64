#include "clients/cli/cli.h"

#include <pwd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/cli/command.h"
#include "clients/cli/escape.h"
#include "common/status_macros.h"

namespace llamafleet::cli {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

// Flags every command shares.
struct GlobalFlags {
  std::string coordinator = kDefaultCoordinator;
  std::string output = "table";
  std::string user;
  std::string token;
  std::string tls_ca;
  std::string timeout = "30s";
};

// Set by LeaveConnectionsOpenAtExit.
bool g_leave_connections_open = false;

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
  LF_ASSIGN_OR_RETURN(absl::Duration timeout, ParseDuration("--timeout", flags.timeout));
  ctx.client_options.address = flags.coordinator;
  ctx.client_options.user = flags.user;
  ctx.client_options.token = flags.token;
  ctx.client_options.tls_ca_file = flags.tls_ca;
  ctx.client_options.timeout = timeout;
  // A watch runs until the job ends; only an explicit --timeout bounds it.
  if (watch_timeout_set) ctx.watch_timeout = timeout;
  return ctx;
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
  if (const int code = JobOutcomeExitCode(status); code != 0) return code;
  return IsUsageError(status) ? kExitUsage : kExitFailure;
}

// The coordinator's answer to a call without a good token speaks of request metadata;
// the CLI's user gives a token with --token or LLAMAFLEET_TOKEN.
absl::Status ExplainUnauthenticated(const absl::Status& status, bool token_given) {
  if (!absl::IsUnauthenticated(status)) return status;
  if (!token_given) {
    return absl::UnauthenticatedError(
        "no API token: set LLAMAFLEET_TOKEN or pass --token (an admin creates one on the "
        "coordinator's host with: llamafleet-coordinator token create --data-dir DIR "
        "--user NAME --role viewer|user|admin --output NAME.token)");
  }
  return absl::UnauthenticatedError(
      absl::StrCat(status.message(), " (the token given with --token or LLAMAFLEET_TOKEN)"));
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

// A runnable subcommand: what runs when it was the one parsed. The flags it reads live in
// the closure, filled by the parse.
struct Command {
  CLI::App* app = nullptr;
  std::function<absl::Status(const Context&)> run;
};
using Commands = std::vector<Command>;

// A subcommand of `parent` that takes the global flags after its name, too.
CLI::App* AddSub(CLI::App* parent, const std::string& name, const std::string& help) {
  CLI::App* sub = parent->add_subcommand(name, help);
  sub->fallthrough();
  return sub;
}

constexpr char kSetHelp[] =
    "key=value: set a field of the spec before it is validated, by its dotted path, the value a "
    "YAML scalar "
    "(training.lr=2e-5, resources.nodes=2); repeatable";

// The flags every command shares; returns --timeout's option (whether it was given).
CLI::Option* AddGlobalFlags(CLI::App& app, GlobalFlags* global) {
  // The login name when $USER is not set (cron, containers, CI). Only then: the passwd
  // lookup loads NSS modules, a cost every scripted invocation would pay.
  if (std::getenv("USER") == nullptr) {
    if (const passwd* pw = getpwuid(getuid()); pw != nullptr) global->user = pw->pw_name;
  }
  app.add_option("--coordinator", global->coordinator, "coordinator address HOST:PORT")
      ->envname("LLAMAFLEET_COORDINATOR")
      ->capture_default_str();
  app.add_option("-o,--output", global->output, "output format: table, wide, json, yaml")
      ->capture_default_str();
  app.add_option("--user", global->user,
                 "caller name, used only by a coordinator running with --insecure-no-auth")
      ->envname("USER");
  app.add_option("--tls-ca", global->tls_ca, "PEM CA certificate: talk TLS to the coordinator")
      ->envname("LLAMAFLEET_TLS_CA");
  app.add_option("--token", global->token, "bearer token for the coordinator")
      ->envname("LLAMAFLEET_TOKEN");
  return app
      .add_option("--timeout", global->timeout,
                  "deadline per request (30s, 2m, or seconds); bounds watch only if given")
      ->capture_default_str();
}

// submit, resubmit ID.
void AddSubmitCommands(CLI::App& app, Commands* commands) {
  auto submit = std::make_shared<SubmitFlags>();
  CLI::App* submit_cmd =
      AddSub(&app, "submit",
             "submit jobs from a YAML or JSON file (several documents or a list: one batch); "
             "-o json|yaml prints {jobs: [{job, created}]} whether the file holds one job or many");
  submit_cmd
      ->add_option("-f,--file", submit->files,
                   "job file, directory (its *.yaml, *.yml, *.json files) or - for stdin; "
                   "repeatable: every document of every file goes in one batch")
      ->required();
  submit_cmd->add_flag("--dry-run", submit->dry_run,
                       "validate on the coordinator and print the effective spec; store nothing");
  submit_cmd->add_option("--idempotency-key", submit->idempotency_key,
                         "key for a single job (default: derived from the document, so "
                         "re-submitting the same file creates nothing new)");
  submit_cmd->add_flag(
      "--wait", submit->wait,
      "then wait for every job submitted, as `wait --for succeeded` (same exit codes)");
  submit_cmd->add_option("--set", submit->overrides, kSetHelp)->allow_extra_args(false);
  commands->push_back(
      {submit_cmd, [submit](const Context& ctx) { return RunSubmit(ctx, *submit); }});

  auto resubmit = std::make_shared<ResubmitFlags>();
  auto id = std::make_shared<std::string>();
  CLI::App* resubmit_cmd = AddSub(&app, "resubmit",
                                  "run a job again: its spec as submitted, with --set "
                                  "changes, as a new job that records the one it "
                                  "derives from");
  resubmit_cmd->add_option("ID", *id, "job id")->required();
  resubmit_cmd->add_option("--set", resubmit->overrides, kSetHelp)->allow_extra_args(false);
  resubmit_cmd->add_flag("--dry-run", resubmit->dry_run,
                         "validate on the coordinator and print the effective spec");
  resubmit_cmd->add_flag("--wait", resubmit->wait,
                         "then wait for the new job, as `wait --for succeeded`");
  commands->push_back({resubmit_cmd, [id, resubmit](const Context& ctx) {
                         return RunResubmit(ctx, *id, *resubmit);
                       }});
}

// get jobs, get job ID, get usage, describe job ID.
void AddGetCommands(CLI::App& app, Commands* commands) {
  CLI::App* get_cmd = AddSub(&app, "get", "list jobs, show one, or show GPU usage");
  get_cmd->require_subcommand(1);
  auto list = std::make_shared<ListFlags>();
  CLI::App* jobs = AddSub(get_cmd, "jobs", "list jobs, newest first");
  jobs->add_option("--state", list->states, "only these states (repeatable or comma-separated)");
  jobs->add_option("--queue", list->queue, "only this queue");
  jobs->add_option("--owner", list->owner, "only this owner");
  jobs->add_option("--label", list->labels, "only jobs with label key=value (repeatable)");
  jobs->add_option("--sweep", list->sweep, "only the jobs of this sweep (label sweep=NAME)");
  jobs->add_option("--limit", list->limit, "show at most N jobs")->capture_default_str();
  jobs->add_flag("--all", list->all, "show every job, following page tokens");
  jobs->add_option("--page-size", list->page_size, "jobs per request (default: as needed)");
  jobs->add_option("--page-token", list->page_token,
                   "continue from a previous -o json next_page_token");
  commands->push_back({jobs, [list](const Context& ctx) { return RunGetJobs(ctx, *list); }});
  auto id = std::make_shared<std::string>();
  CLI::App* job = AddSub(get_cmd, "job", "show one job");
  job->add_option("ID", *id, "job id")->required();
  commands->push_back({job, [id](const Context& ctx) { return RunGetJob(ctx, *id); }});
  auto user = std::make_shared<std::string>();
  CLI::App* usage = AddSub(
      get_cmd, "usage", "GPU time and cost per user and queue, all time (deleted jobs included)");
  usage->add_option("--user", *user, "only this user");
  commands->push_back({usage, [user](const Context& ctx) { return RunGetUsage(ctx, *user); }});

  CLI::App* describe_cmd = AddSub(&app, "describe", "show a job in detail");
  describe_cmd->require_subcommand(1);
  CLI::App* describe_job =
      AddSub(describe_cmd, "job",
             "show a job: why it is pending, restarts, workers, latest metrics, checkpoints, spec, "
             "events; -o json prints {job, events, checkpoints}");
  describe_job->add_option("ID", *id, "job id")->required();
  commands->push_back(
      {describe_job, [id](const Context& ctx) { return RunDescribeJob(ctx, *id); }});
}

// cancel ID | --sweep NAME, delete job ID, release-dir PATH.
void AddChangeCommands(CLI::App& app, Commands* commands) {
  auto id = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  auto sweep = std::make_shared<std::string>();
  CLI::App* cancel = AddSub(
      &app, "cancel", "cancel a job, or a sweep's unfinished jobs (a finished job stays as is)");
  CLI::Option* cancel_id = cancel->add_option("ID", *id, "job id");
  CLI::Option* cancel_sweep =
      cancel->add_option("--sweep", *sweep, "every unfinished job of your sweep NAME instead");
  cancel_id->excludes(cancel_sweep);
  cancel->add_option("--reason", *reason, "why, recorded in the job's events");
  commands->push_back({cancel, [=](const Context& ctx) -> absl::Status {
                         if (cancel_sweep->count() > 0) return RunCancelSweep(ctx, *sweep, *reason);
                         if (cancel_id->count() > 0) return RunCancel(ctx, *id, *reason);
                         return UsageError("cancel: give a job ID or --sweep NAME");
                       }});

  auto artifacts = std::make_shared<bool>(false);
  CLI::App* delete_cmd = AddSub(&app, "delete", "delete a finished job");
  delete_cmd->require_subcommand(1);
  CLI::App* delete_job =
      AddSub(delete_cmd, "job",
             "delete a finished job's records, logs and default checkpoint dir (owner or admin)");
  delete_job->add_option("ID", *id, "job id")->required();
  delete_job->add_flag("--artifacts", *artifacts, "also its output.export_dir");
  commands->push_back({delete_job, [id, artifacts](const Context& ctx) {
                         return RunDeleteJob(ctx, *id, *artifacts);
                       }});

  auto path = std::make_shared<std::string>();
  CLI::App* release_dir =
      AddSub(&app, "release-dir",
             "end every job's claim on a checkpoint.dir or output.export_dir, so it keeps no other "
             "user's jobs out (admin; recorded in each job's events)");
  release_dir->add_option("PATH", *path, "the directory, as the jobs named it")->required();
  commands->push_back(
      {release_dir, [path](const Context& ctx) { return RunReleaseDir(ctx, *path); }});
}

// watch ID, wait ID..., logs ID.
void AddFollowCommands(CLI::App& app, Commands* commands) {
  auto id = std::make_shared<std::string>();
  auto history = std::make_shared<bool>(false);
  auto interval = std::make_shared<std::string>("1s");
  CLI::App* watch = AddSub(
      &app, "watch",
      "follow a job's events until it finishes; on a terminal with a live progress line "
      "(step/total, loss, tokens/s, ETA), through a pipe with a 'step ...' line per new step; "
      "-o json|yaml prints only the WatchJobResponse messages; Ctrl-C stops watching, not the "
      "job");
  watch->add_option("ID", *id, "job id")->required();
  watch->add_flag("--history", *history, "print the job's earlier events first");
  watch->add_option("--interval", *interval, "how often to poll the job's metrics")
      ->capture_default_str();
  commands->push_back({watch, [id, history, interval](const Context& ctx) -> absl::Status {
                         absl::StatusOr<absl::Duration> every =
                             ParseDuration("--interval", *interval);
                         return every.ok() ? RunWatch(ctx, *id, *history, *every) : every.status();
                       }});

  auto ids = std::make_shared<std::vector<std::string>>();
  auto wait_for = std::make_shared<std::string>("succeeded");
  CLI::App* wait = AddSub(
      &app, "wait",
      "block until every job given has ended, printing a line per job as it ends; exit 0 only "
      "if each met --for; 3 if one FAILED, 4 if one was CANCELLED, 5 if --timeout passed first");
  wait->add_option("ID", *ids, "job ids")->required();
  wait->add_option("--for", *wait_for,
                   "succeeded (a FAILED or CANCELLED job fails the wait) or finished")
      ->check(CLI::IsMember({"succeeded", "finished"}))
      ->capture_default_str();
  commands->push_back({wait, [ids, wait_for](const Context& ctx) {
                         return RunWait(ctx, *ids, *wait_for == "succeeded");
                       }});

  auto logs = std::make_shared<LogsFlags>();
  CLI::App* logs_cmd =
      AddSub(&app, "logs",
             "print a job's trainer output (each line prefixed [rank N] when several ranks "
             "are shown; the trainer's JSON records as text unless --raw); -o json prints one "
             "LogChunk per line");
  logs_cmd->add_option("ID", *id, "job id")->required();
  logs_cmd->add_flag("-f,--follow", logs->follow, "keep printing new lines until the job ends");
  CLI::Option* rank = logs_cmd->add_option("--rank", logs->rank, "only this global rank");
  logs_cmd->add_option("--attempt", logs->attempt, "this attempt (1, 2, ...; default the newest)");
  logs_cmd->add_option("--tail", logs->tail, "start N lines before the end of each rank's log");
  logs_cmd->add_flag("--raw", logs->raw,
                     "the trainer's JSON records as written, not as one line of text each");
  commands->push_back({logs_cmd, [id, logs, rank](const Context& ctx) {
                         return RunLogs(ctx, *id, *logs, rank->count() > 0);
                       }});
}

// checkpoints ID, attempts ID, workers, queues, whoami.
void AddListCommands(CLI::App& app, Commands* commands) {
  auto id = std::make_shared<std::string>();
  CLI::App* checkpoints =
      AddSub(&app, "checkpoints", "list a job's recorded checkpoints, newest first");
  checkpoints->add_option("ID", *id, "job id")->required();
  commands->push_back({checkpoints, [id](const Context& ctx) { return RunCheckpoints(ctx, *id); }});
  CLI::App* attempts =
      AddSub(&app, "attempts",
             "list a job's attempts, newest first: gang size, workers, how each ended, resizes");
  attempts->add_option("ID", *id, "job id")->required();
  commands->push_back({attempts, [id](const Context& ctx) { return RunAttempts(ctx, *id); }});
  auto step = std::make_shared<int64_t>(0);
  auto latest = std::make_shared<bool>(false);
  CLI::App* samples = AddSub(
      &app, "samples", "show what a job's model wrote at its evaluations (eval.samples), by step");
  samples->add_option("ID", *id, "job id")->required();
  CLI::Option* step_option =
      samples->add_option("--step", *step, "only this step")->check(CLI::PositiveNumber);
  samples->add_flag("--latest", *latest, "only the latest step that has samples")
      ->excludes(step_option);
  commands->push_back({samples, [id, step, latest](const Context& ctx) {
                         return RunSamples(ctx, *id, *step, *latest);
                       }});
  commands->push_back(
      {AddSub(&app, "workers", "list the workers, their capacity and what they run"),
       [](const Context& ctx) { return RunWorkers(ctx); }});
  commands->push_back(
      {AddSub(&app, "queues", "list the queues: depth, running jobs, GPUs used and quota"),
       [](const Context& ctx) { return RunQueues(ctx); }});
  commands->push_back({AddSub(&app, "whoami", "show the user and role your token names"),
                       [](const Context& ctx) { return RunWhoAmI(ctx); }});
}

// Parses the command line: nullopt, or the exit code when it was help, the version or a
// usage error (already printed).
std::optional<int> Parse(CLI::App& app, int argc, char** argv, std::ostream& out,
                         std::ostream& err) {
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
  return std::nullopt;
}

}  // namespace

int RunCli(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err) {
  CLI::App app{"llamafleet: submit and follow Llama-2 finetuning jobs on a llamafleet coordinator",
               "llamafleet"};
  app.set_version_flag("--version", "llamafleet " LLAMAFLEET_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // global flags are accepted after the command, too
  GlobalFlags global;
  CLI::Option* timeout_option = AddGlobalFlags(app, &global);
  Commands commands;
  AddSubmitCommands(app, &commands);
  AddGetCommands(app, &commands);
  AddChangeCommands(app, &commands);
  AddFollowCommands(app, &commands);
  AddListCommands(app, &commands);
  if (std::optional<int> code = Parse(app, argc, argv, out, err)) return *code;

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
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    status = command.run(*ctx);
    break;
  }
  status = ExplainUnauthenticated(status, !global.token.empty());
  safe_out.flush();
  out.flush();
  // The process ends right after: closing the channels would only add gRPC's teardown.
  if (g_leave_connections_open) (void)clients.release();
  return Finish(status, safe_err);
}

void LeaveConnectionsOpenAtExit() { g_leave_connections_open = true; }

}  // namespace llamafleet::cli
