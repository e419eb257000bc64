// The step-time estimate of a spec (jobspec/step_time_estimate.h) on the instance type it
// names, with the whole job's GPU-hours and cost.

#include <algorithm>
#include <optional>
#include <string>

#include "jobspec/estimates.h"
#include "jobspec/jobspec.h"
#include "jobspec/memory_fit.h"
#include "jobspec/step_time_estimate.h"

namespace llamafleet {

std::optional<v1::StepTimeEstimate> EstimateJobStepTime(
    const v1::JobSpec& spec, std::optional<double> price_per_instance_hour) {
  return EstimateJobStepTimeWithVocab(spec, price_per_instance_hour, 0);
}

std::optional<v1::StepTimeEstimate> EstimateJobStepTimeWithVocab(
    const v1::JobSpec& spec, std::optional<double> price_per_instance_hour,
    int64_t tokenizer_vocab) {
  std::optional<sched::MemoryInputs> in =
      jobspec_internal::MemoryInputsOf(spec, 0, tokenizer_vocab);
  if (!in) return std::nullopt;
  absl::StatusOr<sched::Hardware> hw = sched::HardwareOf(spec.resources().instance_type());
  if (!hw.ok()) return std::nullopt;  // a site-specific type, as CheckInstanceFit leaves it
  const sched::StepTimeEstimate e = sched::EstimateStepTime(sched::StepTimeInputsOf(*in), *hw);
  v1::StepTimeEstimate out;
  out.set_instance_type(spec.resources().instance_type());
  out.set_gpu(hw->gpu);
  out.set_step_seconds(e.step_s);
  out.set_tokens_per_second(e.tokens_per_s);
  out.set_mfu(e.mfu);
  out.set_compute_seconds(e.compute_s);
  out.set_exposed_communication_seconds(e.exposed_communication_s);
  const double ranks = in->world_size;
  const double per_1000 = 1000 * e.step_s * ranks / 3600;
  out.set_gpu_hours_per_1000_steps(per_1000);
  const int64_t steps = std::max<int64_t>(0, spec.training().max_steps());
  out.set_total_steps(steps);
  out.set_gpu_hours(static_cast<double>(steps) * per_1000 / 1000);
  if (price_per_instance_hour.has_value() && hw->devices_per_node > 0) {
    const double gpu_hour = *price_per_instance_hour / hw->devices_per_node;
    out.set_cost_per_1000_steps(per_1000 * gpu_hour);
    if (steps > 0) out.set_cost(out.gpu_hours() * gpu_hour);
  }
  return out;
}

}  // namespace llamafleet
