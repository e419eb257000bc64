#ifndef LLAMAFLEET_SERVER_CLUSTER_HANG_RULES_H_
#define LLAMAFLEET_SERVER_CLUSTER_HANG_RULES_H_

// Hangs inside collectives: when a gang stopped making progress long enough to call it
// hung, and which rank the others are waiting for. Every rank prints a progress line about
// once a second (worker/trainer_events.h: steps, collective waits entered, whether it
// waits in one now); its worker relays the latest one per rank in each heartbeat
// (v1::RankProgress, with its age). GangProgress keeps them for one attempt.
//
// The bound. A step should not take longer than
//     bound = max(floor, step_factor x the median of the last kStepSamples step times)
// (step times from rank 0's step reports). The gang is *hung* once nothing moved for
// longer than the bound: no step report and no rank's (step, collectives, in_collective)
// changed. The job's stall_timeout_seconds stays the outer limit (the stall detector);
// the bound is meant to be shorter, and shorter than NCCL's 10-minute watchdog.
//
// Who is blamed, once hung (in this order):
//   silent     a rank whose last progress line its worker read more than `silent_after`
//              ago (stopped, wedged): the one silent longest (lowest rank on a tie)
//   not there  otherwise, with some rank waiting in collective C (the highest number a
//              waiting rank is in), a rank that does not wait in C: not waiting at all, or
//              waiting in an earlier one; the one furthest behind (fewest collectives,
//              lowest rank on a tie)
//   nobody     every rank waits in C: the transport is wedged (a retryable failure)
// A gang where every rank is live and none waits in a collective is computing, not hung:
// no verdict (the stall detector still applies). Nor is a live rank outside collectives
// at a step that saves a checkpoint or evaluates, or after the last step (exporting
// writes on rank 0 while the others wait to gather): PauseSteps; when only such ranks are
// behind, there is no verdict either.
//
// Nothing is judged before every rank of the attempt has reported progress (an older
// worker or trainer never does: only the stall detector applies then) or before the
// attempt's first step report (start-up has phases with no collectives). Pure: no clock
// of its own (callers pass `now`), no I/O.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "server/cluster/straggler_rules.h"

namespace llamafleet {

struct HangPolicy {
  absl::Duration floor = absl::Seconds(60);  // zero: hang detection off
  double step_factor = 5;                     // >= 1
  absl::Duration silent_after = absl::Seconds(3);
};

// How many recent step times the median is taken over.
inline constexpr int kStepSamples = 16;

// max(floor, step_factor x median(step_seconds)); the floor alone without samples.
absl::Duration HangBound(const std::deque<double>& step_seconds, const HangPolicy& policy);

// Steps after which a rank legitimately works outside collectives for a while (the
// job's checkpoint.every_steps, training.eval_every_steps, the last step). Zero: none.
struct PauseSteps {
  int64_t checkpoint_every = 0;
  int64_t eval_every = 0;
  int64_t total_steps = 0;
  bool At(int64_t step) const {
    return (checkpoint_every > 0 && step % checkpoint_every == 0) || (eval_every > 0 && step % eval_every == 0) ||
           (total_steps > 0 && step >= total_steps);
  }
};

struct HangVerdict {
  int rank = -1;           // the rank blamed; -1: nobody (every rank waits)
  std::string worker;      // its worker ("" when nobody)
  std::string reason;      // "hung: ..." naming the rank, its worker and what it did
};

// One attempt's per-rank progress and step times.
class GangProgress {
 public:
  // A rank's progress from `worker` (a heartbeat's RankProgress), received at `now`.
  // Values out of range (negative or non-finite numbers, ranks outside [0, world_size))
  // are refused (false) and change nothing.
  bool OnProgress(const std::string& worker, const v1::RankProgress& p, int world_size, absl::Time now);
  // Rank 0 reported `step` at `now` (the attempt's step reports, in order).
  void OnStep(int64_t step, absl::Time now);

  // The verdict at `now` for a gang of `world_size` ranks, by the rules above; nullopt
  // while it is not hung (or cannot be judged yet).
  std::optional<HangVerdict> Check(absl::Time now, int world_size, const HangPolicy& policy,
                                   const PauseSteps& pauses = {}) const;

  absl::Duration Bound(const HangPolicy& policy) const { return HangBound(step_seconds_, policy); }
  size_t ranks_reported() const { return ranks_.size(); }
  // Every rank's step and busy seconds, for the straggler rule (straggler_rules.h).
  std::map<int, RankBusy> Busy() const;

 private:
  struct Rank {
    std::string worker;
    int64_t step = 0;
    int64_t collectives = 0;
    bool in_collective = false;
    double busy_s = 0;
    double age_s = 0;   // as its worker measured it when sending
    absl::Time received;
  };
  std::map<int, Rank> ranks_;
  absl::Time last_activity_ = absl::InfinitePast();
  int64_t last_step_ = -1;
  absl::Time last_step_time_ = absl::InfinitePast();
  std::deque<double> step_seconds_;  // the last kStepSamples seconds per step
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_HANG_RULES_H_
