#include "server/usage_metrics.h"

#include <vector>

#include "spdlog/spdlog.h"

namespace llamafleet {

void CollectUsage(JobStore& store, const PriceTable& pricing, metrics::Exposition* out) {
  using metrics::MetricType;
  absl::StatusOr<std::vector<v1::UsageRow>> rows = ReadUsageRows(store, "", pricing, store.clock()->Now());
  if (!rows.ok()) {
    spdlog::warn("metrics: cannot read GPU usage: {}", rows.status().ToString());
    return;
  }
  out->Declare("llamafleet_gpu_seconds_total",
               "GPU-seconds held by attempts (GPUs, or CPU ranks on CPU workers, x wall time from "
               "placement to the end; active attempts up to now), by queue and user, all time.",
               MetricType::kCounter);
  out->Declare("llamafleet_failed_gpu_seconds_total",
               "Of llamafleet_gpu_seconds_total, those of attempts that failed or were preempted.",
               MetricType::kCounter);
  out->Declare("llamafleet_cost_total",
               "Cost of the priced attempts' GPU time (the coordinator's pricing per instance-hour), "
               "by queue and user; no series where nothing was priced.",
               MetricType::kCounter);
  for (const v1::UsageRow& row : *rows) {
    const metrics::Labels labels = {{"queue", row.queue()}, {"user", row.user()}};
    out->Add("llamafleet_gpu_seconds_total", labels, row.usage().gpu_seconds());
    out->Add("llamafleet_failed_gpu_seconds_total", labels, row.usage().failed_gpu_seconds());
    if (row.usage().has_cost()) out->Add("llamafleet_cost_total", labels, row.usage().cost());
  }
}

}  // namespace llamafleet
