// JobServiceImpl's submissions: SubmitJob and SubmitJobs expand sweeps into their points
// and validate every spec (defaults, the schema, the idempotency key, the submit policy,
// then what the storage and the recorded claims say: job_claims.cc) before anything
// reaches the store, and answer from the store's commit callback, so a client hears
// "submitted" only once its jobs are durable. That work runs on the service's own thread (submit_checks_), never on the
// gRPC thread that took the call: those also read worker sessions' heartbeats.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "jobspec/dependencies.h"
#include "jobspec/jobspec.h"
#include "jobspec/sweep.h"
#include "server/job_service.h"
#include "server/job_service_internal.h"
#include "server/user_identities.h"
#include "storage/cluster_store.h"
#include "storage/job_reads.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

using job_service_internal::AddMemoryEstimate;
using job_service_internal::AddStepTimeEstimate;
using job_service_internal::FinishNow;
using SubmitResult = CoordinatorMetrics::SubmitResult;

// SubmitJobRequest.derived_from as a job id (0 for ""): INVALID_ARGUMENT naming the field
// when it is no id, NOT_FOUND when there is no such job.
absl::StatusOr<int64_t> DerivedFrom(JobStore& store, const std::string& text,
                                    const std::string& prefix) {
  if (text.empty()) return 0;
  LF_ASSIGN_OR_RETURN(int64_t id, ParseJobId(text, absl::StrCat(prefix, "derived_from")));
  if (absl::StatusOr<v1::Job> job = store.GetJob(id); !job.ok()) {
    return absl::IsNotFound(job.status())
               ? absl::NotFoundError(absl::StrCat(prefix, "derived_from: job ", id, " not found"))
               : job.status();
  }
  return id;
}

// What a job's spec as written is, before defaults: a sweep's point stands on its own,
// with its values set and nothing of the sweep (a client may not set sweep.point).
v1::JobSpec SubmittedSpecOf(const v1::JobSpec& spec) {
  v1::JobSpec submitted = spec;
  if (submitted.sweep().has_point()) submitted.clear_sweep();
  return submitted;
}

// The requests as the jobs they make: sweeps expanded into their points (bounded by the
// batch's budget), defaults applied, each named by its field prefix. INVALID_ARGUMENT (or
// NOT_FOUND for derived_from) otherwise; `*invalid` is set to the jobs a failed sweep
// expansion counts as invalid submissions.
absl::StatusOr<std::vector<SubmitJobInput>> ExpandRequests(
    JobStore& store, const Principal& caller,
    const std::vector<const v1::SubmitJobRequest*>& requests, bool batch, int64_t* invalid) {
  std::vector<SubmitJobInput> inputs;
  inputs.reserve(requests.size());
  // The batch's bounds, shared by its sweeps and checked before each is expanded.
  SweepBudget budget;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string prefix = batch ? absl::StrCat("jobs[", i, "].") : "";
    const bool sweep = requests[i]->spec().sweep().parameters_size() > 0;
    if (sweep && !batch) {
      return absl::InvalidArgumentError(
          "spec.sweep: a sweep creates one job per point; submit it with SubmitJobs "
          "(POST /api/v1/jobs:batch; llamafleet submit and the Python "
          "client's submit_many do)");
    }
    // A sweep stands for one job per point, each validated on its own later.
    budget.max_points = kMaxBatchSize - static_cast<int64_t>(inputs.size());
    absl::StatusOr<std::vector<v1::JobSpec>> specs =
        ExpandSweep(requests[i]->spec(), absl::StrCat(prefix, "spec."), budget);
    if (!specs.ok()) {
      *invalid = static_cast<int64_t>(requests.size());
      return specs.status();
    }
    if (inputs.size() + specs->size() > static_cast<size_t>(kMaxBatchSize)) {
      return absl::InvalidArgumentError(
          absl::StrCat("jobs: the batch makes more than ", kMaxBatchSize,
                       " jobs (sweeps count one per point); at most ", kMaxBatchSize, " per call"));
    }
    if (sweep) {
      for (const v1::JobSpec& point : *specs) {
        budget.max_bytes -= static_cast<int64_t>(point.ByteSizeLong());
      }
    }
    LF_ASSIGN_OR_RETURN(const int64_t derived_from,
                        DerivedFrom(store, requests[i]->derived_from(), prefix));
    for (size_t k = 0; k < specs->size(); ++k) {
      SubmitJobInput in;
      in.spec = std::move((*specs)[k]);
      in.submitted_spec = SubmittedSpecOf(in.spec);
      in.derived_from = derived_from;
      in.owner = caller.user;
      in.idempotency_key = requests[i]->idempotency_key();
      in.field_prefix = absl::StrCat(prefix, "spec.");
      if (sweep) {
        // The same file resubmitted maps each point to the same key.
        if (!in.idempotency_key.empty()) absl::StrAppend(&in.idempotency_key, "/", k);
        absl::StrAppend(&in.field_prefix, SweepPointPrefix(static_cast<int>(k)));
      }
      ApplyDefaults(&in.spec);
      inputs.push_back(std::move(in));
    }
  }
  return inputs;
}

