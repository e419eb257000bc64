#include "server/job_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "clients/jobspec/jobspec.h"
#include "google/protobuf/util/time_util.h"
#include "storage/cluster_store.h"
#include "storage/sqlite.h"
#include <grpcpp/alarm.h>
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
constexpr int kDefaultEventLimit = 1000;
constexpr int kMaxEventLimit = 10000;
constexpr size_t kMaxReasonLength = 1024;
constexpr char kPageTokenPrefix[] = "lf1:";
using SubmitResult = CoordinatorMetrics::SubmitResult;

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

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  return FinishNow(context, ToGrpcStatus(status));
}

// The spec's memory-fit estimate (derived, never stored: the formula may improve).
void AddMemoryEstimate(v1::Job* job) {
  if (std::optional<v1::MemoryEstimate> e = EstimateJobMemory(job->spec())) {
    *job->mutable_memory_estimate() = std::move(*e);
  }
}

// JOB_VIEW_BASIC (job.proto): of the spec only what a list shows; no workers or key.
void ReduceToBasicView(v1::Job* job) {
  v1::JobSpec* spec = job->mutable_spec();
  v1::JobSpec basic;
  basic.set_name(std::move(*spec->mutable_name()));
  basic.set_queue(std::move(*spec->mutable_queue()));
  basic.set_priority(spec->priority());
  if (spec->has_resources()) basic.mutable_resources()->Swap(spec->mutable_resources());
  spec->Swap(&basic);
  job->clear_workers();
  job->clear_idempotency_key();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const std::vector<v1::FieldViolation> violations = FieldViolationsOf(status);
  if (!violations.empty()) {
    v1::ErrorDetails details;
    for (const v1::FieldViolation& v : violations) *details.add_field_violations() = v;
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                        details.SerializeAsString());
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

JobServiceImpl::JobServiceImpl(JobStore* store, const Authenticator* auth)
    : store_(store),
      own_auth_(auth == nullptr ? std::make_unique<Authenticator>(store, /*enabled=*/false) : nullptr),
      auth_(auth == nullptr ? own_auth_.get() : auth) {}

JobServiceImpl::~JobServiceImpl() = default;

grpc::ServerUnaryReactor* JobServiceImpl::Submit(
    grpc::CallbackServerContext* context, const Principal& caller,
    std::vector<const v1::SubmitJobRequest*> requests, bool dry_run, bool batch,
    std::function<void(std::vector<v1::SubmitJobResponse>)> respond) {
  if (requests.empty()) {
    return FinishNow(context, absl::InvalidArgumentError("jobs must contain at least one job"));
  }
  if (requests.size() > static_cast<size_t>(kMaxBatchSize)) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "jobs has ", requests.size(), " entries; at most ",
                                  kMaxBatchSize, " per call")));
  }
  const auto received = std::chrono::steady_clock::now();  // for the submit latency
  // Validate everything first: a batch is stored whole or not at all.
  std::vector<SubmitJobInput> inputs;
  inputs.reserve(requests.size());
  std::vector<std::string> errors;
  std::vector<v1::FieldViolation> violations;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string prefix = batch ? absl::StrCat("jobs[", i, "].") : "";
    SubmitJobInput in;
    in.spec = requests[i]->spec();
    in.owner = caller.user;
    in.idempotency_key = requests[i]->idempotency_key();
    in.field_prefix = absl::StrCat(prefix, "spec.");
    ApplyDefaults(&in.spec);
    absl::Status valid = ValidateJobSpec(in.spec, in.field_prefix);
    absl::Status key = ValidateIdempotencyKey(in.idempotency_key,
                                              absl::StrCat(prefix, "idempotency_key"));
    absl::Status policy;
    if (policy_.has_value()) {
      in.max_active_jobs = policy_->max_active_jobs_per_user;
      if (valid.ok()) policy = ApplySubmitPolicy(*policy_, caller.role, in.field_prefix, &in.spec);
    }
    for (const absl::Status* st : {&valid, &key, &policy}) {
      if (st->ok()) continue;
      errors.emplace_back(st->message());
      for (v1::FieldViolation& v : FieldViolationsOf(*st)) violations.push_back(std::move(v));
    }
    inputs.push_back(std::move(in));
  }
  if (!errors.empty()) {
    if (metrics_ != nullptr) metrics_->RecordSubmissions(SubmitResult::kInvalid, inputs.size());
    return FinishNow(context, WithFieldViolations(
                                  absl::InvalidArgumentError(absl::StrJoin(errors, "; ")), violations));
  }
  if (policy_.has_value()) {
    for (const SubmitJobInput& in : inputs) {
      if (absl::Status s = CheckCheckpointReads(caller, in.spec, in.field_prefix); !s.ok()) {
        if (metrics_ != nullptr) metrics_->RecordSubmissions(SubmitResult::kInvalid, inputs.size());
        return FinishNow(context, s);
      }
    }
  }
  if (dry_run) {
    if (metrics_ != nullptr) metrics_->RecordSubmissions(SubmitResult::kDryRun, inputs.size());
    std::vector<v1::SubmitJobResponse> responses(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      v1::Job* job = responses[i].mutable_job();
      *job->mutable_spec() = std::move(inputs[i].spec);
      job->set_owner(caller.user);
      job->set_idempotency_key(inputs[i].idempotency_key);
      job->set_status_reason("dry run: valid, not stored");
      AddMemoryEstimate(job);
    }
    respond(std::move(responses));
    return FinishNow(context, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const int64_t jobs = static_cast<int64_t>(inputs.size());
  store_->SubmitJobs(std::move(inputs), [reactor, respond = std::move(respond), metrics = metrics_,
                                         received, jobs](
                                            absl::StatusOr<std::vector<SubmitJobResult>> result) {
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
      responses[i].set_created((*result)[i].created);
    }
    respond(std::move(responses));
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

absl::Status JobServiceImpl::CheckCheckpointReads(const Principal& caller, const v1::JobSpec& spec,
                                                  const std::string& prefix) const {
  if (caller.role == v1::ADMIN) return absl::OkStatus();
  const std::vector<std::string>& roots = policy_->path_roots;
  for (const auto& [field, path] :
       {std::pair<absl::string_view, const std::string*>{"checkpoint.resume", &spec.checkpoint().resume()},
        {"model.path", &spec.model().path()}}) {
    if (path->empty() || *path == "latest") continue;
    auto denied = [&, field = field, path = path](const std::string& why) {
      v1::FieldViolation v;
      v.set_field(absl::StrCat(prefix, field));
      v.set_description(why);
      return WithFieldViolations(
          absl::PermissionDeniedError(absl::StrCat(
              prefix, field, " ", *path, " ", why,
              "; only that job's owner or an admin may read it (user ", caller.user, ")")),
          {v});
    };
    if (std::optional<int64_t> id = DefaultCheckpointDirJob(roots, *path)) {
      absl::StatusOr<v1::Job> job = store_->GetJob(*id);
      if (!job.ok() && job.status().code() != absl::StatusCode::kNotFound) return job.status();
      if (!job.ok()) return denied(absl::StrCat("is a checkpoint of job ", *id, ", which no longer exists"));
      if (job->owner() != caller.user) {
        return denied(absl::StrCat("is a checkpoint of job ", *id, ", owned by ", job->owner()));
      }
      continue;
    }
    if (std::optional<std::string> reserved = InsideReservedDir(roots, *path)) {
      return denied(absl::StrCat("is inside ", *reserved, ", which holds jobs' checkpoints"));
    }
    absl::StatusOr<std::vector<CheckpointDirOwner>> owners = CheckpointDirOwners(*store_, *path);
    if (!owners.ok()) return owners.status();
    for (const CheckpointDirOwner& o : *owners) {
      if (o.owner != caller.user) {
        return denied(absl::StrCat("is inside ", o.dir, ", the checkpoint directory of job ",
                                   o.job_id, ", owned by ", o.owner));
      }
    }
  }
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
  AddPendingInfo(response);
  AddMemoryEstimate(response);
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
  if (result->more) {
    response->set_next_page_token(EncodePageToken(request->order_by(), by_id, result->next_before_id,
                                                  query.offset + returned));
  }
  response->set_total_size(result->total);
  return FinishNow(context, grpc::Status::OK);
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
  // Who may cancel depends on the owner, which never changes once a job exists. A caller
  // who may not cancel learns nothing more than a reader would.
  if (caller->role != v1::ADMIN) {
    absl::StatusOr<v1::Job> job = store_->GetJob(*id);
    if (!job.ok()) {
      if (absl::Status read = Authorize(*caller, Operation::kRead); !read.ok()) {
        return FinishNow(context, read);
      }
      return FinishNow(context, job.status());
    }
    if (absl::Status allowed = Authorize(*caller, Operation::kCancel, job->owner(), job->id());
        !allowed.ok()) {
      return FinishNow(context, allowed);
    }
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
  if (absl::StatusOr<Principal> caller = auth_->Check(context, Operation::kRead); !caller.ok()) {
    return caller.status();
  }
  absl::StatusOr<int64_t> id = ParseJobId(job_id, "job_id");
  if (!id.ok()) return id.status();
  if (absl::StatusOr<v1::Job> job = store_->GetJob(*id); !job.ok()) return job.status();
  return *id;
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
  return FinishNow(context, grpc::Status::OK);
}

// ---------------------------------------------------------------------------
// StreamJobLogs: reads the rank files from where it left off, on a timer when following,
// until the job is terminal and every file is read to its end. Reads (the job's state and
// the files) run on the log store's reader thread, never on a gRPC callback thread; each
// chunk is at most LogStore::kMaxChunkBytes of lines.
// ---------------------------------------------------------------------------

class JobServiceImpl::LogReactor : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  LogReactor(JobServiceImpl* service, int64_t job_id, const v1::StreamJobLogsRequest& request)
      : service_(service), job_id_(job_id), request_(request) {}

  void Start() { Poll(); }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      cancelled_ = true;  // client went away; the next poll finishes
    }
    Poll();
  }

  void OnCancel() override { cancelled_ = true; }

  void OnDone() override { delete this; }

 private:
  void Poll() {
    service_->logs_->RunRead([this] { PollOnReader(); });
  }

  // Sends the next chunk, or finishes, or waits a little and looks again.
  void PollOnReader() {
    if (cancelled_) {
      Done(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    // Terminal before reading: its last lines were queued before its final status, so
    // once the log store's queue is flushed they are on disk.
    absl::StatusOr<v1::Job> job = service_->store_->GetJob(job_id_);
    const bool over = !job.ok() || IsTerminal(job->state());
    if (over && !flushed_) {
      flushed_ = true;
      service_->logs_->Flush();
    }
    for (const LogStore::Source& s : service_->logs_->Sources(job_id_, request_.attempt())) {
      if (request_.rank() >= 0 && s.rank != request_.rank()) continue;
      LogStore::Cursor& c = cursors_[s.path];
      if (!c.opened) {
        c.opened = true;
        c.offset = LogStore::TailOffset(s.path, request_.tail_lines());
      }
      std::vector<std::string> lines = LogStore::ReadLines(s.path, &c);
      if (!lines.empty()) {
        chunk_.Clear();
        chunk_.set_attempt(s.attempt);
        chunk_.set_rank(s.rank);
        for (std::string& l : lines) chunk_.add_lines(std::move(l));
        StartWrite(&chunk_);
        return;
      }
    }
    if (!request_.follow() || over) {
      Done(grpc::Status::OK);
      return;
    }
    alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(250),
               [this](bool) { Poll(); });
  }

  void Done(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  JobServiceImpl* const service_;
  const int64_t job_id_;
  const v1::StreamJobLogsRequest request_;
  std::map<std::string, LogStore::Cursor> cursors_;  // reader thread only
  v1::LogChunk chunk_;
  grpc::Alarm alarm_;
  std::atomic<bool> cancelled_{false};
  bool finished_ = false;  // reader thread only
  bool flushed_ = false;   // reader thread only
};

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::StreamJobLogs(
    grpc::CallbackServerContext* context, const v1::StreamJobLogsRequest* request) {
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  absl::Status error = auth_->Check(*context, Operation::kRead).status();
  if (error.ok()) error = id.status();
  if (error.ok()) error = store_->GetJob(*id).status();
  if (error.ok() && (request->attempt() < 0 || request->tail_lines() < 0 || request->rank() < -1)) {
    error = absl::InvalidArgumentError("attempt and tail_lines must be >= 0, rank >= -1");
  }
  if (error.ok() && logs_ == nullptr) error = absl::UnimplementedError("no log store");
  auto* reactor = new LogReactor(this, id.ok() ? *id : 0, *request);
  if (!error.ok()) {
    reactor->Finish(ToGrpcStatus(error));
    return reactor;
  }
  reactor->Start();
  return reactor;
}

// ---------------------------------------------------------------------------
// WatchJob: snapshot, history after `after_seq`, then live events, in seq order and
// without duplicates, until the event that makes the job terminal has been sent.
// ---------------------------------------------------------------------------

class JobServiceImpl::WatchReactor : public grpc::ServerWriteReactor<v1::WatchJobResponse> {
 public:
  WatchReactor(JobServiceImpl* service, int64_t job_id, int64_t after_seq)
      : service_(service), job_id_(job_id), next_seq_(after_seq + 1) {}

  // Subscribes, then reads the snapshot and history; live events that race with the
  // read are buffered and de-duplicated by sequence number.
  void Start() {
    const std::string job_id_string = JobIdString(job_id_);
    subscription_ = service_->store_->Subscribe([this, job_id_string](const v1::JobEvent& e) {
      if (e.job_id() != job_id_string) return;
      std::lock_guard<std::mutex> lock(mu_);
      EnqueueEventLocked(e);
      MaybeWriteLocked();
    });
    absl::StatusOr<v1::Job> job = service_->store_->GetJob(job_id_);
    absl::StatusOr<std::vector<v1::JobEvent>> history =
        job.ok() ? service_->store_->GetEvents(job_id_, next_seq_ - 1, kMaxEventLimit * 100)
                 : absl::StatusOr<std::vector<v1::JobEvent>>(job.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (!history.ok()) {
      FinishLocked(ToGrpcStatus(history.status()));
      return;
    }
    if (IsTerminal(job->state())) terminal_seq_ = job->last_event_seq();
    service_->AddPendingInfo(&*job);
    v1::WatchJobResponse first;
    *first.mutable_job() = std::move(*job);
    // The snapshot goes first; any live events already buffered follow in seq order.
    pending_.push_front(std::move(first));
    std::deque<v1::WatchJobResponse> live = std::move(live_before_snapshot_);
    loaded_ = true;
    for (const v1::JobEvent& e : *history) EnqueueEventLocked(e);
    for (const v1::WatchJobResponse& r : live) EnqueueEventLocked(r.event());
    if (pending_.size() == 1 && terminal_seq_ > 0 && next_seq_ > terminal_seq_) {
      finish_after_write_ = true;
    }
    MaybeWriteLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (finish_after_write_ && pending_.empty()) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(service_->watches_mu_);
      stopping = service_->watches_stopped_;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // During shutdown gRPC cancels what is still open: say why, so clients reconnect.
    FinishLocked(stopping ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "coordinator is shutting down")
                          : grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    service_->store_->Unsubscribe(subscription_);
    {
      std::lock_guard<std::mutex> lock(service_->watches_mu_);
      service_->watches_.erase(this);
    }
    delete this;
  }

  // Ends the stream (at most once). Safe under any lock: gRPC never runs a write
  // reactor's reactions inline.
  void FinishWith(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(std::move(status));
  }

 private:
  void EnqueueEventLocked(const v1::JobEvent& e) {
    if (!loaded_) {
      v1::WatchJobResponse r;
      *r.mutable_event() = e;
      live_before_snapshot_.push_back(std::move(r));
      return;
    }
    if (e.seq() < next_seq_ || finish_after_write_) return;  // already queued or sent
    next_seq_ = e.seq() + 1;
    v1::WatchJobResponse r;
    *r.mutable_event() = e;
    pending_.push_back(std::move(r));
    if (IsTerminal(e.to_state()) || (terminal_seq_ > 0 && e.seq() >= terminal_seq_)) {
      finish_after_write_ = true;
    }
  }

  void MaybeWriteLocked() {
    if (writing_ || finished_ || pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&current_);
  }

  void FinishLocked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  JobServiceImpl* const service_;
  const int64_t job_id_;
  int64_t subscription_ = 0;

  std::mutex mu_;
  int64_t next_seq_;            // the next event seq to send
  int64_t terminal_seq_ = 0;    // seq of the terminal event, once known
  bool loaded_ = false;         // snapshot and history queued
  bool writing_ = false;
  bool finished_ = false;
  bool finish_after_write_ = false;
  std::deque<v1::WatchJobResponse> live_before_snapshot_;
  std::deque<v1::WatchJobResponse> pending_;
  v1::WatchJobResponse current_;
};

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  absl::Status error = auth_->Check(*context, Operation::kRead).status();
  if (error.ok()) error = id.status();
  if (error.ok() && request->after_seq() < 0) {
    error = absl::InvalidArgumentError("after_seq must be >= 0");
  }
  auto* reactor = new WatchReactor(this, id.ok() ? *id : 0, request->after_seq());
  {
    std::lock_guard<std::mutex> lock(watches_mu_);
    if (error.ok() && watches_stopped_) {
      error = absl::UnavailableError("coordinator is shutting down");
    }
    watches_.insert(reactor);
  }
  if (!error.ok()) {
    reactor->FinishWith(ToGrpcStatus(error));
    return reactor;
  }
  reactor->Start();
  return reactor;
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
    absl::StatusOr<sqlite::Statement> q = conn.Prepare(absl::StrCat(
        "SELECT queue, min(create_time_us) FROM jobs WHERE state = ",
        static_cast<int>(v1::QUEUED), " GROUP BY queue"));
    if (!q.ok()) return q.status();
    while (true) {
      absl::StatusOr<bool> row = q->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      *queues[q->ColumnText(0)].mutable_oldest_queued_time() =
          google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(q->ColumnInt(1));
    }
    return absl::OkStatus();
  });
  if (!read.ok()) return FinishNow(context, read);
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

void JobServiceImpl::StopWatches() {
  std::lock_guard<std::mutex> lock(watches_mu_);
  watches_stopped_ = true;
  for (WatchReactor* w : watches_) {
    w->FinishWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
  }
}

}  // namespace llamafleet
