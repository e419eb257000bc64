// The ClusterManager's node faults: a worker whose session ends is shown so at once; a
// gang's failure is blamed on the node that went away rather than on the survivor that
// reported it (node_loss.h); drained nodes get no placements and their attempts restart
// elsewhere, pre-flight results drain and undrain nodes (node_health.h), and fatal GPU
// health events drain them (gpu_health_rules.h). Strand-only.
#include "absl/strings/str_cat.h"
#include "server/cluster/cluster_manager.h"
#include "server/cluster/gpu_health_rules.h"
#include "server/cluster/node_health.h"
#include "server/cluster/node_loss.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"
#include "storage/worker_drain_store.h"

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

void ClusterManager::WriteTaskFailed(const std::string& task_id, const std::string& message) {
  v1::TaskStatus failed;
  failed.set_task_id(task_id);
  failed.set_state(v1::TASK_FAILED);
  failed.set_message(message);
  Write(SetTaskStateTxn(task_id, failed), [](absl::Status) {});
}

void ClusterManager::EndPreviousProcessTasks(const std::string& worker) {
  const std::string reason = absl::StrCat(
      "worker ", worker, " registered from a new process; the tasks placed on its previous process are gone "
      "with it (their ranks' fate is unknown)");
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    if (!a.committed) return;
    bool ran_there = false;
    for (const TaskRecord& t : a.record.tasks) {
      if (t.worker != worker || IsTerminalTask(a.task_states[t.task_id])) continue;
      ran_there = true;
      WriteTaskFailed(t.task_id, reason);
      a.Abandon(t.task_id);  // nobody will report it: this process never ran it
    }
    if (!ran_there) return;
    spdlog::warn("job {}: {}", job_id, reason);
    a.held_failure.reset();
    EndAttempt(a, AttemptOutcome::kNodeDrained, reason, worker);
    MaybeRelease(job_id);
  });
  publish_workers_ = true;
  pass_.WantNow();
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

void ClusterManager::HandlePreflight(const std::string& worker, const v1::PreflightResult& result) {
  LiveWorker* w = workers_.Heard(worker, options_.clock->Now());
  if (w == nullptr) return;
  w->preflight = result;
  publish_workers_ = true;
  const absl::Time now = options_.clock->Now();
  const WorkerDrainRecord* drain = workers_.DrainOf(worker);
  const HealthDecision d = DecidePreflight(
      drain == nullptr ? std::nullopt : std::optional<WorkerDrainRecord>(*drain), result, now,
      options_.drain_cooloff);
  switch (d.action) {
    case HealthDecision::kNone:
      if (!result.passed()) spdlog::warn("worker {}: pre-flight {}", worker, PreflightSummary(result));
      return;
    case HealthDecision::kDrain:
      Drain({worker, d.reason, kDrainByPreflight, now});
      return;
    case HealthDecision::kUndrain:
      spdlog::info("worker {} undrained: pre-flight {} after the {} cool-off", worker,
                   PreflightSummary(result), absl::FormatDuration(options_.drain_cooloff));
      Write(ClearWorkerDrainTxn(worker, drain->source), [](absl::Status s) {
        if (!s.ok()) spdlog::error("cannot record an undrain: {}", s.ToString());
      });
      ApplyUndrain(worker);
      return;
  }
}

void ClusterManager::HandleGpuHealth(const std::string& worker,
                                     const google::protobuf::RepeatedPtrField<v1::GpuSample>& samples) {
  LiveWorker* w = workers_.Find(worker);
  if (w == nullptr) return;
  const absl::Time now = options_.clock->Now();
  const std::vector<GpuHealthEvent> events = ObserveGpuSamples(w->gpu_health, samples, now);
  if (events.empty()) return;
  publish_workers_ = true;
  for (const GpuHealthEvent& e : events) {
    if (options_.metrics != nullptr) options_.metrics->RecordGpuHealthEvent(GpuHealthEventName(e.kind), e.fatal);
    spdlog::warn("worker {}: {}{}", worker, e.detail, e.fatal ? " (fatal)" : "");
  }
  const WorkerDrainRecord* drain = workers_.DrainOf(worker);
  const HealthDecision d = DecideGpuHealth(
      drain == nullptr ? std::nullopt : std::optional<WorkerDrainRecord>(*drain), events);
  if (d.action == HealthDecision::kDrain) Drain({worker, d.reason, kDrainByGpuHealth, now});
}

void ClusterManager::Drain(const WorkerDrainRecord& record) {
  spdlog::warn("worker {} drained ({}): {}", record.name, record.source, record.reason);
  Write(SetWorkerDrainTxn(record), [](absl::Status s) {
    if (!s.ok()) spdlog::error("cannot record a drain: {}", s.ToString());
  });
  ApplyDrain(record);
}

void ClusterManager::ReadDrains(absl::Time now) {
  if (now < next_drain_read_) return;
  next_drain_read_ = now + options_.drain_poll;
  absl::StatusOr<std::map<std::string, WorkerDrainRecord>> drains = ListWorkerDrains(*store_);
  if (!drains.ok()) {
    spdlog::warn("cannot read the worker drains: {}", drains.status().ToString());
    return;
  }
  // Only what changed since the last read: a drain this loop made and has not committed
  // yet is not undone by a read from before its commit.
  const DrainChanges changes = DiffDrains(drains_read_, *drains);
  drains_read_ = *std::move(drains);
  for (const WorkerDrainRecord& d : changes.drained) ApplyDrain(d);
  for (const std::string& name : changes.undrained) ApplyUndrain(name);
}

void ClusterManager::ApplyDrain(const WorkerDrainRecord& drain) {
  const WorkerDrainRecord* before = workers_.DrainOf(drain.name);
  const bool changed = before == nullptr || !(*before == drain);
  if (changed) {
    workers_.SetDrain(drain);
    publish_workers_ = true;
    if (drain.source == kDrainByOperator) spdlog::info("worker {} drained by an operator: {}", drain.name, drain.reason);
  }
  const std::string reason = absl::StrCat("worker ", drain.name, " drained (", drain.source, "): ", drain.reason);
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    // (An attempt already stopping goes away anyway; one not yet committed is moved once
    // it is, by StartAttempt.)
    if (a.ended || a.stopping || !a.committed) return;
    bool runs_there = false;
    for (const TaskRecord& t : a.record.tasks) {
      runs_there |= t.worker == drain.name && !IsTerminalTask(a.task_states[t.task_id]);
    }
    if (!runs_there) return;
    a.held_failure.reset();
    EndAttempt(a, AttemptOutcome::kNodeDrained, reason);
    MaybeRelease(job_id);
  });
  pass_.WantNow();
}

void ClusterManager::ApplyUndrain(const std::string& worker) {
  if (!workers_.ClearDrain(worker)) return;
  spdlog::info("worker {} undrained", worker);
  publish_workers_ = true;
  pass_.WantNow();
}

}  // namespace llamafleet