// Every input's spec, idempotency key and submit policy (which may fill in the spec):
// INVALID_ARGUMENT with every violation of the batch, each with its field path.
absl::Status ValidateInputs(const std::optional<SubmitPolicy>& policy, const Principal& caller,
                            std::vector<SubmitJobInput>* inputs) {
  std::vector<std::string> errors;
  std::vector<v1::FieldViolation> violations;
  for (SubmitJobInput& in : *inputs) {
    KeepResolvedReferences(in.spec, &*in.submitted_spec);
    absl::Status valid = ValidateJobSpec(in.spec, in.field_prefix);
    // "jobs[3].spec.sweep.points[1]." → "jobs[3].idempotency_key"
    const std::string request_prefix = in.field_prefix.substr(0, in.field_prefix.find("spec."));
    absl::Status key = ValidateIdempotencyKey(in.idempotency_key,
                                              absl::StrCat(request_prefix, "idempotency_key"));
    absl::Status applied;
    if (policy.has_value()) {
      in.max_active_jobs = policy->max_active_jobs_per_user;
      if (valid.ok()) applied = ApplySubmitPolicy(*policy, caller.role, in.field_prefix, &in.spec);
    }
    for (const absl::Status* st : {&valid, &key, &applied}) {
      if (st->ok()) continue;
      errors.emplace_back(st->message());
      for (v1::FieldViolation& v : FieldViolationsOf(*st)) violations.push_back(std::move(v));
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(errors, "; ")), violations);
}

// A dry run's answer: each job as it would be stored, with the storage checks' notes and
// the estimates (`verdicts`: CheckStorage's, one per input, or none).
std::vector<v1::SubmitJobResponse> DryRunResponses(std::vector<SubmitJobInput> inputs,
                                                   const std::vector<JobPathsVerdict>& verdicts,
                                                   const std::string& owner,
                                                   const PriceTable& pricing) {
  std::vector<v1::SubmitJobResponse> responses(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    v1::Job* job = responses[i].mutable_job();
    *job->mutable_spec() = std::move(inputs[i].spec);
    job->set_owner(owner);
    job->set_idempotency_key(inputs[i].idempotency_key);
    const JobPathsVerdict none;
    const JobPathsVerdict& verdict = i < verdicts.size() ? verdicts[i] : none;
    job->set_status_reason(absl::StrCat(
        "dry run: valid, not stored",
        verdict.notes.empty() ? "" : absl::StrCat("; ", absl::StrJoin(verdict.notes, "; "))));
    AddMemoryEstimate(job, verdict.tokenizer_vocab);
    AddStepTimeEstimate(job, pricing, verdict.tokenizer_vocab);
  }
  return responses;
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::Submit(
    grpc::CallbackServerContext* context, const Principal& caller,
    std::vector<const v1::SubmitJobRequest*> requests, bool dry_run, bool batch,
    std::function<void(std::vector<v1::SubmitJobResponse>)> respond) {
  if (requests.empty()) {
    return FinishNow(context, absl::InvalidArgumentError("jobs must contain at least one job"));
  }
  if (requests.size() > static_cast<size_t>(kMaxBatchSize)) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat("jobs has ", requests.size(),
                                                                      " entries; at most ",
                                                                      kMaxBatchSize, " per call")));
  }
  const auto received = std::chrono::steady_clock::now();  // for the submit latency
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  submit_checks_->Post([this, context, reactor, caller, requests = std::move(requests), dry_run,
                        batch, respond = std::move(respond), received]() mutable {
    CheckAndStore(context, reactor, caller, requests, dry_run, batch, std::move(respond), received);
  });
  return reactor;
}

