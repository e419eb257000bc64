#ifndef LLAMAFLEET_SERVER_CLUSTER_STRAGGLER_RULES_H_
#define LLAMAFLEET_SERVER_CLUSTER_STRAGGLER_RULES_H_

// Stragglers: the rank of a gang the others keep waiting for. In synchronous data
// parallel every rank's step takes the same wall time; what differs is how much of it a
// rank spends working ("busy": outside collective waits, from its progress lines,
// worker/trainer_events.h) rather than waiting for the slowest. So ranks are compared by
// busy seconds per step.
//
// A round is complete once every rank's step advanced since the previous round; each
// rank's busy seconds per step over the round is compared with the median of the other
// ranks'. A rank above `factor` x that median (and above `min_busy_per_step_s`, below
// which timing noise dominates) for `consecutive` rounds in a row is flagged, once per
// attempt. A round at or below the factor resets the rank's count.
//
// Pure: no clock, no I/O. The ClusterManager applies the queue's policy to a flag:
// `flag` (an event and a metric) or `restart-without` (also ends the attempt as a node
// fault that uses no restart and leaves the straggler's worker out of the next placement).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace llamafleet {

struct StragglerPolicy {
  double factor = 2.0;                // > 1
  int consecutive = 5;                // >= 1
  double min_busy_per_step_s = 0.005;
};

// What a queue does with a straggler (queues.NAME.straggler_policy).
enum class StragglerAction { kFlag, kRestartWithout };
// "flag" | "restart-without"; nullopt for anything else.
std::optional<StragglerAction> ParseStragglerAction(const std::string& name);
const char* StragglerActionName(StragglerAction action);

struct RankBusy {
  std::string worker;
  int64_t step = 0;
  double busy_s = 0;  // since the trainer started (finite, >= 0: checked by the caller)
};

struct StragglerFlag {
  int rank = 0;
  std::string worker;
  double busy_per_step_s = 0;
  double median_others_s = 0;
  std::string reason;  // "straggler: rank R on worker W ..."
};

class StragglerTracker {
 public:
  // The gang's latest progress (every rank of it, by global rank). Returns the ranks
  // flagged by this call (each at most once per tracker).
  std::vector<StragglerFlag> Observe(const std::map<int, RankBusy>& ranks, int world_size,
                                     const StragglerPolicy& policy);
  const std::set<int>& flagged() const { return flagged_; }

 private:
  struct Mark {
    int64_t step = 0;
    double busy_s = 0;
  };
  std::map<int, Mark> last_;      // each rank at the end of the previous round
  std::map<int, int> slow_rounds_;  // consecutive rounds above the factor
  std::set<int> flagged_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_STRAGGLER_RULES_H_
