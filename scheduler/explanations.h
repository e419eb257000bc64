#ifndef LLAMAFLEET_SCHEDULER_EXPLANATIONS_H_
#define LLAMAFLEET_SCHEDULER_EXPLANATIONS_H_

// Internal to the scheduler: the pending reasons users read ("needs 3 nodes with 8 free
// GPUs and instance type p5.48xlarge; 2 match"), and recording a job as pending. Texts
// are part of the scheduler's results: the same input gives the same words.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scheduler/pass_state.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

// Appends the job to PassState::out.pending (queue positions are filled in at the end of
// the pass) and clears last_preempt_code for the next job.
void AddPending(PassState& pass, const PendingJob& job, PendingCode code, std::string message,
                std::optional<absl::Time> estimate = std::nullopt);

// "needs 3 nodes with 8 free GPUs and instance type p5.48xlarge", cached per shape and
// size (jobs with exclusions are rare: not cached). The view is valid until the next call.
absl::string_view Needs(PassState& pass, const PendingJob& job, const Shape& shape);

// "job 4" or "jobs 4, 7, 9, 12, 20 and 3 more": who holds capacity this job could use.
// Cached per shape until the next hold, unless the job holds capacity itself.
const std::string& Holders(PassState& pass, Shape& shape, int64_t self, bool self_holds);

// The reasons, one per way a job stays pending.
std::string InvalidSizeText(const PendingJob& job);
std::string NoMatchText(PassState& pass, const PendingJob& job, const Shape& shape);
std::string LargerThanClusterText(PassState& pass, const PendingJob& job, const Shape& shape,
                                  int capacity);
std::string QuotaText(const PendingJob& job, int64_t quota, int64_t used, int64_t want);
std::string WaitingForPreemptedText(PassState& pass, const PendingJob& job, const Shape& shape,
                                    int workers);
std::string PreemptingText(PassState& pass, const PendingJob& job, const Shape& shape,
                           const std::vector<int64_t>& victim_ids);
// The suffix of a reserved job's reason: "; waiting since ..., so 2 workers are reserved
// for it".
std::string ReservedText(const PendingJob& job);
std::string HeldText(PassState& pass, const PendingJob& job, Shape& shape,
                     const std::string& reserved);
std::string NoCapacityText(PassState& pass, const PendingJob& job, const Shape& shape,
                           PendingCode code, const std::string& reserved);

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_EXPLANATIONS_H_
