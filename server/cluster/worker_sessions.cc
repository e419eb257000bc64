#include "server/cluster/worker_sessions.h"

#include "absl/strings/str_cat.h"

namespace llamafleet {

HelloVerdict JudgeHello(const LiveWorker* known, const std::string& instance_id) {
  if (known == nullptr) return HelloVerdict::kFirst;
  const bool live = known->link != nullptr && !known->lost;
  if (live)
    return known->instance == instance_id ? HelloVerdict::kReconnect : HelloVerdict::kRefused;
  // Not live: a recovered worker (no hello since the coordinator started) has no instance.
  if (!known->instance_known) return HelloVerdict::kFirst;
  return known->instance == instance_id ? HelloVerdict::kReconnect : HelloVerdict::kNewProcess;
}

absl::Status SecondSessionRefused(const std::string& name, const LiveWorker& held, absl::Time now) {
  return absl::AlreadyExistsError(absl::StrCat(
      "worker name '", name, "' already has a live session from another process (heard from ",
      absl::FormatDuration(absl::Trunc(now - held.last_heartbeat, absl::Milliseconds(100))),
      " ago); one process per worker name: a second one is refused until that session ends (its "
      "heartbeat timeout). If no other worker should hold this name, its credential was copied: "
      "stop that process, then llamafleet-coordinator worker forget ",
      name, " --data-dir DIR"));
}

absl::Status ValidateInstanceId(const std::string& instance_id) {
  if (instance_id.size() > 64)
    return absl::InvalidArgumentError("hello.instance_id must be at most 64 characters");
  for (char c : instance_id) {
    if (c < 0x21 || c > 0x7e)
      return absl::InvalidArgumentError("hello.instance_id must be printable ASCII");
  }
  return absl::OkStatus();
}

}  // namespace llamafleet
