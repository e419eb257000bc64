// The ClusterManager's hang detection: every rank's progress (relayed in its worker's
// heartbeats) is kept per attempt, and each tick an attempt whose gang is hung inside a
// collective (hang_rules.h) ends: as a node fault of the rank the others wait for, which
// uses none of the job's restarts and leaves that worker out of the next placement, or as
// a retryable failure when every rank waits. The same progress flags stragglers
// (straggler_rules.h) and applies the job's queue's straggler_policy. Strand-only.
#include <set>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "server/metrics.h"
#include "server/cluster/cluster_manager.h"
#include "server/cluster/hang_rules.h"
#include "spdlog/spdlog.h"
#include "storage/job_reads.h"

namespace llamafleet {

namespace {
// More entries than any worker has ranks: the rest of a heartbeat is ignored.
constexpr int kMaxRanksPerHeartbeat = 1024;
}  // namespace

void ClusterManager::HandleRankProgress(const std::string& worker,
                                        const google::protobuf::RepeatedPtrField<v1::RankProgress>& ranks) {
  const absl::Time now = options_.clock->Now();
  std::set<int64_t> touched;
  int seen = 0;
  for (const v1::RankProgress& p : ranks) {
    if (++seen > kMaxRanksPerHeartbeat) break;
    ActiveAttempt* a = AttemptOfTask(p.task_id());
    if (a == nullptr || a->ended) continue;
    // Only a task of this worker, and only the global ranks that task runs.
    const TaskRecord* task = nullptr;
    for (const TaskRecord& t : a->record.tasks) {
      if (t.task_id == p.task_id()) task = &t;
    }
    if (task == nullptr || task->worker != worker) continue;
    const int first = task->node_rank * task->ranks;
    if (p.rank() < first || p.rank() >= first + task->ranks) continue;
    if (a->gang.OnProgress(worker, p, a->WorldSize(), now)) touched.insert(a->record.job_id);
  }
  for (int64_t job_id : touched) {
    auto it = attempts_.find(job_id);
    if (it != attempts_.end()) CheckStragglers(job_id, it->second);
  }
}

void ClusterManager::CheckStragglers(int64_t job_id, ActiveAttempt& a) {
  if (a.ended || a.stopping || !a.running_recorded) return;
  for (const StragglerFlag& f : a.stragglers.Observe(a.gang.Busy(), a.WorldSize(), options_.straggler)) {
    auto policy = options_.straggler_actions.find(a.spec.queue());
    const StragglerAction action =
        policy == options_.straggler_actions.end() ? StragglerAction::kFlag : policy->second;
    spdlog::warn("job {} attempt {}: {} (policy {})", job_id, a.record.attempt, f.reason, StragglerActionName(action));
    if (options_.metrics != nullptr) options_.metrics->RecordStraggler(a.spec.queue(), StragglerActionName(action));
    Write(RecordAttemptNoteTxn(job_id, a.record.attempt, "straggler", f.reason), [](absl::Status) {});
    if (LiveWorker* w = workers_.Find(f.worker); w != nullptr) {
      w->straggler.set_job_id(JobIdString(job_id));
      w->straggler.set_rank(f.rank);
      w->straggler.set_reason(f.reason);
      w->straggler.set_action(StragglerActionName(action));
      *w->straggler.mutable_since() =
          google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(options_.clock->Now()));
      publish_workers_ = true;
    }
    if (action == StragglerAction::kRestartWithout && !a.ended) {
      // The trainers checkpoint on the stop's SIGTERM (a preemption's path) and exit,
      // within the cancel grace.
      a.held_failure.reset();
      EndAttempt(a, AttemptOutcome::kNodeDrained, absl::StrCat(f.reason, "; restarting without worker ", f.worker),
                 f.worker);
      MaybeRelease(job_id);
      return;
    }
  }
}

void ClusterManager::EndHung(absl::Time now) {
  if (options_.hang.floor <= absl::ZeroDuration()) return;
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    if (a.ended || a.stopping || !a.running_recorded) return;
    PauseSteps pauses;
    pauses.checkpoint_every = a.spec.checkpoint().every_steps();
    pauses.eval_every = a.spec.training().eval_every_steps();
    pauses.total_steps = a.total_steps;
    std::optional<HangVerdict> v = a.gang.Check(now, a.WorldSize(), options_.hang, pauses);
    if (!v.has_value()) return;
    spdlog::warn("job {} attempt {}: {}", job_id, a.record.attempt, v->reason);
    a.held_failure.reset();
    if (v->worker.empty()) {
      EndAttempt(a, AttemptOutcome::kRetryable, v->reason);
    } else {
      EndAttempt(a, AttemptOutcome::kNodeDrained, v->reason, v->worker);
    }
    MaybeRelease(job_id);
  });
}

}  // namespace llamafleet
