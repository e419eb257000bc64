// llamafleet-worker: parse flags, register with the coordinator, run tasks until
// SIGTERM/SIGINT, then stop every task and exit. No child outlives the worker.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/agent.h"
#include "worker/health_check.h"
#include "worker/rank_memory.h"
#include "worker/run_as.h"

namespace {

// llamafleet-train next to this executable, else on PATH.
std::string DefaultTrainer() {
  char self[PATH_MAX] = {0};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::filesystem::path sibling =
        std::filesystem::path(std::string(self, n)).parent_path() / "llamafleet-train";
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return "llamafleet-train";
}

// Flags kept as written until they are checked and applied to AgentOptions.
struct WorkerFlags {
  std::string labels, trainer = DefaultTrainer(), token_file, run_as, tls_ca, memory_limit;
  std::string token_cache_max_size, log_level = "info";
  double heartbeat_s = 2;
  double preflight_interval_s = 300;
  bool check_health = false;
};

void AddFlags(CLI::App& app, llamafleet::worker::AgentOptions& options, WorkerFlags& f) {
  app.add_option("--coordinator", options.coordinator, "coordinator HOST:PORT (required)");
  app.add_option("--join-token", options.join_token,
                 "shared secret the coordinator requires (visible in ps: prefer "
                 "--join-token-file or LLAMAFLEET_JOIN_TOKEN)");
  app.add_option("--join-token-file", f.token_file, "file holding the join token");
  app.add_option(
      "--run-as", f.run_as,
      "USER[:GROUP] every job's trainers run as (a root worker's default: each job as its owner's "
      "Unix identity, named by the coordinator)");
  app.add_option("--data-dir", options.data_dir, "directory for task files (required)");
  app.add_option("--cpu-ranks", options.cpu_ranks, "run as a CPU worker with N ranks");
  app.add_option("--instance-type", options.instance_type, "instance type (e.g. p5.48xlarge)");
  app.add_option("--labels", f.labels, "worker labels k=v,k=v");
  app.add_option("--name", options.name, "worker name (default: host name)");
  app.add_option("--address", options.address,
                 "address peers use to reach this node (default: host name)");
  app.add_option("--trainer", f.trainer, "llamafleet-train executable");
  app.add_option("--heartbeat-interval", f.heartbeat_s, "seconds between heartbeats");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error");
  app.add_option("--tls-ca", f.tls_ca, "PEM CA certificate of a coordinator serving TLS");
  app.add_option("--preflight-interval", f.preflight_interval_s,
                 "seconds between pre-flights while idle (0: only at join and after tasks)");
  app.add_option("--preflight-fail-for-test", options.preflight_fail_for_test,
                 "FILE: every pre-flight fails while FILE exists (fault injection for tests)");
  app.add_option("--gpu-health-fake-for-test", options.gpu_health_fake_for_test,
                 "FILE: while FILE exists its GPU health events (e.g. 'xid 79 gpu 0') are reported "
                 "in heartbeats (fault injection for tests)");
  app.add_option(
      "--trainer-memory-limit", f.memory_limit,
      "SIZE (bytes, or with K, M, G, T), or none: the private memory each trainer rank may "
      "allocate (RLIMIT_DATA, GPU ranks too); a rank past it fails its allocation instead of "
      "exhausting the node (default: 90% of the host's memory divided among its ranks)");
  app.add_option(
      "--token-cache-max-size", f.token_cache_max_size,
      "SIZE (bytes, or with K, M, G, T): bound on each job owner's token cache; past it a "
      "build removes the owner's least recently used entries that no run is using "
      "(default: none)");
  app.add_flag("--check-health", f.check_health,
               "run the pre-flight and one GPU health sample, print them (JSON) and exit: 0 when "
               "the pre-flight passed");
}

// The join token from --join-token, --join-token-file or LLAMAFLEET_JOIN_TOKEN, which is
// then removed from the environment: nothing this process starts gets it.
absl::Status ResolveJoinToken(const WorkerFlags& f, llamafleet::worker::AgentOptions& options) {
  if (!options.join_token.empty()) {
    spdlog::warn(
        "--join-token is visible to every user in ps; use --join-token-file or the "
        "environment variable LLAMAFLEET_JOIN_TOKEN");
  } else if (const char* env = std::getenv("LLAMAFLEET_JOIN_TOKEN");
             env != nullptr && f.token_file.empty()) {
    options.join_token = env;
  }
  unsetenv("LLAMAFLEET_JOIN_TOKEN");
  if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!std::getline(in, options.join_token)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read join token from ", f.token_file));
    }
  }
  if (options.join_token.empty()) {
    return absl::InvalidArgumentError(
        "a join token is required: --join-token-file FILE or LLAMAFLEET_JOIN_TOKEN");
  }
  return absl::OkStatus();
}

