#include "worker/session_hold.h"

#include <openssl/rand.h>

#include <set>

namespace llamafleet::worker {

std::string NewInstanceId() {
  unsigned char random[16];
  if (RAND_bytes(random, sizeof(random)) != 1) {
    // No randomness: the instance then only tells this process from one that sends none.
    return "norandom";
  }
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (unsigned char b : random) {
    id.push_back(kHex[b >> 4]);
    id.push_back(kHex[b & 15]);
  }
  return id;
}

std::vector<std::string> TasksNotHeld(const v1::Welcome& welcome, const std::vector<std::string>& listed) {
  std::set<std::string> stop(welcome.kill_task_ids().begin(), welcome.kill_task_ids().end());
  if (welcome.has_held()) {
    const std::set<std::string> held(welcome.held().task_ids().begin(), welcome.held().task_ids().end());
    for (const std::string& id : listed) {
      if (!held.count(id)) stop.insert(id);
    }
  }
  return {stop.begin(), stop.end()};
}

bool SessionTakenByAnother(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAlreadyExists || status.code() == absl::StatusCode::kAborted;
}

}  // namespace llamafleet::worker
