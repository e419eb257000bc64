// The ClusterManager's node faults: a worker whose session ends is shown so at once, and a
// gang's failure is blamed on the node that went away rather than on the survivor that
// reported it (node_loss.h). Strand-only.
#include "server/cluster/cluster_manager.h"
#include "server/cluster/node_loss.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

// How a gone worker went, for the failure's reason.
std::string HowGone(const WorkerRegistry& workers, const std::string& name) {
  if (workers.IsLost(name)) return "no heartbeat";
  if (workers.IsGone(name)) return "its session ended";
  return "its new session does not run its task";
}

}  // namespace

void ClusterManager::HandleDisconnected(const std::string& worker, const WorkerLink* link) {
  // Lost only if it stays silent past the heartbeat timeout; shown as disconnected now.
  if (!workers_.Disconnect(worker, link)) return;
  spdlog::info("worker {} disconnected", worker);
  Write(SetWorkerStateTxn(worker, v1::WORKER_DISCONNECTED), [](absl::Status) {});
  publish_workers_ = true;
  SettleHeldFailures(options_.clock->Now());
}

void ClusterManager::HoldOrBlame(ActiveAttempt& a, const std::string& worker,
                                 const TaskReportEffect& effect) {
  auto gone = [this](const std::string& w) { return workers_.IsGone(w); };
  if (const std::string peer = LostPeer(a, worker, gone); !peer.empty()) {
    a.held_failure.reset();
    const TaskReportEffect blamed = BlameLostPeer(effect, peer, HowGone(workers_, peer));
    EndAttempt(a, *blamed.end, blamed.reason, blamed.excluded_worker);
    return;
  }
  if (a.held_failure.has_value()) return;  // the first failure held stands
  spdlog::info("job {}: {}; waiting {} for a peer's loss to show", a.record.job_id, effect.reason,
               absl::FormatDuration(kPeerLossSettle));
  a.held_failure = ActiveAttempt::HeldFailure{worker, effect, options_.clock->Now() + kPeerLossSettle};
}

void ClusterManager::SettleHeldFailures(absl::Time now) {
  auto gone = [this](const std::string& w) { return workers_.IsGone(w); };
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    if (!a.held_failure.has_value()) return;
    const ActiveAttempt::HeldFailure held = *a.held_failure;
    if (a.ended) {
      a.held_failure.reset();
      return;
    }
    TaskReportEffect effect = held.effect;
    if (const std::string peer = LostPeer(a, held.worker, gone); !peer.empty()) {
      effect = BlameLostPeer(effect, peer, HowGone(workers_, peer));
    } else if (now < held.until) {
      return;
    }
    a.held_failure.reset();
    EndAttempt(a, *effect.end, effect.reason, effect.excluded_worker);
    MaybeRelease(job_id);
  });
}

}  // namespace llamafleet
