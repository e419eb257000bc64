#ifndef LLAMAFLEET_SERVER_SERIAL_EXECUTOR_H_
#define LLAMAFLEET_SERVER_SERIAL_EXECUTOR_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace llamafleet {

// Runs functions in order on one thread of its own: file-system work (checkpoint
// retention, log files) that must not run on the cluster loop or a gRPC callback thread.
// The destructor finishes what was queued. The thread is named `name` (15 characters at
// most) for top -H, perf and gdb.
class SerialExecutor {
 public:
  explicit SerialExecutor(const char* name);
  ~SerialExecutor();
  void Post(std::function<void()> fn);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_SERIAL_EXECUTOR_H_
