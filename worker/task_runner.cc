#include "worker/task_runner.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/dir_fd.h"
#include "common/proto_text.h"
#include "common/safe_open.h"
#include "common/status_macros.h"
#include "worker/trainer_events.h"

extern char** environ;

namespace llamafleet::worker {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are cut (and marked)

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Closes every descriptor from 3 up (async-signal-safe: for the child between fork and
// exec). close_range where the kernel has it, else a loop up to the descriptor limit.
void CloseFrom3(int max_fd) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd) close(fd);
}

}  // namespace

std::map<std::string, std::string> RankEnvironment(const TaskLaunch& launch, int local_rank) {
  const v1::TaskSpec& t = launch.task;
  std::map<std::string, std::string> env;
  const int world = t.nnodes() * t.nproc_per_node();
  env["RANK"] = absl::StrCat(t.node_rank() * t.nproc_per_node() + local_rank);
  env["LOCAL_RANK"] = absl::StrCat(local_rank);
  env["WORLD_SIZE"] = absl::StrCat(world);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(t.nproc_per_node());
  env["NODE_RANK"] = absl::StrCat(t.node_rank());
  env["GROUP_RANK"] = absl::StrCat(t.node_rank());
  env["MASTER_ADDR"] = t.master_addr();
  env["MASTER_PORT"] = absl::StrCat(t.master_port());
  env["LLAMAFLEET_JOB_ID"] = t.job_id();
  env["LLAMAFLEET_TASK_ID"] = t.task_id();
  env["LLAMAFLEET_ATTEMPT"] = absl::StrCat(t.attempt());
  // Token cache builds report progress as event lines (before "started"): the agent relays them.
  env["LLAMAFLEET_PROGRESS_EVENTS"] = "1";
  // torchrun's convention: every local rank sees the node's devices and picks LOCAL_RANK.
  env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(launch.gpu_indices, ",");
  if (launch.cpu_threads_per_rank > 0) {
    env["OMP_NUM_THREADS"] = absl::StrCat(launch.cpu_threads_per_rank);
  }
  if (launch.efa) {
    // aws-samples/awsome-distributed-training: with libfabric >= 1.18 and aws-ofi-nccl
    // >= 1.7 only FI_EFA_USE_HUGE_PAGE=0 matters; the others are harmless on newer stacks.
    env["FI_PROVIDER"] = "efa";
    env["FI_EFA_USE_HUGE_PAGE"] = "0";
    env["FI_EFA_USE_DEVICE_RDMA"] = "1";
    env["NCCL_SOCKET_IFNAME"] = "^docker,lo,veth";
  }
  for (const auto& [k, v] : t.env()) env[k] = v;
  return env;
}

absl::StatusOr<std::unique_ptr<TaskRunner>> TaskRunner::Start(TaskLaunch launch,
                                                              TaskListener* listener,
                                                              absl::Duration failure_grace) {
  std::unique_ptr<TaskRunner> runner(new TaskRunner(std::move(launch), listener, failure_grace));
  std::promise<absl::Status> launched;
  std::future<absl::Status> result = launched.get_future();
  TaskRunner* r = runner.get();
  // The ranks are forked from the monitor thread, which lives as long as they do:
  // PR_SET_PDEATHSIG fires when the forking *thread* exits.
  runner->monitor_ = std::thread([r, &launched] {
    absl::Status s = r->Launch();
    const bool ok = s.ok();
    if (!ok) r->KillLaunched();
    launched.set_value(std::move(s));
    if (ok) r->Monitor();
  });
  absl::Status s = result.get();
  if (!s.ok()) {
    runner->monitor_.join();
    return s;
  }
  return runner;
}

