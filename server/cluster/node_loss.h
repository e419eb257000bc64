#ifndef LLAMAFLEET_SERVER_CLUSTER_NODE_LOSS_H_
#define LLAMAFLEET_SERVER_CLUSTER_NODE_LOSS_H_

// Who to blame when a rank of a multi-node gang fails. A node that dies takes the gang's
// collectives down on every survivor, and a survivor's failure report can reach the
// coordinator before (or just after) the dead node's session ends. A retryable failure of
// one task is therefore held for kPeerLossSettle: if another worker of the gang is gone by
// then (lost, its session ended, or it restarted without its task), the attempt ends as a
// node fault of that worker (it is excluded from the next placement), not of the survivor
// that reported. Pure: callers pass what they know of the workers.

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "server/cluster/attempt_tracker.h"

namespace llamafleet {

// How long a survivor's retryable failure waits for a peer's loss to show.
inline constexpr absl::Duration kPeerLossSettle = absl::Seconds(2);

// Whether `effect`, from a task on `worker`, is a failure a lost peer may have caused: it
// ends the attempt as retryable, and the attempt has tasks on another worker.
bool MayBePeerLoss(const AttemptTracker& attempt, const std::string& worker,
                   const TaskReportEffect& effect);

// The first worker of the attempt (by node rank) other than `worker` whose task is not
// terminal and is gone: `gone` says so of its worker, or its worker's new session does not
// list it (missing). "" when there is none.
std::string LostPeer(const AttemptTracker& attempt, const std::string& worker,
                     const std::function<bool(const std::string&)>& gone);

// `effect` blamed on the lost `peer`: a node fault excluding it, its reason naming it
// first ("worker P lost (its session ended); task T on S failed: ...").
TaskReportEffect BlameLostPeer(TaskReportEffect effect, const std::string& peer,
                               const std::string& how);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_NODE_LOSS_H_
