#include "tests/testing/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace llamafleet::testing {
namespace {

void SetEnv(const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
}

std::vector<char*> Argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

absl::StatusOr<int> WaitPid(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    if (absl::Now() > deadline) return absl::DeadlineExceededError("process did not exit in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::string BinaryPath(const std::string& name) {
  if (const char* dir = std::getenv("LLAMAFLEET_BIN_DIR")) return absl::StrCat(dir, "/", name);
  return absl::StrCat(LLAMAFLEET_BIN_DIR, "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void PrintLogTails(const std::string& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::string text = ReadFile(dir + "/" + name + ".log");
    if (!text.empty()) std::cout << "---- " << name << ".log\n" << text.substr(text.size() > 6000 ? text.size() - 6000 : 0);
  }
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "llamafleet-test-XXXXXX").string();
  char* made = mkdtemp(pattern.data());
  path_ = made != nullptr ? made : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& bytes) const {
  const std::string path = File(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
    const std::string& stderr_path) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    if (!stderr_path.empty()) {
      int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    SetEnv(env);
    std::vector<char*> args = Argv(argv);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  p->pid_ = pid;
  p->stdout_fd_ = out[0];
  return p;
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    (void)WaitPid(pid_, absl::Seconds(10));
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLineWithPrefix(const std::string& prefix,
                                                           absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t newline;
    while ((newline = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("no line starting with '", prefix, "'"));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000))) <= 0) continue;
    char chunk[4096];
    ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("process closed stdout before '", prefix, "'"));
    }
    buffer_.append(chunk, n);
  }
}

absl::StatusOr<std::string> Subprocess::WaitForListening(absl::Duration timeout) {
  return ReadLineWithPrefix("listening on ", timeout);
}

void Subprocess::Signal(int signal) {
  if (!reaped_) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  absl::StatusOr<int> code = WaitPid(pid_, timeout);
  if (code.ok()) reaped_ = true;
  return code;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& input,
                                         const std::map<std::string, std::string>& env,
                                         absl::Duration timeout) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe failed");
  }
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    SetEnv(env);
    std::vector<char*> args = Argv(argv);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  // Feed stdin from a thread so a child that writes a lot before reading cannot deadlock us.
  std::thread feeder([fd = in[1], input] {
    size_t off = 0;
    while (off < input.size()) {
      ssize_t n = write(fd, input.data() + off, input.size() - off);
      if (n <= 0) break;
      off += n;
    }
    close(fd);
  });
  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left_ms, 1000))) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char chunk[8192];
      ssize_t n = read(fds[i].fd, chunk, sizeof(chunk));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(chunk, n);
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  feeder.join();
  absl::StatusOr<int> code = WaitPid(pid, absl::Seconds(10));
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(argv[0], " did not finish within ",
                                                    absl::FormatDuration(timeout)));
  }
  if (!code.ok()) return code.status();
  result.exit_code = *code;
  return result;
}

double ProcessCpuMicros(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field && i <= 15; ++i) {  // field 3 is the state
    if (i >= 14) ticks += std::stod(field);            // utime (14) + stime (15)
  }
  return ticks * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  return samples[std::min(samples.size() - 1, static_cast<size_t>(p * samples.size()))];
}

int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace llamafleet::testing
