// JobServiceImpl: construction and the unary reads (jobs, events, checkpoints, attempts,
// metrics, queues, the caller) and cancellation. Submission is in job_submit.cc, its checks
// against the storage and directory claims and ReleaseDir in job_claims.cc, the WatchJob
// and StreamJobLogs streams in job_streams.cc, usage in job_usage.cc.
#include "server/job_service.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "jobspec/jobspec.h"
#include "server/job_service_internal.h"
#include "storage/cluster_store.h"
#include "storage/metrics_store.h"
#include "storage/sample_store.h"
#include "storage/sqlite.h"

namespace llamafleet {
namespace {

using job_service_internal::AddMemoryEstimate;
using job_service_internal::AddStepTimeEstimate;
using job_service_internal::FinishNow;
using job_service_internal::kMaxEventLimit;

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
constexpr int kDefaultEventLimit = 1000;
constexpr size_t kMaxReasonLength = 1024;
constexpr char kPageTokenPrefix[] = "lf1:";

// Page tokens: "lf1:<id>" continues an id-ordered listing after that id (keyset, stable
// under inserts); "lf2:<order_by>:<offset>" continues any other order.
struct PageCursor {
  int64_t id = 0;
  int64_t offset = 0;
};

std::string EncodePageToken(const std::string& order_by, bool by_id, int64_t id, int64_t offset) {
  return absl::WebSafeBase64Escape(by_id ? absl::StrCat(kPageTokenPrefix, id)
                                         : absl::StrCat("lf2:", order_by, ":", offset));
}

absl::StatusOr<PageCursor> DecodePageToken(const std::string& token, const std::string& order_by,
                                           bool by_id) {
  PageCursor cursor;
  if (token.empty()) return cursor;
  const absl::Status bad = absl::InvalidArgumentError("page_token is not a token this server issued");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return bad;
  absl::string_view rest(raw);
  if (absl::ConsumePrefix(&rest, kPageTokenPrefix)) {
    if (!by_id) return absl::InvalidArgumentError("page_token was made for a different order_by");
    if (!absl::SimpleAtoi(rest, &cursor.id) || cursor.id <= 0) return bad;
    return cursor;
  }
  if (absl::ConsumePrefix(&rest, "lf2:")) {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) return bad;
    if (by_id || rest.substr(0, colon) != order_by) {
      return absl::InvalidArgumentError("page_token was made for a different order_by");
    }
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &cursor.offset) || cursor.offset < 0) return bad;
    return cursor;
  }
  return bad;
}

// JOB_VIEW_BASIC (job.proto): of the spec only what a list shows; no workers or key.
void ReduceToBasicView(v1::Job* job) {
  v1::JobSpec* spec = job->mutable_spec();
  v1::JobSpec basic;
  basic.set_name(std::move(*spec->mutable_name()));
  basic.set_queue(std::move(*spec->mutable_queue()));
  basic.set_priority(spec->priority());
  if (spec->has_resources()) basic.mutable_resources()->Swap(spec->mutable_resources());
  if (spec->has_sweep()) basic.mutable_sweep()->Swap(spec->mutable_sweep());  // which point, of what
  spec->Swap(&basic);
  job->clear_workers();
  job->clear_idempotency_key();
}

}  // namespace

JobServiceImpl::JobServiceImpl(JobStore* store, const Authenticator* auth)
    : store_(store),
      own_auth_(auth == nullptr ? std::make_unique<Authenticator>(store, /*enabled=*/false)
                                : nullptr),
      auth_(auth == nullptr ? own_auth_.get() : auth),
      submit_checks_(std::make_unique<SerialExecutor>("lf-submit")) {}