absl::Status TaskRunner::PrepareWorkDir() {
  const v1::TaskSpec& t = launch_.task;
  std::error_code ec;
  std::filesystem::create_directories(launch_.work_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create task dir ", launch_.work_dir, ": ", ec.message()));
  }
  // A task's directory may be there from an earlier start of the same task (a resent
  // assignment), written by its ranks: it is reached without following a link, and its
  // files are replaced only when they are regular files.
  const UniqueFd dir(
      open(launch_.work_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open task dir ", launch_.work_dir, ": ", std::strerror(errno)));
  }
  if (launch_.run_as.has_value()) {
    // The ranks' working directory belongs to them (and to no one else).
    if (fchown(dir.get(), launch_.run_as->uid, launch_.run_as->gid) != 0 ||
        fchmod(dir.get(), 0700) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("cannot hand task dir ", launch_.work_dir,
                                                        " to ", launch_.run_as->user, ": ",
                                                        std::strerror(errno)));
    }
  }
  auto write_file = [&](const std::string& name, const std::string& content) -> absl::Status {
    const std::string shown = launch_.work_dir + "/" + name;
    absl::StatusOr<UniqueFd> fd = CreateRegularFile(dir.get(), name, 0600, shown);
    if (!fd.ok()) return fd.status();
    if (::write(fd->get(), content.data(), content.size()) !=
        static_cast<ssize_t>(content.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", shown, ": ", std::strerror(errno)));
    }
    if (launch_.run_as.has_value() &&
        fchown(fd->get(), launch_.run_as->uid, launch_.run_as->gid) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot chown ", shown, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  };
  const std::string spec_json = MessageToJsonWithPresence(t.spec()) + "\n";
  LF_RETURN_IF_ERROR(write_file("spec.json", spec_json));
  if (t.resume_candidates_size() == 0) return absl::OkStatus();
  std::vector<trainer_events::ResumeCandidate> candidates;
  for (const v1::ResumeCandidate& c : t.resume_candidates()) {
    candidates.push_back({c.path(), c.step(), c.manifest_sha256()});
  }
  return write_file("resume_candidates.json", trainer_events::CandidatesToJson(candidates) + "\n");
}

absl::Status TaskRunner::Launch() {
  const v1::TaskSpec& t = launch_.task;
  LF_RETURN_IF_ERROR(PrepareWorkDir());
  std::vector<std::string> argv = launch_.trainer_command;
  // Relative to the working directory: the ranks need not be able to walk the worker's
  // data dir to find it.
  argv.insert(argv.end(), {"train", "--spec", "spec.json"});
  if (t.resume_candidates_size() > 0) {
    argv.insert(argv.end(), {"--resume-candidates", "resume_candidates.json"});
  } else if (!t.resume_from().empty()) {
    argv.insert(argv.end(), {"--resume", t.resume_from()});
  }
  for (const std::string& root : t.path_roots()) argv.insert(argv.end(), {"--path-root", root});
  if (!launch_.token_cache_dir.empty())
    argv.insert(argv.end(), {"--token-cache-dir", launch_.token_cache_dir});
  if (launch_.token_cache_max_bytes > 0) {
    argv.insert(argv.end(),
                {"--token-cache-max-size", std::to_string(launch_.token_cache_max_bytes)});
  }
  const std::vector<std::string> base_env =
      TrainerBaseEnvironment(environ, launch_.run_as, launch_.work_dir);
  struct rlimit nofile;
  const int max_fd = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20))
                         : 65536;
  const bool switch_user = launch_.run_as.has_value();
  const uid_t uid = switch_user ? launch_.run_as->uid : 0;
  const gid_t gid = switch_user ? launch_.run_as->gid : 0;
  const std::vector<gid_t> groups = switch_user ? launch_.run_as->groups : std::vector<gid_t>();
  const bool set_umask = launch_.umask.has_value();
  const mode_t mask = set_umask ? *launch_.umask : 0;
  // Capped at the worker's own hard limit, which an unprivileged child could not raise.
  rlim_t memory_limit = static_cast<rlim_t>(launch_.memory_limit);
  if (struct rlimit data;
      memory_limit != 0 && getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_max != RLIM_INFINITY) {
    memory_limit = std::min(memory_limit, data.rlim_max);
  }

  for (int local = 0; local < t.nproc_per_node(); ++local) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    std::map<std::string, std::string> env_map = RankEnvironment(launch_, local);
    // Prepare everything the child needs before fork: after fork only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (const std::string& entry : base_env) {
      if (!env_map.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env_map) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t group = pgid_;
    const char* dir = launch_.work_dir.c_str();

    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) {
      setpgid(0, group);  // 0 for the first rank: it leads the task's group
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      if (chdir(dir) != 0) _exit(126);
      if (set_umask) umask(mask);
      if (memory_limit != 0) {
        const struct rlimit limit = {memory_limit, memory_limit};
        if (setrlimit(RLIMIT_DATA, &limit) != 0) _exit(126);
      }
      if (switch_user) {
        // Groups first: after setuid there is no permission left to change them.
        if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
          const char msg[] = "llamafleet-worker: error: cannot switch to the trainer user\n";
          (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
          _exit(126);
        }
      }
      // After the identity change, which clears the parent-death signal.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(137);  // the worker died before prctl took effect
      CloseFrom3(max_fd);  // nothing of the worker's (sockets, database, pipes) leaks
      execve(args[0], args.data(), envp.data());
      const char msg[] = "llamafleet-worker: cannot execute the trainer\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    if (pgid_ == 0) pgid_ = pid;
    setpgid(pid, pgid_);  // also from the parent, so there is no race with the first kill
    close(out[1]);
    close(err[1]);
    SetNonBlocking(out[0]);
    SetNonBlocking(err[0]);
    Rank rank;
    rank.local_rank = local;
    rank.global_rank = t.node_rank() * t.nproc_per_node() + local;
    rank.pid = pid;
    rank.out_fd = out[0];
    rank.err_fd = err[0];
    ranks_.push_back(std::move(rank));
  }
  return absl::OkStatus();
}

