#ifndef LLAMAFLEET_CLIENTS_CLI_INTERRUPT_H_
#define LLAMAFLEET_CLIENTS_CLI_INTERRUPT_H_

// Ctrl-C for the long-running commands (`logs -f`, `watch`): while an InterruptWatcher
// lives, SIGINT and SIGTERM no longer kill the process; instead a helper thread calls
// `on_interrupt` once (typically Client::CancelStreams), so the command can unwind,
// finish its output and exit with 128+signal. After that first signal the previous
// dispositions are back, so a second Ctrl-C kills a command that fails to unwind.
//
// The signal handler only writes the signal number to a pipe (async-signal-safe); the
// callback runs on an ordinary thread, where taking locks and calling gRPC is allowed.
// At most one watcher may exist at a time (an invariant: a second one crashes).

#include <atomic>
#include <functional>
#include <thread>

namespace llamafleet::cli {

class InterruptWatcher {
 public:
  explicit InterruptWatcher(std::function<void()> on_interrupt);
  // Restores the previous signal dispositions and joins the helper thread.
  ~InterruptWatcher();

  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  // The first signal received (SIGINT or SIGTERM), or 0.
  int signal() const { return signal_.load(); }

 private:
  void Run();

  // Constant after construction.
  const std::function<void()> on_interrupt_;
  int pipe_[2] = {-1, -1};

  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_INTERRUPT_H_
