#ifndef LLAMAFLEET_TESTS_TESTING_PROCESS_H_
#define LLAMAFLEET_TESTS_TESTING_PROCESS_H_

// Real processes for tests: start a binary, read its output, signal it, and make sure
// it is gone when the test ends.

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llamafleet::testing {

// Path of a built executable (build/bin/NAME).
std::string BinaryPath(const std::string& name);

// The whole file at `path` ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// Prints the last 6,000 bytes of each `dir`/<name>.log that has any, under a "---- <name>.log"
// line: what a failed test's processes said.
void PrintLogTails(const std::string& dir, const std::vector<std::string>& names);

// A temporary directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  // path()/name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to path()/name (replacing it) and returns that path.
  std::string Write(const std::string& name, const std::string& bytes) const;

 private:
  std::string path_;
};

class Subprocess {
 public:
  // Starts argv[0] with argv; stdout is a pipe read by ReadLineWithPrefix/ReadAll;
  // stderr goes to `stderr_path` ("" = inherit). `env` entries are added to the
  // environment. The child gets its own process group.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
      const std::string& stderr_path = "");
  // Kills the process group (SIGKILL) if still running, and reaps it.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Reads stdout until a line starting with `prefix`; returns the rest of that line.
  absl::StatusOr<std::string> ReadLineWithPrefix(const std::string& prefix, absl::Duration timeout);
  // For a coordinator: waits for "listening on HOST:PORT" and returns HOST:PORT.
  absl::StatusOr<std::string> WaitForListening(absl::Duration timeout = absl::Seconds(20));
  void Signal(int signal);
  // Waits for exit; returns the exit code, or 128+signal if killed.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
  bool reaped_ = false;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs a command to completion, feeding `input` on stdin; fails only if it cannot be
// started or outlives `timeout` (then it is killed).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& input = "",
                                         const std::map<std::string, std::string>& env = {},
                                         absl::Duration timeout = absl::Seconds(60));

// User + system CPU time of a process so far (from /proc/PID/stat), in microseconds;
// 0 if it cannot be read.
double ProcessCpuMicros(pid_t pid);

// The p-quantile (0..1) of the samples, nearest rank; 0 for no samples.
double Percentile(std::vector<double> samples, double p);

// A TCP socket listening on 127.0.0.1 at a free port (stored in *port), for fake servers;
// -1 on failure. The caller closes it.
int ListenOnLoopback(int* port);

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_PROCESS_H_