JobServiceImpl::~JobServiceImpl() = default;

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  if (!id.ok()) return FinishNow(context, id.status());
  absl::StatusOr<v1::Job> job = store_->GetJob(*id);
  if (!job.ok()) return FinishNow(context, job.status());
  *response = std::move(*job);
  if (!response->has_submitted_spec()) {
    // Stored before the submitted spec was kept: the effective spec, less the default
    // checkpoint dir, which is this job's own.
    v1::JobSpec* submitted = response->mutable_submitted_spec();
    *submitted = response->spec();
    if (policy_.has_value() &&
        DefaultCheckpointDirJob(policy_->path_roots, submitted->checkpoint().dir()) == *id) {
      submitted->mutable_checkpoint()->clear_dir();
    }
  }
  AddPendingInfo(response);
  AddMemoryEstimate(response);
  AddStepTimeEstimate(response, pricing_);
  if (absl::Status s = AddJobUsage({response}); !s.ok()) return FinishNow(context, s);
  return FinishNow(context, grpc::Status::OK);
}

void JobServiceImpl::AddPendingInfo(v1::Job* job) const {
  int64_t id;
  if (cluster_ == nullptr || job->state() != v1::QUEUED ||
      !absl::SimpleAtoi(job->id(), &id)) {
    return;
  }
  v1::PendingInfo info;
  if (cluster_->PendingInfoFor(id, &info)) *job->mutable_pending() = std::move(info);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  ListJobsQuery query;
  for (int s : request->states()) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return FinishNow(context, absl::InvalidArgumentError(
                                    absl::StrCat("states contains an unknown state (", s, ")")));
    }
    query.states.push_back(static_cast<v1::JobState>(s));
  }
  query.queue = request->queue();
  query.owner = request->owner();
  // A job has at most kMaxLabels labels: more selectors can match nothing, and each one
  // is a subquery of the listing's SQL.
  if (request->labels_size() > kMaxLabels) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "labels has ", request->labels_size(), " selectors; at most ",
                                  kMaxLabels, " (a job has at most ", kMaxLabels, " labels)")));
  }
  for (int i = 0; i < request->labels_size(); ++i) {
    const std::string& selector = request->labels(i);
    size_t eq = selector.find('=');
    if (eq == std::string::npos || eq == 0) {
      return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                    "labels[", i, "] must be key=value, got '", selector, "'")));
    }
    query.labels.emplace_back(selector.substr(0, eq), selector.substr(eq + 1));
  }
  if (request->page_size() < 0) {
    return FinishNow(context, absl::InvalidArgumentError("page_size must be >= 0"));
  }
  query.page_size = request->page_size() == 0 ? kDefaultPageSize
                                              : std::min(request->page_size(), kMaxPageSize);
  if (request->name_contains().size() > 128) {
    return FinishNow(context, absl::InvalidArgumentError("name_contains must be at most 128 characters"));
  }
  query.name_contains = request->name_contains();
  // order_by: [-]create_time (default -create_time), update_time, name, priority, state,
  // owner, queue.
  absl::string_view order = request->order_by();
  query.descending = absl::ConsumePrefix(&order, "-");
  if (order.empty() && request->order_by().empty()) query.descending = true;
  static const auto* kOrders = new std::set<std::string>{
      "create_time", "update_time", "name", "priority", "state", "owner", "queue"};
  if (!order.empty() && !kOrders->count(std::string(order))) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "order_by must be one of create_time, update_time, name, "
                                  "priority, state, owner, queue (optionally prefixed by '-'), got '",
                                  request->order_by(), "'")));
  }
  query.order_by = order == "create_time" ? "" : std::string(order);
  const bool by_id = query.order_by.empty();
  absl::StatusOr<PageCursor> cursor =
      DecodePageToken(request->page_token(), request->order_by(), by_id);
  if (!cursor.ok()) return FinishNow(context, cursor.status());
  query.before_id = cursor->id;
  query.offset = cursor->offset;
  if (!v1::JobView_IsValid(request->view())) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "view must be JOB_VIEW_BASIC or JOB_VIEW_FULL, got ", request->view())));
  }
  const bool full = request->view() == v1::JOB_VIEW_FULL;
  query.count_total = true;
  absl::StatusOr<ListJobsResult> result = store_->ListJobs(query);
  if (!result.ok()) return FinishNow(context, result.status());
  const int64_t returned = static_cast<int64_t>(result->jobs.size());
  for (v1::Job& job : result->jobs) {
    if (!full) ReduceToBasicView(&job);
    AddPendingInfo(&job);
    *response->add_jobs() = std::move(job);
  }
  // Both views: one indexed read for the whole page.
  const std::vector<v1::Job*> page(response->mutable_jobs()->pointer_begin(),
                                    response->mutable_jobs()->pointer_end());
  if (absl::Status s = AddJobUsage(page); !s.ok()) return FinishNow(context, s);
  if (result->more) {
    response->set_next_page_token(EncodePageToken(request->order_by(), by_id, result->next_before_id,
                                                  query.offset + returned));
  }
  response->set_total_size(result->total);
  return FinishNow(context, grpc::Status::OK);
}

