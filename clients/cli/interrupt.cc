#include "clients/cli/interrupt.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace llamafleet::cli {
namespace {

// The write end of the live watcher's pipe; -1 when none. Read by the signal handler.
volatile sig_atomic_t g_write_fd = -1;
struct sigaction g_old_int;
struct sigaction g_old_term;

// The byte the destructor writes to stop the helper thread; never a signal number.
constexpr char kStop = 0;

void OnSignal(int signo) {
  const int saved = errno;
  const char byte = static_cast<char>(signo);
  if (g_write_fd >= 0) (void)!write(g_write_fd, &byte, 1);
  errno = saved;
}

}  // namespace

InterruptWatcher::InterruptWatcher(std::function<void()> on_interrupt)
    : on_interrupt_(std::move(on_interrupt)) {
  if (g_write_fd != -1) std::abort();        // one watcher at a time
  if (pipe2(pipe_, O_CLOEXEC) != 0) return;  // no watcher: signals keep their default
  g_write_fd = pipe_[1];
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_old_int);
  sigaction(SIGTERM, &action, &g_old_term);
  thread_ = std::thread([this] { Run(); });
}

InterruptWatcher::~InterruptWatcher() {
  if (pipe_[1] < 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  (void)!write(pipe_[1], &kStop, 1);
  thread_.join();
  g_write_fd = -1;
  close(pipe_[0]);
  close(pipe_[1]);
}

void InterruptWatcher::Run() {
  while (true) {
    char byte;
    const ssize_t n = read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == kStop) return;
    // The first signal unwinds the command; should that hang, a second Ctrl-C kills it
    // the usual way.
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
    int expected = 0;
    if (signal_.compare_exchange_strong(expected, byte)) on_interrupt_();
  }
}

}  // namespace llamafleet::cli
