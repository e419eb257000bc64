#include "scheduler/explanations.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/capacity.h"

namespace llamafleet::sched {

const char* PendingCodeName(PendingCode code) {
  switch (code) {
    case PendingCode::kInsufficientCapacity:
      return "INSUFFICIENT_CAPACITY";
    case PendingCode::kNoMatchingWorkers:
      return "NO_MATCHING_WORKERS";
    case PendingCode::kQuotaExceeded:
      return "QUOTA_EXCEEDED";
    case PendingCode::kBlockedByReservation:
      return "BLOCKED_BY_RESERVATION";
    case PendingCode::kWaitingForPreemption:
      return "WAITING_FOR_PREEMPTION";
    case PendingCode::kPreemptionCooldown:
      return "PREEMPTION_COOLDOWN";
    case PendingCode::kLargerThanCluster:
      return "LARGER_THAN_CLUSTER";
  }
  return "UNKNOWN";
}

namespace internal {
namespace {

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB",
                         static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

std::string Plural(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string NeedsText(const PendingJob& job) {
  std::vector<std::string> extra;
  if (!job.instance_type.empty())
    extra.push_back(absl::StrCat("instance type ", job.instance_type));
  if (job.efa_per_node > 0) extra.push_back(Plural(job.efa_per_node, "EFA device", "EFA devices"));
  if (job.memory_per_gpu_bytes > 0)
    extra.push_back(absl::StrCat(GiB(job.memory_per_gpu_bytes), " per GPU (memory estimate)"));
  if (!job.node_labels.empty()) {
    extra.push_back(absl::StrCat(job.node_labels.size() == 1 ? "label " : "labels ",
                                 absl::StrJoin(job.node_labels, ",", absl::PairFormatter("="))));
  }
  std::string s = absl::StrCat("needs ", Plural(job.nodes, "node", "nodes"), " with ",
                               Plural(job.gpus_per_node, "free GPU", "free GPUs"));
  for (size_t i = 0; i < extra.size(); ++i) {
    absl::StrAppend(&s, i + 1 == extra.size() ? " and " : ", ", extra[i]);
  }
  if (!job.excluded_workers.empty()) {
    absl::StrAppend(&s, " (",
                    Plural(static_cast<int>(job.excluded_workers.size()), "worker", "workers"),
                    " excluded after node faults)");
  }
  return s;
}

std::string HoldersText(const PassState& pass, const Shape& shape, int64_t self) {
  std::set<int64_t> ids;
  for (int ci : shape.classes) {
    for (int64_t id : pass.classes[ci].holders) {
      if (id != self) ids.insert(id);
    }
  }
  std::vector<int64_t> first(ids.begin(), ids.end());
  std::string more;
  if (first.size() > 5) {
    more = absl::StrCat(" and ", first.size() - 5, " more");
    first.resize(5);
  }
  return absl::StrCat(first.size() == 1 ? "job " : "jobs ", absl::StrJoin(first, ", "), more);
}

}  // namespace

void AddPending(PassState& pass, const PendingJob& job, PendingCode code, std::string message,
                std::optional<absl::Time> estimate) {
  pass.last_preempt_code.reset();
  Pending p;
  p.job_id = job.job_id;
  p.code = code;
  p.message = std::move(message);
  p.estimated_start = estimate;
  pass.out.pending.push_back(std::move(p));
  pass.pending_queue.push_back(&job.queue);
}

absl::string_view Needs(PassState& pass, const PendingJob& job, const Shape& shape) {
  if (!job.excluded_workers.empty()) {
    pass.scratch_needs = NeedsText(job);
    return pass.scratch_needs;
  }
  auto [it, inserted] = shape.needs.try_emplace(SizeKey(job));
  if (inserted) it->second = NeedsText(job);
  return it->second;
}

const std::string& Holders(PassState& pass, Shape& shape, int64_t self, bool self_holds) {
  if (self_holds) {
    pass.scratch_text = HoldersText(pass, shape, self);
    return pass.scratch_text;
  }
  if (shape.holders_version != pass.holds_version) {
    shape.holders_text = HoldersText(pass, shape, self);
    shape.holders_version = pass.holds_version;
  }
  return shape.holders_text;
}

std::string InvalidSizeText(const PendingJob& job) {
  return absl::StrCat("invalid request: nodes (", job.nodes, ") and gpus_per_node (",
                      job.gpus_per_node, ") must be at least 1");
}

std::string NoMatchText(PassState& pass, const PendingJob& job, const Shape& shape) {
  if (shape.largest_too_small > 0) {
    return absl::StrCat(Needs(pass, job, shape),
                        "; no schedulable worker matches (the largest GPUs otherwise matching "
                        "have ",
                        GiB(shape.largest_too_small), ")");
  }
  return absl::StrCat(Needs(pass, job, shape), "; no schedulable worker matches");
}

std::string LargerThanClusterText(PassState& pass, const PendingJob& job, const Shape& shape,
                                  int capacity) {
  return absl::StrCat(Needs(pass, job, shape), "; only ", capacity, " matching ",
                      capacity == 1 ? "worker has" : "workers have", " ", job.gpus_per_node,
                      " or more GPUs in total");
}

std::string QuotaText(const PendingJob& job, int64_t quota, int64_t used, int64_t want) {
  if (want > quota) {
    return absl::StrCat("needs ", want, " GPUs, more than queue '", job.queue,
                        "' may ever hold (quota ", quota, ")");
  }
  return absl::StrCat("queue '", job.queue, "' holds ", used, " of its ", quota,
                      " GPU quota; this job needs ", want, " more");
}

std::string WaitingForPreemptedText(PassState& pass, const PendingJob& job, const Shape& shape,
                                    int workers) {
  return absl::StrCat(Needs(pass, job, shape), "; waiting for preempted jobs to stop on ",
                      Plural(workers, "worker", "workers"));
}

std::string PreemptingText(PassState& pass, const PendingJob& job, const Shape& shape,
                           const std::vector<int64_t>& victim_ids) {
  return absl::StrCat(Needs(pass, job, shape), "; preempting lower-priority ",
                      victim_ids.size() == 1 ? "job " : "jobs ", absl::StrJoin(victim_ids, ", "));
}

std::string ReservedText(const PendingJob& job) {
  return absl::StrCat("; waiting since ", Rfc3339(job.queued_since), ", so ",
                      Plural(job.nodes, "worker is", "workers are"), " reserved for it");
}

std::string HeldText(PassState& pass, const PendingJob& job, Shape& shape,
                     const std::string& reserved) {
  return absl::StrCat(Needs(pass, job, shape), "; enough are free, but held for ",
                      Holders(pass, shape, job.job_id, !reserved.empty()), reserved);
}

std::string NoCapacityText(PassState& pass, const PendingJob& job, const Shape& shape,
                           PendingCode code, const std::string& reserved) {
  std::string message = absl::StrCat(Needs(pass, job, shape), "; ",
                                     CountFree(pass, job, shape, job.gpus_per_node), " match");
  if (code == PendingCode::kPreemptionCooldown) {
    absl::StrAppend(&message, "; lower-priority jobs could make room but were preempted ",
                    "less than ", absl::FormatDuration(pass.config.preemption_cooldown), " ago");
  }
  absl::StrAppend(&message, reserved);
  return message;
}

}  // namespace internal
}  // namespace llamafleet::sched