void TaskRunner::KillLaunched() {
  if (pgid_ > 0) killpg(pgid_, SIGKILL);
  for (Rank& r : ranks_) {
    if (r.pid > 0) waitpid(r.pid, nullptr, 0);
    if (r.out_fd >= 0) close(r.out_fd);
    if (r.err_fd >= 0) close(r.err_fd);
  }
  ranks_.clear();
}

bool TaskRunner::Drain(Rank& r, bool is_stderr) {
  const std::string& id = launch_.task.task_id();
  const int fd = is_stderr ? r.err_fd : r.out_fd;
  std::string& buffer = is_stderr ? r.err_buffer : r.out_buffer;
  char chunk[16384];
  while (true) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) return n == 0 || (errno != EAGAIN && errno != EINTR);  // true: closed
    buffer.append(chunk, n);
    size_t start = 0, nl;
    while ((nl = buffer.find('\n', start)) != std::string::npos) {
      std::string line = buffer.substr(start, nl - start);
      start = nl + 1;
      // Stderr is logs only; how a rank ended comes from its exit record.
      if (!is_stderr && !line.empty() && line[0] == '{' &&
          line.find("\"event\"") != std::string::npos) {
        std::optional<trainer_events::Event> e = trainer_events::ParseLine(line);
        if (e.has_value() && std::holds_alternative<trainer_events::Exit>(*e)) {
          const auto& x = std::get<trainer_events::Exit>(*e);
          r.exit_record = absl::Status(x.code, x.message);
        }
      }
      listener_->OnLine(id, r.global_rank, is_stderr, line);
    }
    buffer.erase(0, start);
    if (buffer.size() > kMaxLineBytes) {
      listener_->OnLine(id, r.global_rank, is_stderr, buffer.substr(0, kMaxLineBytes) + " [cut]");
      buffer.clear();
    }
  }
}

void TaskRunner::PollOutputs() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank*, bool>> owners;
  for (Rank& r : ranks_) {
    if (r.out_fd >= 0) {
      fds.push_back({r.out_fd, POLLIN, 0});
      owners.emplace_back(&r, false);
    }
    if (r.err_fd >= 0) {
      fds.push_back({r.err_fd, POLLIN, 0});
      owners.emplace_back(&r, true);
    }
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return;
  }
  poll(fds.data(), fds.size(), 100);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Rank& r = *owners[i].first;
    const bool is_stderr = owners[i].second;
    int& fd = is_stderr ? r.err_fd : r.out_fd;
    if (Drain(r, is_stderr)) {
      close(fd);
      fd = -1;
    }
  }
}

