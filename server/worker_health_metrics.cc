#include "server/worker_health_metrics.h"

#include "google/protobuf/util/time_util.h"

namespace llamafleet {

void CollectWorkerHealth(const std::vector<v1::WorkerInfo>& workers, metrics::Exposition* out) {
  using metrics::MetricType;
  out->Declare("llamafleet_worker_drained",
               "Drained workers (no new placements): when each was drained, unix seconds, "
               "with why and by whom (operator or preflight).",
               MetricType::kGauge);
  out->Declare("llamafleet_worker_preflight_passed",
               "Whether the worker's last pre-flight passed (1) or failed (0).", MetricType::kGauge);
  out->Declare("llamafleet_worker_preflight_seconds", "How long the worker's last pre-flight took.",
               MetricType::kGauge);
  for (const v1::WorkerInfo& w : workers) {
    if (w.state() == v1::WORKER_LOST) continue;
    if (w.has_drain()) {
      out->Add("llamafleet_worker_drained",
               {{"worker", w.name()}, {"source", w.drain().source()}, {"reason", w.drain().reason().substr(0, 120)}},
               static_cast<double>(google::protobuf::util::TimeUtil::TimestampToSeconds(w.drain().since())));
    }
    if (w.has_preflight()) {
      out->Add("llamafleet_worker_preflight_passed", {{"worker", w.name()}}, w.preflight().passed() ? 1 : 0);
      out->Add("llamafleet_worker_preflight_seconds", {{"worker", w.name()}}, w.preflight().seconds());
    }
  }
}

}  // namespace llamafleet
