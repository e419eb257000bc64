#ifndef LLAMAFLEET_STORAGE_USAGE_STORE_H_
#define LLAMAFLEET_STORAGE_USAGE_STORE_H_

// GPU time and cost (llamafleet.v1.Usage). An attempt holds, for its whole life from
// placement (start_us) to its end, every rank of every task: its GPU-seconds are the
// sum over its tasks of ranks x (end - start). A task is priced by its worker, as the
// workers table last saw it: price(instance type) per instance-hour split over the
// worker's slots (GPUs, or CPU ranks on a CPU worker). An attempt is priced only when
// every one of its tasks is.
//
// Ended attempts keep what they used in their row (attempts.gpu_seconds, attempts.cost;
// NULL cost: unpriced), written once by EndAttemptTxn in the transaction that ends them,
// so a later change of prices does not rewrite history; the same transaction adds them to
// usage_totals(owner, queue), which outlives deleted jobs. Active attempts are measured up
// to the time of the read, with the prices of the reader.
//
// Failed usage: attempts that FAILED, or were STOPPED by preemption (failure class
// "preempted"): those did not produce the result. A cancelled attempt, and an elastic
// gang stopped to grow, are not failed (they count in gpu_seconds only).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "storage/job_store.h"

namespace llamafleet {

// Price per instance-hour by instance type ("p5.48xlarge" -> 98.32): the coordinator's
// `pricing` (docs/operations.md). Empty: nothing is priced.
using PriceTable = std::map<std::string, double>;

// What one attempt used.
struct AttemptUsage {
  double gpu_seconds = 0;
  std::optional<double> cost;  // nullopt: not every task's worker had a price
  bool failed = false;         // FAILED, or STOPPED by preemption
};

// Whether an attempt in `state` (the attempts.state column: 2 failed, 3 stopped) with
// `failure_class` counts as failed usage.
bool IsFailedUsage(int state, const std::string& failure_class);

// The price of one slot-hour of a worker: pricing[instance_type] / slots; nullopt when its
// instance type has no price or it has no slots.
std::optional<double> SlotHourPrice(const v1::Inventory& inventory, const PriceTable& pricing);

// Sums an attempt's tasks into its usage.
class AttemptMeter {
 public:
  // A task of `ranks` slots on a worker whose slot-hour costs `slot_hour_price`
  // (nullopt: unpriced, which leaves the whole attempt unpriced).
  void AddTask(int64_t ranks, std::optional<double> slot_hour_price);
  // The usage of the tasks over `seconds` of wall time (negative counts as 0). Without
  // tasks: 0 GPU-seconds, unpriced.
  AttemptUsage Measure(double seconds, bool failed) const;

 private:
  int64_t ranks_ = 0;
  double price_per_hour_ = 0;  // sum of ranks x slot-hour price
  bool priced_ = true;
  bool any_ = false;
};

// Adds one attempt to a sum of attempts (a job's, a user's in a queue): gpu_seconds, and
// failed_gpu_seconds when it failed. A priced attempt adds its cost to cost, and to
// failed_cost when it failed, setting both; an unpriced one adds no cost. So a sum's cost
// is that of its priced attempts, unset when none was priced.
void AddAttemptUsage(const AttemptUsage& attempt, v1::Usage* sum);
// Adds one sum to another, by the same rule (cost set when either has it).
void AddUsage(const v1::Usage& add, v1::Usage* sum);

// --- Writes.

// Records what the attempt used, once EndAttemptTxn has closed it (its end_us, state and
// failure_class set): stores its gpu_seconds and cost in its row and adds them to
// usage_totals(the job's owner, its queue). The job counts once there, at the end of its
// attempt 1. NOT_FOUND without the attempt or its job.
absl::Status RecordAttemptUsage(Txn& txn, int64_t job_id, int attempt, const PriceTable& pricing);

// --- Reads (any thread). `now`: where active attempts are measured to.

// Each job's usage over its attempts (ended ones as recorded, in attempt order), one entry
// per id asked for (a zero Usage for a job without attempts or unknown).
absl::StatusOr<std::map<int64_t, v1::Usage>> ReadJobUsage(JobStore& store, const std::vector<int64_t>& job_ids,
                                                          const PriceTable& pricing, absl::Time now);
// Sets gpu_seconds and cost of the ATTEMPT_ACTIVE attempts of `attempts` (ListAttempts'
// records; ended ones already carry their recorded usage) from their tasks.
absl::Status AddActiveAttemptUsage(JobStore& store, const PriceTable& pricing, absl::Time now,
                                   std::vector<v1::Attempt>* attempts);
// Usage per user and queue, all time: usage_totals plus the active attempts (an active
// attempt 1 counts its job), in one consistent read. By user, then queue; only `user`'s
// rows unless it is "".
absl::StatusOr<std::vector<v1::UsageRow>> ReadUsageRows(JobStore& store, const std::string& user,
                                                        const PriceTable& pricing, absl::Time now);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_USAGE_STORE_H_
