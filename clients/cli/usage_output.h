#ifndef LLAMAFLEET_CLIENTS_CLI_USAGE_OUTPUT_H_
#define LLAMAFLEET_CLIENTS_CLI_USAGE_OUTPUT_H_

// How the CLI shows GPU time and cost (llamafleet.v1.Usage): the `describe` line, the
// GPU-time cells of the jobs and attempts tables, and the `get usage` table. Pure
// functions, as output.h's. A cost is in the currency of the coordinator's pricing.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::cli {

// What a job's held time was on. Usage counts GPUs, or CPU ranks on a CPU worker, alike;
// the unit says which.
enum class Device { kGpu, kCpu };
// kCpu when every task of `attempts` (at least one) ran on a worker that `workers` lists
// with CPU ranks and no GPUs; kGpu otherwise (a worker no longer listed included).
Device AttemptsDevice(const std::vector<v1::Attempt>& attempts,
                      const std::vector<v1::WorkerInfo>& workers);
// kCpu when every worker of `workers` (at least one) has CPU ranks and no GPUs, kGpu
// otherwise: the unit of totals over many jobs (`get usage`), which name no workers.
Device ClusterDevice(const std::vector<v1::WorkerInfo>& workers);

// GPU time with its unit: seconds while small, "12 GPU-s" (under 360: a tenth of a
// GPU-hour; "2.5 GPU-s" under 10), then hours, "1.23 GPU-h"; "CPU-s", "CPU-h" for kCpu.
std::string FormatGpuTime(double gpu_seconds, Device device = Device::kGpu);
// A GPU-H table cell: hours with two decimals, "<0.01" for less than that but not none.
std::string FormatGpuHours(double gpu_seconds);
// A cost with two decimals ("12.34"), two significant digits under 0.01 ("0.0042");
// "-" when unset (not priced).
std::string FormatCost(std::optional<double> cost);

// describe's "GPU time:": "1.23 GPU-h (failed attempts 0.20 GPU-h), cost 12.34 (failed
// attempts 2.00)"; the failed parts only when there are any, the cost only when priced;
// "-" for a job that never held GPUs. The unit as FormatGpuTime's.
std::string UsageLine(const v1::Usage& usage, Device device = Device::kGpu);

// The `get usage` table: USER QUEUE JOBS GPU-H FAILED-GPU-H COST, in the order given;
// CPU-H and FAILED-CPU-H for kCpu.
std::string UsageTable(const std::vector<v1::UsageRow>& rows, Device device = Device::kGpu);
// "Prices per instance-hour: p5.48xlarge 98.32, ..." (instance types in name order); ""
// without prices.
std::string PricingLine(const std::map<std::string, double>& pricing);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_USAGE_OUTPUT_H_
