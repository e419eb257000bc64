#include "worker/session_hold.h"

#include <set>

#include "common/random_hex.h"

namespace llamafleet::worker {

std::string NewInstanceId() {
  // No randomness: the instance then only tells this process from one that sends none.
  return RandomHex(16).value_or("norandom");
}

std::vector<std::string> TasksNotHeld(const v1::Welcome& welcome,
                                      const std::vector<std::string>& listed) {
  std::set<std::string> stop(welcome.kill_task_ids().begin(), welcome.kill_task_ids().end());
  if (welcome.has_held()) {
    const std::set<std::string> held(welcome.held().task_ids().begin(),
                                     welcome.held().task_ids().end());
    for (const std::string& id : listed) {
      if (!held.count(id)) stop.insert(id);
    }
  }
  return {stop.begin(), stop.end()};
}

bool SessionTakenByAnother(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAlreadyExists ||
         status.code() == absl::StatusCode::kAborted;
}

}  // namespace llamafleet::worker
