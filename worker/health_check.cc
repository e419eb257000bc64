#include "worker/health_check.h"

#include <iostream>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "worker/gpu_health.h"
#include "worker/inventory.h"
#include "worker/preflight.h"

namespace llamafleet::worker {

int CheckHealthOnce(const AgentOptions& options) {
  std::vector<int> gpus;
  if (options.cpu_ranks == 0) {
    for (const v1::Gpu& gpu : DetectGpus()) gpus.push_back(gpu.index());
  }
  v1::Heartbeat report;
  *report.mutable_time() = google::protobuf::util::TimeUtil::GetCurrentTime();
  *report.mutable_preflight() = RunPreflight(
      {.expected_gpus = static_cast<int>(gpus.size()), .fail_while_exists = options.preflight_fail_for_test}, 1);
  GpuHealthMonitor health({.gpus = gpus,
                           .fake_for_test = options.gpu_health_fake_for_test,
                           .kmsg_from_start = true,
                           .background = false});
  for (v1::GpuSample& s : health.SampleNow()) *report.add_gpus() = std::move(s);
  std::cout << "gpu health: " << health.Sources() << "\n";
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = false;
  (void)google::protobuf::util::MessageToJsonString(report, &json, print);
  std::cout << json << std::endl;
  return report.preflight().passed() ? 0 : 1;
}

}  // namespace llamafleet::worker
