#include "server/cluster/node_loss.h"

#include "absl/strings/str_cat.h"

namespace llamafleet {

bool MayBePeerLoss(const AttemptTracker& a, const std::string& worker,
                   const TaskReportEffect& effect) {
  if (!effect.end.has_value() || *effect.end != AttemptOutcome::kRetryable) return false;
  for (const TaskRecord& t : a.record.tasks) {
    if (t.worker != worker) return true;
  }
  return false;
}

std::string LostPeer(const AttemptTracker& a, const std::string& worker,
                     const std::function<bool(const std::string&)>& gone) {
  for (const TaskRecord& t : a.record.tasks) {
    if (t.worker == worker) continue;
    auto st = a.task_states.find(t.task_id);
    // A peer that finished its ranks (or failed on its own, reported) did not vanish.
    if (st != a.task_states.end() && IsTerminalTask(st->second)) continue;
    // A task its worker's new session does not list is gone with the old one.
    if (gone(t.worker) || a.missing_since.count(t.task_id) > 0) return t.worker;
  }
  return "";
}

TaskReportEffect BlameLostPeer(TaskReportEffect effect, const std::string& peer,
                               const std::string& how) {
  effect.end = AttemptOutcome::kNodeFault;
  effect.excluded_worker = peer;
  effect.reason = absl::StrCat("worker ", peer, " lost (", how, "); ", effect.reason);
  return effect;
}

}  // namespace llamafleet