// `text` as a size in bytes for `flag`; unparsable or below `min`: INVALID_ARGUMENT saying
// the value is `expected`.
absl::StatusOr<uint64_t> FlagSize(const char* flag, const std::string& text, uint64_t min,
                                  const char* expected) {
  const std::optional<uint64_t> bytes = llamafleet::ParseByteSize(text);
  if (!bytes || *bytes < min) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", text, "\" is ", expected));
  }
  return *bytes;
}

// The flags after parsing, checked and applied: INVALID_ARGUMENT for a bad flag (exit 2),
// another code for what the host refused (exit 1).
absl::Status ApplyFlags(const WorkerFlags& f, llamafleet::worker::AgentOptions& options) {
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string*>{"--coordinator", &options.coordinator},
        {"--data-dir", &options.data_dir}}) {
    if (value->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is required"));
  }
  if (absl::Status s = ResolveJoinToken(f, options); !s.ok()) return s;
  if (!f.tls_ca.empty()) {
    std::ifstream in(f.tls_ca, std::ios::binary);
    options.tls_ca_pem.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (options.tls_ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-ca ", f.tls_ca, ": no PEM certificate in it"));
    }
  }
  absl::StatusOr<llamafleet::worker::TrainerIdentities> identities =
      llamafleet::worker::ResolveTrainerIdentities(f.run_as, geteuid());
  if (!identities.ok()) return absl::InvalidArgumentError(identities.status().message());
  options.identities = *identities;
  if (options.identities.single.has_value() && options.identities.single->uid == 0) {
    spdlog::warn("--run-as {}: trainers run as root; a job can then do anything root can",
                 f.run_as);
  }
  spdlog::info("trainers: {}",
               llamafleet::worker::DescribeTrainerIdentities(options.identities, geteuid()));
  for (absl::string_view kv : absl::StrSplit(f.labels, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--labels: expected k=v, got '", kv, "'"));
    }
    options.labels[p.first] = p.second;
  }
  options.trainer_command = {f.trainer};
  options.heartbeat_interval = absl::Seconds(f.heartbeat_s);
  if (f.preflight_interval_s < 0) {
    return absl::InvalidArgumentError("--preflight-interval must be >= 0 seconds");
  }
  options.preflight_interval = absl::Seconds(f.preflight_interval_s);
  if (f.memory_limit == "none") {
    options.trainer_memory_limit = 0;
  } else if (!f.memory_limit.empty()) {
    LF_ASSIGN_OR_RETURN(
        options.trainer_memory_limit,
        FlagSize("--trainer-memory-limit", f.memory_limit, llamafleet::worker::kMinRankMemoryLimit,
                 "neither none nor a size of at least 64M (e.g. 48G)"));
  }
  if (!f.token_cache_max_size.empty()) {
    LF_ASSIGN_OR_RETURN(options.token_cache_max_bytes,
                        FlagSize("--token-cache-max-size", f.token_cache_max_size, 1,
                                 "not a size above 0 (e.g. 500G)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", options.data_dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

// Runs the agent until SIGTERM/SIGINT (which a thread turns into a shutdown) or until it
// fails to start. Returns the exit code.
int RunAgent(const llamafleet::worker::AgentOptions& options) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  llamafleet::worker::WorkerAgent agent(options);
  std::atomic<bool> refused{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (refused) return;  // raised below to release this thread
    spdlog::info("received {}: stopping tasks", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    agent.Shutdown();
  });
  absl::Status status = agent.Run();
  if (!status.ok()) {
    std::cerr << "llamafleet-worker: " << status.message() << "\n";
    refused = true;
    kill(getpid(), SIGTERM);
    signals.join();
    return 1;
  }
  signals.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  llamafleet::worker::AgentOptions options;
  WorkerFlags flags;
  CLI::App app{"llamafleet worker: runs trainer ranks for the coordinator"};
  AddFlags(app, options, flags);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  if (flags.check_health) return llamafleet::worker::CheckHealthOnce(options);
  if (absl::Status s = ApplyFlags(flags, options); !s.ok()) {
    std::cerr << "llamafleet-worker: " << s.message() << "\n";
    return absl::IsInvalidArgument(s) ? 2 : 1;
  }
  return RunAgent(options);
}
