#ifndef LLAMAFLEET_WORKER_BOUNDED_COMMAND_H_
#define LLAMAFLEET_WORKER_BOUNDED_COMMAND_H_

// A probe command (nvidia-smi, dcgmi) run with a deadline and a cap on what is read of
// its output, so a wedged driver or a tool that prints without end never holds the
// thread that asked. No shell: argv[0] is looked up on PATH. stdin and stderr are
// /dev/null; the child starts with no signal blocked (the worker blocks SIGTERM in its
// threads). Past the deadline the child is killed (SIGKILL) and reaped.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace llamafleet::worker {

struct CommandOutput {
  bool started = false;    // false: could not be started (not on PATH, no resources)
  bool timed_out = false;  // killed at the deadline
  int exit_code = -1;      // its exit status; 128+N when killed by signal N
  bool truncated = false;  // stdout was longer than max_bytes (the rest was discarded)
  std::string out;         // stdout, at most max_bytes

  bool ok() const { return started && !timed_out && exit_code == 0; }
};

CommandOutput RunBoundedCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                                size_t max_bytes = 64 * 1024);

// Whether `name` is an executable on PATH.
bool OnPath(const std::string& name);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_BOUNDED_COMMAND_H_
