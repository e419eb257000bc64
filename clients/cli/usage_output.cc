#include "clients/cli/usage_output.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/cli/output.h"

namespace llamafleet::cli {
namespace {

std::optional<double> CostOf(const v1::Usage& u) { return u.has_cost() ? std::optional<double>(u.cost()) : std::nullopt; }

bool IsCpuWorker(const v1::WorkerInfo& w) {
  return w.inventory().gpus().empty() && w.inventory().cpu_ranks() > 0;
}

}  // namespace

Device ClusterDevice(const std::vector<v1::WorkerInfo>& workers) {
  if (workers.empty()) return Device::kGpu;
  for (const v1::WorkerInfo& w : workers) {
    if (!IsCpuWorker(w)) return Device::kGpu;
  }
  return Device::kCpu;
}

Device AttemptsDevice(const std::vector<v1::Attempt>& attempts,
                      const std::vector<v1::WorkerInfo>& workers) {
  std::set<std::string> cpu_workers;
  for (const v1::WorkerInfo& w : workers) {
    if (IsCpuWorker(w)) cpu_workers.insert(w.name());
  }
  bool any = false;
  for (const v1::Attempt& a : attempts) {
    for (const v1::AttemptTask& t : a.tasks()) {
      if (!cpu_workers.count(t.worker())) return Device::kGpu;
      any = true;
    }
  }
  return any ? Device::kCpu : Device::kGpu;
}

std::string FormatGpuTime(double gpu_seconds, Device device) {
  const char* kind = device == Device::kCpu ? "CPU" : "GPU";
  if (gpu_seconds < 10) return absl::StrFormat("%.1f %s-s", gpu_seconds, kind);
  if (gpu_seconds < 360) return absl::StrFormat("%.0f %s-s", gpu_seconds, kind);
  return absl::StrFormat("%.2f %s-h", gpu_seconds / 3600, kind);
}

std::string FormatGpuHours(double gpu_seconds) {
  const double hours = gpu_seconds / 3600;
  if (hours > 0 && hours < 0.005) return "<0.01";
  return absl::StrFormat("%.2f", hours);
}

std::string FormatCost(std::optional<double> cost) {
  if (!cost.has_value()) return "-";
  if (*cost > 0 && *cost < 0.005) return absl::StrFormat("%.2g", *cost);
  return absl::StrFormat("%.2f", *cost);
}

std::string UsageLine(const v1::Usage& usage, Device device) {
  if (usage.gpu_seconds() <= 0 && !usage.has_cost()) return "-";
  std::string line = FormatGpuTime(usage.gpu_seconds(), device);
  if (usage.failed_gpu_seconds() > 0) {
    absl::StrAppend(&line, " (failed attempts ", FormatGpuTime(usage.failed_gpu_seconds(), device), ")");
  }
  if (usage.has_cost()) {
    absl::StrAppend(&line, ", cost ", FormatCost(usage.cost()));
    if (usage.failed_cost() > 0) absl::StrAppend(&line, " (failed attempts ", FormatCost(usage.failed_cost()), ")");
  }
  return line;
}

std::string UsageTable(const std::vector<v1::UsageRow>& rows, Device device) {
  const bool cpu = device == Device::kCpu;
  std::vector<std::vector<std::string>> table = {{"USER", "QUEUE", "JOBS", cpu ? "CPU-H" : "GPU-H",
                                                  cpu ? "FAILED-CPU-H" : "FAILED-GPU-H", "COST"}};
  for (const v1::UsageRow& r : rows) {
    table.push_back({r.user(), r.queue(), absl::StrCat(r.jobs()), FormatGpuHours(r.usage().gpu_seconds()),
                     FormatGpuHours(r.usage().failed_gpu_seconds()), FormatCost(CostOf(r.usage()))});
  }
  return FormatTable(table);
}

std::string PricingLine(const std::map<std::string, double>& pricing) {
  if (pricing.empty()) return "";
  std::vector<std::string> prices;
  for (const auto& [type, price] : pricing) prices.push_back(absl::StrCat(type, " ", FormatCost(price)));
  return absl::StrCat("Prices per instance-hour: ", absl::StrJoin(prices, ", "));
}

}  // namespace llamafleet::cli
