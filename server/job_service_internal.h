#ifndef LLAMAFLEET_SERVER_JOB_SERVICE_INTERNAL_H_
#define LLAMAFLEET_SERVER_JOB_SERVICE_INTERNAL_H_

// What the files that implement JobServiceImpl (job_service.cc, job_submit.cc,
// job_claims.cc, job_streams.cc, job_usage.cc) share. Not for use outside them.

#include <optional>

#include "jobspec/estimates.h"
#include "jobspec/jobspec.h"
#include "server/job_service.h"

namespace llamafleet::job_service_internal {

// GetJobEvents answers at most this many events per call.
constexpr int kMaxEventLimit = 10000;

// Finishes a unary call before it starts any work.
inline grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                           grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

inline grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                           const absl::Status& status) {
  return FinishNow(context, ToGrpcStatus(status));
}

// The spec's memory-fit estimate (derived, never stored: the formula may improve);
// `tokenizer_vocab`: the job's tokenizer's vocabulary when read (jobspec/estimates.h).
inline void AddMemoryEstimate(v1::Job* job, int64_t tokenizer_vocab = 0) {
  if (std::optional<v1::MemoryEstimate> e =
          EstimateJobMemoryWithVocab(job->spec(), tokenizer_vocab)) {
    *job->mutable_memory_estimate() = std::move(*e);
  }
}

// The spec's step-time estimate on its instance type, priced by `pricing` (derived, never
// stored, like the memory estimate).
inline void AddStepTimeEstimate(v1::Job* job, const PriceTable& pricing,
                                int64_t tokenizer_vocab = 0) {
  const auto price = pricing.find(job->spec().resources().instance_type());
  std::optional<double> per_hour;
  if (price != pricing.end()) per_hour = price->second;
  if (std::optional<v1::StepTimeEstimate> e =
          EstimateJobStepTimeWithVocab(job->spec(), per_hour, tokenizer_vocab)) {
    *job->mutable_step_time_estimate() = std::move(*e);
  }
}

}  // namespace llamafleet::job_service_internal

#endif  // LLAMAFLEET_SERVER_JOB_SERVICE_INTERNAL_H_