void JobServiceImpl::CheckAndStore(grpc::CallbackServerContext* context,
                                   grpc::ServerUnaryReactor* reactor, const Principal& caller,
                                   const std::vector<const v1::SubmitJobRequest*>& requests,
                                   bool dry_run, bool batch,
                                   std::function<void(std::vector<v1::SubmitJobResponse>)> respond,
                                   std::chrono::steady_clock::time_point received) {
  // Refuses the call; `invalid` jobs are counted as invalid submissions.
  const auto refuse = [this, reactor](const absl::Status& status, int64_t invalid) {
    if (metrics_ != nullptr && invalid > 0)
      metrics_->RecordSubmissions(SubmitResult::kInvalid, invalid);
    reactor->Finish(ToGrpcStatus(status));
  };
  if (context->IsCancelled()) {
    return refuse(absl::CancelledError("the call ended before its submission was checked"), 0);
  }
  // Validate everything first: a batch is stored whole or not at all.
  int64_t invalid = 0;
  absl::StatusOr<std::vector<SubmitJobInput>> inputs =
      ExpandRequests(*store_, caller, requests, batch, &invalid);
  if (!inputs.ok()) return refuse(inputs.status(), invalid);
  const int64_t jobs = static_cast<int64_t>(inputs->size());
  // Dependencies first: their templates fill in paths the rules check.
  if (absl::Status s = ResolveDependencies(caller, &*inputs); !s.ok()) return refuse(s, jobs);
  if (absl::Status s = ValidateInputs(policy_, caller, &*inputs); !s.ok()) return refuse(s, jobs);
  // What the storage and the recorded claims say (job_claims.cc).
  std::vector<JobPathsVerdict> verdicts;
  absl::Status checked = CheckStorage(caller, &*inputs, dry_run ? &verdicts : nullptr);
  if (checked.ok() && dry_run && identities_ != nullptr) checked = identities_->Check(caller.user);
  if (!checked.ok()) return refuse(checked, jobs);
  if (dry_run) {
    if (metrics_ != nullptr) metrics_->RecordSubmissions(SubmitResult::kDryRun, jobs);
    respond(DryRunResponses(*std::move(inputs), verdicts, caller.user, pricing_));
    return reactor->Finish(grpc::Status::OK);
  }
  auto submit = [this, reactor, inputs = *std::move(inputs), respond = std::move(respond), received,
                 jobs]() mutable {
    store_->SubmitJobs(
        std::move(inputs), [reactor, respond = std::move(respond), metrics = metrics_, received, jobs,
                            pricing = pricing_](absl::StatusOr<std::vector<SubmitJobResult>> result) {
          if (!result.ok()) {
            if (metrics != nullptr) metrics->RecordSubmissions(SubmitResult::kError, jobs);
            reactor->Finish(ToGrpcStatus(result.status()));
            return;
          }
          if (metrics != nullptr) {
            metrics->RecordSubmitted(*result,
                                     absl::FromChrono(std::chrono::steady_clock::now() - received));
          }
          std::vector<v1::SubmitJobResponse> responses(result->size());
          for (size_t i = 0; i < result->size(); ++i) {
            *responses[i].mutable_job() = std::move((*result)[i].job);
            AddMemoryEstimate(responses[i].mutable_job());
            AddStepTimeEstimate(responses[i].mutable_job(), pricing);
            responses[i].set_created((*result)[i].created);
          }
          respond(std::move(responses));
          reactor->Finish(grpc::Status::OK);
        });
  };
  if (identities_ == nullptr) return submit();
  // The owner's Unix identity exists before any of their jobs does (user_identities.h):
  // a first submission records their dynamic uid, and is refused when none is left.
  identities_->EnsureAsync(caller.user, [submit = std::move(submit), refuse,
                                         jobs](absl::StatusOr<v1::RunIdentity> id) mutable {
    if (!id.ok()) return refuse(id.status(), jobs);
    submit();
  });
}

absl::Status JobServiceImpl::ResolveDependencies(const Principal& caller,
                                                 std::vector<SubmitJobInput>* inputs) const {
  std::vector<BatchEntry> batch;
  for (SubmitJobInput& in : *inputs) batch.push_back(BatchEntry{&in.spec, in.field_prefix, {}});
  const ParentLookup lookup = [this](int64_t id) -> absl::StatusOr<ParentJob> {
    LF_ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(id));
    return ParentJob{job.owner(), job.spec().name(), job.spec().output().export_dir()};
  };
  LF_RETURN_IF_ERROR(
      ResolveBatchDependencies(batch, caller.user, caller.role == v1::ADMIN, lookup));
  for (size_t i = 0; i < inputs->size(); ++i) (*inputs)[i].batch_parents = std::move(batch[i].batch_parents);
  return absl::OkStatus();
}

namespace {

// How SubmitJobs answers: the results in request order.
std::function<void(std::vector<v1::SubmitJobResponse>)> AppendJobsTo(v1::SubmitJobsResponse* response) {
  return [response](std::vector<v1::SubmitJobResponse> r) {
    for (auto& item : r) *response->add_jobs() = std::move(item);
  };
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                    const v1::SubmitJobRequest* request,
                                                    v1::SubmitJobResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kSubmit);
  if (!caller.ok()) return FinishNow(context, caller.status());
  return Submit(context, *caller, {request}, request->dry_run(), /*batch=*/false,
                [response](std::vector<v1::SubmitJobResponse> r) { *response = std::move(r[0]); });
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJobs(grpc::CallbackServerContext* context,
                                                     const v1::SubmitJobsRequest* request,
                                                     v1::SubmitJobsResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kSubmit);
  if (!caller.ok()) return FinishNow(context, caller.status());
  std::vector<const v1::SubmitJobRequest*> requests;
  bool dry_run = request->dry_run();
  for (const v1::SubmitJobRequest& r : request->jobs()) {
    requests.push_back(&r);
    dry_run = dry_run || r.dry_run();
  }
  return Submit(context, *caller, std::move(requests), dry_run, /*batch=*/true,
                AppendJobsTo(response));
}

}  // namespace llamafleet
