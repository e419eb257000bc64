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
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
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
    std::filesystem::path sibling = std::filesystem::path(std::string(self, n)).parent_path() /
                                    "llamafleet-train";
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return "llamafleet-train";
}

}  // namespace

int main(int argc, char** argv) {
  llamafleet::worker::AgentOptions options;
  std::string labels;
  std::string trainer = DefaultTrainer();
  std::string token_file;
  double heartbeat_s = 2;
  std::string log_level = "info";

  CLI::App app{"llamafleet worker: runs trainer ranks for the coordinator"};
  app.add_option("--coordinator", options.coordinator, "coordinator HOST:PORT (required)");
  app.add_option("--join-token", options.join_token,
                 "shared secret the coordinator requires (visible in ps: prefer "
                 "--join-token-file or LLAMAFLEET_JOIN_TOKEN)");
  app.add_option("--join-token-file", token_file, "file holding the join token");
  std::string run_as;
  app.add_option("--run-as", run_as,
                 "USER[:GROUP] every job's trainers run as (a root worker's default: each job as its owner's "
                 "Unix identity, named by the coordinator)");
  app.add_option("--data-dir", options.data_dir, "directory for task files (required)");
  app.add_option("--cpu-ranks", options.cpu_ranks, "run as a CPU worker with N ranks");
  app.add_option("--instance-type", options.instance_type, "instance type (e.g. p5.48xlarge)");
  app.add_option("--labels", labels, "worker labels k=v,k=v");
  app.add_option("--name", options.name, "worker name (default: host name)");
  app.add_option("--address", options.address,
                 "address peers use to reach this node (default: host name)");
  app.add_option("--trainer", trainer, "llamafleet-train executable");
  app.add_option("--heartbeat-interval", heartbeat_s, "seconds between heartbeats");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  std::string tls_ca;
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate of a coordinator serving TLS");
  double preflight_interval_s = 300;
  app.add_option("--preflight-interval", preflight_interval_s,
                 "seconds between pre-flights while idle (0: only at join and after tasks)");
  app.add_option("--preflight-fail-for-test", options.preflight_fail_for_test,
                 "FILE: every pre-flight fails while FILE exists (fault injection for tests)");
  app.add_option("--gpu-health-fake-for-test", options.gpu_health_fake_for_test,
                 "FILE: while FILE exists its GPU health events (e.g. 'xid 79 gpu 0') are reported "
                 "in heartbeats (fault injection for tests)");
  std::string memory_limit;
  app.add_option(
      "--trainer-memory-limit", memory_limit,
      "SIZE (bytes, or with K, M, G, T), or none: the private memory each trainer rank may "
      "allocate (RLIMIT_DATA, GPU ranks too); a rank past it fails its allocation instead of "
      "exhausting the node (default: 90% of the host's memory divided among its ranks)");
  std::string token_cache_max_size;
  app.add_option("--token-cache-max-size", token_cache_max_size,
                 "SIZE (bytes, or with K, M, G, T): bound on each job owner's token cache; past it a "
                 "build removes the owner's least recently used entries that no run is using "
                 "(default: none)");
  bool check_health = false;
  app.add_flag("--check-health", check_health,
               "run the pre-flight and one GPU health sample, print them (JSON) and exit: 0 when "
               "the pre-flight passed");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (check_health) return llamafleet::worker::CheckHealthOnce(options);
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--coordinator", &options.coordinator},
                                    {"--data-dir", &options.data_dir}}) {
    if (value->empty()) {
      std::cerr << "llamafleet-worker: " << flag << " is required\n";
      return 2;
    }
  }
  if (!options.join_token.empty()) {
    spdlog::warn("--join-token is visible to every user in ps; use --join-token-file or the "
                 "environment variable LLAMAFLEET_JOIN_TOKEN");
  } else if (const char* env = std::getenv("LLAMAFLEET_JOIN_TOKEN");
             env != nullptr && token_file.empty()) {
    options.join_token = env;
  }
  unsetenv("LLAMAFLEET_JOIN_TOKEN");  // never handed to anything this process starts
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!std::getline(in, options.join_token)) {
      std::cerr << "llamafleet-worker: cannot read join token from " << token_file << "\n";
      return 1;
    }
  }
  if (!tls_ca.empty()) {
    std::ifstream in(tls_ca, std::ios::binary);
    options.tls_ca_pem.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (options.tls_ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      std::cerr << "llamafleet-worker: --tls-ca " << tls_ca << ": no PEM certificate in it\n";
      return 2;
    }
  }
  if (options.join_token.empty()) {
    std::cerr << "llamafleet-worker: a join token is required: --join-token-file FILE or "
                 "LLAMAFLEET_JOIN_TOKEN\n";
    return 2;
  }
  absl::StatusOr<llamafleet::worker::TrainerIdentities> identities =
      llamafleet::worker::ResolveTrainerIdentities(run_as, geteuid());
  if (!identities.ok()) {
    std::cerr << "llamafleet-worker: " << identities.status().message() << "\n";
    return 2;
  }
  options.identities = *identities;
  if (options.identities.single.has_value() && options.identities.single->uid == 0) {
    spdlog::warn("--run-as {}: trainers run as root; a job can then do anything root can", run_as);
  }
  spdlog::info("trainers: {}", llamafleet::worker::DescribeTrainerIdentities(options.identities, geteuid()));
  for (absl::string_view kv : absl::StrSplit(labels, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) {
      std::cerr << "llamafleet-worker: --labels: expected k=v, got '" << kv << "'\n";
      return 2;
    }
    options.labels[p.first] = p.second;
  }
  options.trainer_command = {trainer};
  options.heartbeat_interval = absl::Seconds(heartbeat_s);
  if (preflight_interval_s < 0) {
    std::cerr << "llamafleet-worker: --preflight-interval must be >= 0 seconds\n";
    return 2;
  }
  options.preflight_interval = absl::Seconds(preflight_interval_s);
  if (memory_limit == "none") {
    options.trainer_memory_limit = 0;
  } else if (!memory_limit.empty()) {
    const std::optional<uint64_t> bytes = llamafleet::ParseByteSize(memory_limit);
    if (!bytes || *bytes < llamafleet::worker::kMinRankMemoryLimit) {
      std::cerr << "llamafleet-worker: --trainer-memory-limit: \"" << memory_limit
                << "\" is neither none nor a size of at least 64M (e.g. 48G)\n";
      return 2;
    }
    options.trainer_memory_limit = *bytes;
  }
  if (!token_cache_max_size.empty()) {
    const std::optional<uint64_t> bytes = llamafleet::ParseByteSize(token_cache_max_size);
    if (!bytes || *bytes == 0) {
      std::cerr << "llamafleet-worker: --token-cache-max-size: \"" << token_cache_max_size
                << "\" is not a size above 0 (e.g. 500G)\n";
      return 2;
    }
    options.token_cache_max_bytes = *bytes;
  }
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    std::cerr << "llamafleet-worker: cannot create " << options.data_dir << ": " << ec.message()
              << "\n";
    return 1;
  }

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
