#ifndef LLAMAFLEET_WORKER_SESSION_HOLD_H_
#define LLAMAFLEET_WORKER_SESSION_HOLD_H_

// Which of a worker's trainers its coordinator session holds. A worker process runs only
// the trainers it started and lists them in each hello, under an instance id of its own
// (server/cluster/worker_sessions.h has the coordinator's side of the contract). A trainer
// that no session holds keeps writing for nobody, so the worker stops it at once:
//   - every task its hello listed that the welcome does not hold (Welcome.held, or
//     kill_task_ids from a coordinator that sends no held list);
//   - every task when its hello is refused because another process holds the name
//     (ALREADY_EXISTS), or when its session is superseded by a hello under this process's
//     own instance id (ABORTED): either way, another process answers for the name now.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::worker {

// A random Hello.instance_id for this process (32 hex digits), never stored.
std::string NewInstanceId();

// The tasks of `listed` (the hello's running_task_ids) that `welcome` does not hold.
std::vector<std::string> TasksNotHeld(const v1::Welcome& welcome,
                                      const std::vector<std::string>& listed);

// Whether a session that ended with `status` means that another process answers for this
// worker's name: no session holds any of its trainers then.
bool SessionTakenByAnother(const absl::Status& status);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_SESSION_HOLD_H_