bool TaskRunner::ReapRanks(Failure& failure) {
  bool all_exited = true;
  for (Rank& r : ranks_) {
    if (r.exited) continue;
    int status = 0;
    if (waitpid(r.pid, &status, WNOHANG) != r.pid) {
      all_exited = false;
      continue;
    }
    r.exited = true;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r.out_fd >= 0 && Drain(r, false)) {
      // Its exit record may have arrived after the last poll.
      close(r.out_fd);
      r.out_fd = -1;
    }
    if (r.exit_code == 0 || failure.failing) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_requested_) continue;
    // One rank failed: the gang cannot go on. Stop the others now instead of letting them
    // wait in a collective until a timeout.
    failure.failing = true;
    failure.message = absl::StrCat("rank ", r.global_rank, " exited with code ", r.exit_code,
                                   r.exit_record.has_value() && !r.exit_record->ok()
                                       ? absl::StrCat(": ", r.exit_record->ToString())
                                       : " (no exit record)");
    killpg(pgid_, SIGTERM);
    failure.kill_at = absl::Now() + failure_grace_;
  }
  return all_exited;
}

void TaskRunner::DrainExitedRanks() {
  for (Rank& r : ranks_) {
    for (bool is_stderr : {false, true}) {
      int& fd = is_stderr ? r.err_fd : r.out_fd;
      if (fd < 0) continue;
      Drain(r, is_stderr);
      close(fd);
      fd = -1;
    }
  }
}

void TaskRunner::Monitor() {
  Failure failure;
  bool termed = false;
  while (true) {
    PollOutputs();
    const bool all_exited = ReapRanks(failure);
    const absl::Time now = absl::Now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_requested_ && !termed) {
        killpg(pgid_, SIGTERM);
        termed = true;
      }
      if (now >= kill_deadline_ || now >= failure.kill_at) killpg(pgid_, SIGKILL);
    }
    if (all_exited) {
      // Pipes may still hold output of exited ranks (or of their children).
      DrainExitedRanks();
      killpg(pgid_, SIGKILL);  // anything the ranks left behind
      break;
    }
  }
  ReportFinished(failure);
}

void TaskRunner::ReportFinished(const Failure& failure) {
  std::vector<v1::RankExit> exits;
  bool all_ok = true;
  for (const Rank& r : ranks_) {
    v1::RankExit e;
    e.set_rank(r.global_rank);
    e.set_exit_code(r.exit_code);
    if (r.exit_record.has_value()) {
      e.set_status_code(static_cast<int32_t>(r.exit_record->code()));
      e.set_status_message(std::string(r.exit_record->message()));
      // "CODE: message", what coordinators before status_code classify from.
      if (!r.exit_record->ok()) e.set_last_error(r.exit_record->ToString());
    }
    exits.push_back(std::move(e));
    all_ok = all_ok && r.exit_code == 0;
  }
  v1::TaskState state;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure.failing) {
      state = v1::TASK_FAILED;
      message = failure.message;
    } else if (stop_requested_) {
      // Stopped on request, however the ranks exited (a preempted trainer that saved a
      // checkpoint exits 0).
      state = v1::TASK_KILLED;
      message = stop_reason_;
    } else if (all_ok) {
      state = v1::TASK_SUCCEEDED;
      message = "all ranks exited 0";
    } else {
      state = v1::TASK_FAILED;
      message = "a rank failed";
    }
  }
  finished_ = true;
  listener_->OnFinished(launch_.task.task_id(), state, exits, message);
}

void TaskRunner::Stop(absl::Duration grace, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = reason;
  kill_deadline_ = absl::Now() + grace;
}

TaskRunner::~TaskRunner() {
  Stop(absl::ZeroDuration(), "worker shutting down");
  if (monitor_.joinable()) monitor_.join();
}

}  // namespace llamafleet::worker
