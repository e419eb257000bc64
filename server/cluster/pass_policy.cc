#include "server/cluster/pass_policy.h"

#include <algorithm>

#include "absl/strings/numbers.h"

namespace llamafleet {
namespace {

int64_t IdOf(const QueuedJobsSnapshot::Entry& e) {
  int64_t id = 0;
  return absl::SimpleAtoi(e->job.id(), &id) ? id : -1;
}

// Whether `now` is `last` but for jobs that left the queue because they have an attempt:
// both are in id order, and an entry stays the same object until a commit replaces it.
bool NothingNew(const QueuedJobsSnapshot& last, const QueuedJobsSnapshot& now,
                const std::map<int64_t, AttemptTracker>& attempts) {
  const auto& before = last.entries();
  const auto& after = now.entries();
  size_t i = 0;
  for (const QueuedJobsSnapshot::Entry& e : after) {
    // Entries of `before` up to e left the queue; each must have been started.
    while (i < before.size() && before[i] != e) {
      if (IdOf(before[i]) >= IdOf(e)) return false;  // e is new or replaced
      if (!attempts.count(IdOf(before[i]))) return false;
      ++i;
    }
    if (i == before.size()) return false;  // e is new
    ++i;
  }
  for (; i < before.size(); ++i) {
    if (!attempts.count(IdOf(before[i]))) return false;
  }
  return true;
}

}  // namespace

PassPolicy::PassPolicy(absl::Duration pass_interval)
    : interval_(std::chrono::duration_cast<SteadyDuration>(absl::ToChronoMicroseconds(pass_interval))) {}

void PassPolicy::CapacityFreed(int64_t job_id) {
  if (waits_for_capacity_ ||
      std::binary_search(held_by_attempt_.begin(), held_by_attempt_.end(), job_id) ||
      std::binary_search(awaited_.begin(), awaited_.end(), job_id)) {
    wanted_now_ = true;
  }
}

void PassPolicy::JobEnded(int64_t job_id) {
  if (std::binary_search(awaited_.begin(), awaited_.end(), job_id)) wanted_now_ = true;
}

PassPolicy::SteadyDuration PassPolicy::Wait(SteadyDuration tick, SteadyTime now) const {
  if (!wanted_soon_) return tick;
  return std::min(tick, std::max(SteadyDuration::zero(), next_allowed_ - now));
}

bool PassPolicy::Due(SteadyTime now) const {
  return wanted_now_ || (wanted_soon_ && now >= next_allowed_);
}

bool PassPolicy::ShouldCompareQueue(uint64_t workers_version) const {
  return wanted_soon_ && !wanted_now_ && ran_ && last_workers_version_ == workers_version;
}

bool PassPolicy::Run(absl::Time now, const QueuedJobsSnapshot* queue,
                     const std::map<int64_t, AttemptTracker>& attempts) {
  if (queue != nullptr && wanted_soon_ && !wanted_now_ && NothingNew(last_queue_, *queue, attempts)) {
    wanted_soon_ = false;
  }
  return wanted_now_ || wanted_soon_ || now - last_pass_ > absl::Seconds(2);
}

void PassPolicy::Began(absl::Time now) {
  wanted_now_ = false;
  wanted_soon_ = false;
  last_pass_ = now;
}

void PassPolicy::Ran(QueuedJobsSnapshot queue, uint64_t workers_version,
                     const std::vector<sched::Pending>& pending,
                     std::vector<int64_t> held_by_attempt, std::vector<int64_t> awaited_jobs,
                     SteadyTime start, SteadyTime end) {
  ran_ = true;
  awaited_ = std::move(awaited_jobs);
  last_queue_ = std::move(queue);
  last_workers_version_ = workers_version;
  held_by_attempt_ = std::move(held_by_attempt);
  waits_for_capacity_ = std::any_of(pending.begin(), pending.end(), [](const sched::Pending& p) {
    return p.code != sched::PendingCode::kNoMatchingWorkers &&
           p.code != sched::PendingCode::kLargerThanCluster;
  });
  next_allowed_ = end + std::max(interval_, end - start);
}

}  // namespace llamafleet