absl::StatusOr<v1::Job> JobServiceImpl::JobToChange(const Principal& caller, int64_t id) const {
  absl::StatusOr<v1::Job> job = store_->GetJob(id);
  if (!job.ok()) {
    LF_RETURN_IF_ERROR(Authorize(caller, Operation::kRead));
    return job.status();
  }
  if (caller.role == v1::ADMIN) return job;
  LF_RETURN_IF_ERROR(Authorize(caller, Operation::kCancel, job->owner(), job->id()));
  return job;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const v1::CancelJobRequest* request,
                                                    v1::CancelJobResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Authenticate(*context);
  if (!caller.ok()) return FinishNow(context, caller.status());
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  if (!id.ok()) return FinishNow(context, id.status());
  if (request->reason().size() > kMaxReasonLength) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "reason must be at most ", kMaxReasonLength, " characters")));
  }
  if (caller->role != v1::ADMIN) {
    if (absl::StatusOr<v1::Job> job = JobToChange(*caller, *id); !job.ok()) return FinishNow(context, job.status());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  store_->CancelJob(*id, caller->user, request->reason(),
                    [reactor, response](absl::StatusOr<CancelJobResult> result) {
                      if (!result.ok()) {
                        reactor->Finish(ToGrpcStatus(result.status()));
                        return;
                      }
                      *response->mutable_job() = std::move(result->job);
                      response->set_message(std::move(result->message));
                      reactor->Finish(grpc::Status::OK);
                    });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* context,
                                                    const v1::DeleteJobRequest* request,
                                                    v1::DeleteJobResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Authenticate(*context);
  if (!caller.ok()) return FinishNow(context, caller.status());
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  if (!id.ok()) return FinishNow(context, id.status());
  if (!deleter_) return FinishNow(context, absl::UnimplementedError("this coordinator cannot delete jobs"));
  absl::StatusOr<v1::Job> job = JobToChange(*caller, *id);
  if (!job.ok()) return FinishNow(context, job.status());
  std::string export_dir = request->artifacts() ? job->spec().output().export_dir() : "";
  // What is kept, and why: a checkpoint.dir the job named is its owner's (only the default
  // one is llamafleet's to remove), and the export goes only with --artifacts.
  std::vector<std::string> kept;
  const std::string& named_checkpoint = job->spec().checkpoint().dir();
  const bool own_checkpoint_dir =
      !named_checkpoint.empty() &&
      (!policy_.has_value() ||
       DefaultCheckpointDirJob(policy_->path_roots, named_checkpoint) != *id);
  if (own_checkpoint_dir) {
    kept.push_back(absl::StrCat("checkpoint.dir ", named_checkpoint,
                                " kept: a directory the job named is its owner's to remove"));
  }
  if (!request->artifacts() && !job->spec().output().export_dir().empty()) {
    kept.push_back(absl::StrCat("export dir ", job->spec().output().export_dir(),
                                " kept: delete with --artifacts to remove it too"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  deleter_(*id, std::move(export_dir),
           [reactor, response, kept = std::move(kept),
            own_checkpoint_dir](absl::StatusOr<std::vector<std::string>> lines) {
             if (!lines.ok()) {
               reactor->Finish(ToGrpcStatus(lines.status()));
               return;
             }
             for (std::string& line : *lines) {
               // The default checkpoint directory of a job that named its own was never made.
               if (own_checkpoint_dir && absl::StartsWith(line, "checkpoint dir ") &&
                   absl::StrContains(line, "nothing to remove")) {
                 continue;
               }
               response->add_removed(std::move(line));
             }
             for (const std::string& line : kept) response->add_removed(line);
             reactor->Finish(grpc::Status::OK);
           });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobEvents(grpc::CallbackServerContext* context,
                                                       const v1::GetJobEventsRequest* request,
                                                       v1::GetJobEventsResponse* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  if (!id.ok()) return FinishNow(context, id.status());
  if (request->after_seq() < 0 || request->limit() < 0) {
    return FinishNow(context, absl::InvalidArgumentError("after_seq and limit must be >= 0"));
  }
  absl::StatusOr<v1::Job> job = store_->GetJob(*id);
  if (!job.ok()) return FinishNow(context, job.status());
  const int limit =
      request->limit() == 0 ? kDefaultEventLimit : std::min(request->limit(), kMaxEventLimit);
  absl::StatusOr<std::vector<v1::JobEvent>> events =
      store_->GetEvents(*id, request->after_seq(), limit);
  if (!events.ok()) return FinishNow(context, events.status());
  for (v1::JobEvent& e : *events) *response->add_events() = std::move(e);
  return FinishNow(context, grpc::Status::OK);
}

absl::StatusOr<int64_t> JobServiceImpl::ReadableJob(const grpc::CallbackServerContext& context,
                                                    const std::string& job_id) const {
  LF_RETURN_IF_ERROR(auth_->Check(context, Operation::kRead).status());
  LF_ASSIGN_OR_RETURN(int64_t id, ParseJobId(job_id, "job_id"));
  LF_RETURN_IF_ERROR(store_->GetJob(id).status());
  return id;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListCheckpoints(grpc::CallbackServerContext* context,
                                                          const v1::ListCheckpointsRequest* request,
                                                          v1::ListCheckpointsResponse* response) {
  absl::StatusOr<int64_t> id = ReadableJob(*context, request->job_id());
  if (!id.ok()) return FinishNow(context, id.status());
  absl::StatusOr<std::vector<v1::Checkpoint>> list = llamafleet::ListCheckpoints(*store_, *id);
  if (!list.ok()) return FinishNow(context, list.status());
  for (v1::Checkpoint& c : *list) *response->add_checkpoints() = std::move(c);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListAttempts(grpc::CallbackServerContext* context,
                                                       const v1::ListAttemptsRequest* request,
                                                       v1::ListAttemptsResponse* response) {
  absl::StatusOr<int64_t> id = ReadableJob(*context, request->job_id());
  if (!id.ok()) return FinishNow(context, id.status());
  absl::StatusOr<std::vector<v1::Attempt>> list = llamafleet::ListAttempts(*store_, *id);
  if (!list.ok()) return FinishNow(context, list.status());
  if (absl::Status s = AddActiveAttemptUsage(*store_, pricing_, store_->clock()->Now(), &*list); !s.ok()) {
    return FinishNow(context, s);
  }
  for (v1::Attempt& a : *list) *response->add_attempts() = std::move(a);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobMetrics(grpc::CallbackServerContext* context,
                                                        const v1::GetJobMetricsRequest* request,
                                                        v1::GetJobMetricsResponse* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  if (!id.ok()) return FinishNow(context, id.status());
  if (request->max_points() < 0 || request->max_points() > 5000) {
    return FinishNow(context, absl::InvalidArgumentError("max_points must be in [0, 5000]"));
  }
  if (absl::StatusOr<v1::Job> job = store_->GetJob(*id); !job.ok()) {
    return FinishNow(context, job.status());
  }
  absl::StatusOr<std::vector<v1::JobMetricsPoint>> points =
      MetricsHistory(*store_, *id, request->max_points() == 0 ? 500 : request->max_points());
  if (!points.ok()) return FinishNow(context, points.status());
  for (v1::JobMetricsPoint& p : *points) *response->add_points() = std::move(p);
  absl::StatusOr<std::vector<v1::EvalPoint>> evals =
      EvalHistory(*store_, *id, request->max_points() == 0 ? 500 : request->max_points());
  if (!evals.ok()) return FinishNow(context, evals.status());
  for (v1::EvalPoint& e : *evals) *response->add_evals() = std::move(e);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListSamples(grpc::CallbackServerContext* context,
                                                      const v1::ListSamplesRequest* request,
                                                      v1::ListSamplesResponse* response) {
  absl::StatusOr<int64_t> id = ReadableJob(*context, request->job_id());
  if (!id.ok()) return FinishNow(context, id.status());
  if (request->step() < 0) {
    return FinishNow(context,
                     absl::InvalidArgumentError("step must be 0 (every step) or a step number"));
  }
  absl::StatusOr<v1::ListSamplesResponse> list =
      llamafleet::ListSamples(*store_, *id, request->step(), request->latest());
  if (!list.ok()) return FinishNow(context, list.status());
  *response = std::move(*list);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::ListQueues(grpc::CallbackServerContext* context,
                                                     const v1::ListQueuesRequest* /*request*/,
                                                     v1::ListQueuesResponse* response) {
  if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  std::map<std::string, v1::Queue> queues;
  for (const auto& [name, quota] : queue_quotas_) {
    queues[name].set_name(name);
    queues[name].set_gpu_quota(quota);
  }
  // Depth and running jobs from the database (the same grouped count /metrics uses);
  // GPUs from what the scheduler actually allocated.
  absl::StatusOr<std::map<std::string, JobCounts>> counts = store_->CountJobsByQueue();
  if (!counts.ok()) return FinishNow(context, counts.status());
  for (const auto& [name, by_queue] : *counts) {
    int64_t queued = 0, running = 0;
    for (const auto& [state, n] : by_queue.by_state) {
      if (state == v1::QUEUED) queued += n;
      if (state == v1::SCHEDULED || state == v1::RUNNING || state == v1::RESTARTING ||
          state == v1::PREEMPTING) {
        running += n;
      }
    }
    if (queued == 0 && running == 0) continue;  // only finished jobs: not a live queue
    v1::Queue& queue = queues[name];
    queue.set_name(name);
    queue.set_queued(queued);
    queue.set_running(running);
  }
  if (cluster_ != nullptr) {
    for (const auto& [name, usage] : cluster_->Usage().queues) {
      queues[name].set_name(name);
      queues[name].set_gpus_allocated(usage.gpus_allocated);
    }
  }
  absl::Status read = store_->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare(absl::StrCat("SELECT queue, min(create_time_us) FROM jobs WHERE state = ",
                                  static_cast<int>(v1::QUEUED), " GROUP BY queue")));
    while (true) {
      LF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      *queues[q.ColumnText(0)].mutable_oldest_queued_time() =
          google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(q.ColumnInt(1));
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return FinishNow(context, read);
  if (absl::Status s = AddQueueUsage(&queues); !s.ok()) return FinishNow(context, s);
  for (auto& [name, queue] : queues) *response->add_queues() = std::move(queue);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::WhoAmI(grpc::CallbackServerContext* context,
                                                 const v1::WhoAmIRequest* /*request*/,
                                                 v1::WhoAmIResponse* response) {
  absl::StatusOr<Principal> caller = auth_->Authenticate(*context);
  if (!caller.ok()) return FinishNow(context, caller.status());
  response->set_user(caller->user);
  response->set_role(caller->role);
  response->set_auth_enabled(auth_->enabled());
  return FinishNow(context, grpc::Status::OK);
}

}  // namespace llamafleet
