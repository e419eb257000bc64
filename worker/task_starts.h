#ifndef LLAMAFLEET_WORKER_TASK_STARTS_H_
#define LLAMAFLEET_WORKER_TASK_STARTS_H_

// Task starts in flight, off the session's thread. Before its trainers run, a task's start
// walks the paths its job names (realpath, the export and link checks) and makes its
// directories on shared storage: storage that a user with a shell can make slow, or that
// hangs outright. The thread that reads the coordinator's session stream must never wait
// for that, or the worker stops hearing cancels and cannot reconnect. So each start runs on
// a thread of its own: a hung one delays only its own task.
//
// A cancel that arrives while a task is starting is kept here, and whoever finishes the
// start (the agent, worker/agent.h) asks for it before and after it launches the trainers:
// a task cancelled meanwhile never runs on.

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace llamafleet::worker {

class TaskStarts {
 public:
  // At most `max_in_flight` starts at once (a hung start counts until it returns).
  explicit TaskStarts(size_t max_in_flight);
  // Waits for every start still running (JoinAll).
  ~TaskStarts();
  TaskStarts(const TaskStarts&) = delete;
  TaskStarts& operator=(const TaskStarts&) = delete;

  enum class Begun { kStarted, kAlreadyStarting, kFull };
  // Runs `start` on a thread of its own for `task_id` and returns kStarted; a start of
  // `task_id` in flight already (a repeated assignment) is kAlreadyStarting and `start` is
  // dropped, so is one past max_in_flight (kFull). The start is in flight until `start`
  // returns; it must not call back into this object's Begin or JoinAll.
  Begun Begin(const std::string& task_id, std::function<void()> start);

  // Records that the start of `task_id` is cancelled for `why`; false when no start of it
  // is in flight (nothing is recorded then).
  bool Cancel(const std::string& task_id, const std::string& why);
  // Why the start of `task_id` was cancelled; nullopt while it is not, or when no start of
  // it is in flight.
  std::optional<std::string> Cancelled(const std::string& task_id) const;
  // The tasks whose starts are in flight, sorted.
  std::vector<std::string> InFlight() const;

  // Waits for every start in flight to return; Begin refuses (kFull) from then on.
  void JoinAll();

 private:
  struct Start {
    std::thread thread;
    std::optional<std::string> cancelled;
  };
  // Joins the threads of starts that have returned.
  void ReapFinished();

  // Constant after construction.
  const size_t max_in_flight_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // a start returned
  std::map<std::string, Start> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);  // returned, not joined yet
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_TASK_STARTS_H_
