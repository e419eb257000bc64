#include "server/http/gateway.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "jobspec/jobspec.h"
#include "nlohmann/json.hpp"
#include "server/http/json_errors.h"
#include "server/http/portal_assets.h"
#include "server/http/sse.h"
#include "server/http/submission.h"
#include "server/permissions.h"

namespace llamafleet::http {

namespace bhttp = boost::beast::http;

namespace {

// A route's query list holding only this takes any query string, unparsed.
const char kAnyQuery[] = "*";

bool TakesAnyQuery(const std::vector<std::string>& query) {
  return query.size() == 1 && query[0] == kAnyQuery;
}

std::optional<Operation> OperationFor(Permission permission) {
  switch (permission) {
    case Permission::kPublic: return std::nullopt;
    case Permission::kRead: return Operation::kRead;
    case Permission::kSubmit: return Operation::kSubmit;
    case Permission::kCancel: return Operation::kCancel;
  }
  return std::nullopt;
}

Response Unavailable(absl::string_view message) { return ErrorResponse(503, "UNAVAILABLE", message); }

}  // namespace

const std::vector<Route<Gateway::Handler>>& Gateway::Routes() {
  using P = Permission;
  constexpr bhttp::verb kGet = bhttp::verb::get;
  constexpr bhttp::verb kPost = bhttp::verb::post;
  // Table order matters only where two patterns match one path: the first names the
  // resource ("{id}:cancel" before "{id}").
  static const std::vector<Route<Handler>> kRoutes = {
      {kGet, "/healthz", P::kPublic, {kAnyQuery}, &Gateway::Healthz},
      {kGet, "/metrics", P::kRead, {kAnyQuery}, &Gateway::Metrics},
      {kGet, "/", P::kPublic, {kAnyQuery}, &Gateway::Portal},
      {kGet, "/ui", P::kPublic, {kAnyQuery}, &Gateway::Portal},
      {kGet, "/ui/{file...}", P::kPublic, {kAnyQuery}, &Gateway::Portal},
      {kGet, "/api/v1/whoami", P::kRead, {}, &Gateway::WhoAmIRoute},
      {kGet, "/api/v1/config", P::kRead, {}, &Gateway::Config},
      {kGet,
       "/api/v1/jobs",
       P::kRead,
       {"state", "queue", "owner", "label", "name", "order_by", "page_size", "page_token", "view"},
       &Gateway::ListJobs},
      {kPost,
       "/api/v1/jobs",
       P::kSubmit,
       {"dry_run", "idempotency_key", "derived_from"},
       &Gateway::SubmitJob},
      {kPost, "/api/v1/jobs:batch", P::kSubmit, {"dry_run"}, &Gateway::SubmitJobs},
      {kPost, "/api/v1/jobs/{id}:cancel", P::kCancel, {}, &Gateway::CancelJob},
      {kPost, "/api/v1/jobs/{id}:delete", P::kCancel, {}, &Gateway::DeleteJob},
      {kGet, "/api/v1/jobs/{id}", P::kRead, {}, &Gateway::GetJob},
      {kGet, "/api/v1/jobs/{id}/spec.yaml", P::kRead, {"submitted"}, &Gateway::JobSpecYaml},
      {kGet,
       "/api/v1/jobs/{id}/events",
       P::kRead,
       {"after_seq", "limit", "follow"},
       &Gateway::JobEvents},
      {kGet,
       "/api/v1/jobs/{id}/logs",
       P::kRead,
       {"attempt", "rank", "tail_lines", "follow"},
       &Gateway::JobLogs},
      {kGet, "/api/v1/jobs/{id}/checkpoints", P::kRead, {}, &Gateway::ListCheckpoints},
      {kGet, "/api/v1/jobs/{id}/attempts", P::kRead, {}, &Gateway::ListAttempts},
      {kGet, "/api/v1/jobs/{id}/samples", P::kRead, {"step", "latest"}, &Gateway::ListSamples},
      {kGet, "/api/v1/jobs/{id}/metrics", P::kRead, {"max_points"}, &Gateway::JobMetrics},
      {kGet, "/api/v1/workers", P::kRead, {}, &Gateway::ListWorkers},
      {kGet, "/api/v1/queues", P::kRead, {}, &Gateway::ListQueues},
      {kGet, "/api/v1/usage", P::kRead, {"user"}, &Gateway::GetUsage},
  };
  return kRoutes;
}

Gateway::Gateway(std::shared_ptr<grpc::Channel> channel, GatewayOptions options)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      jobs_(v1::JobService::NewStub(channel_)),
      workers_(v1::WorkerService::NewStub(channel_)),
      calls_(std::make_shared<CallRegistry>(options_.max_event_streams)) {}

namespace {

// The target's path, percent-decoded, and its raw query string.
absl::StatusOr<std::pair<std::string, absl::string_view>> SplitTarget(const Request& http) {
  const absl::string_view target(http.target().data(), http.target().size());
  const size_t q = target.find('?');
  LF_ASSIGN_OR_RETURN(std::string path, PercentDecode(target.substr(0, q), false));
  return std::make_pair(std::move(path),
                        q == absl::string_view::npos ? absl::string_view() : target.substr(q + 1));
}

}  // namespace

void Gateway::Handle(Request request, std::shared_ptr<Responder> out) {
  absl::StatusOr<std::pair<std::string, absl::string_view>> target = SplitTarget(request);
  if (!target.ok()) {
    out->Reply(StatusError(target.status()));
    return;
  }
  const std::string& path = target->first;
  RouteMatch<Handler> match = FindRoute(Routes(), request.method(), path);
  if (match.route == nullptr) {
    out->Reply(match.allowed.empty() ? NotFound(path) : MethodNotAllowed(request, match.allowed));
    return;
  }
  Query query;
  if (!TakesAnyQuery(match.route->query)) {
    absl::StatusOr<Query> parsed = Query::Parse(target->second);
    absl::Status s = parsed.status();
    if (s.ok()) s = parsed->Only(match.route->query);
    if (!s.ok()) {
      out->Reply(StatusError(s));
      return;
    }
    query = std::move(*parsed);
  }
  (this->*match.route->handler)(RouteCall{request, query, match.params, path, std::move(out)});
}

void Gateway::Authenticate(const Request& header,
                           std::function<void(std::optional<Response>)> done) {
  std::optional<Operation> op;
  if (absl::StatusOr<std::pair<std::string, absl::string_view>> target = SplitTarget(header);
      target.ok()) {
    RouteMatch<Handler> match = FindRoute(Routes(), header.method(), target->first);
    if (match.route != nullptr) op = OperationFor(match.route->permission);
  }
  WhoAmI(header, [done = std::move(done), op](const grpc::Status& status,
                                              const v1::WhoAmIResponse& caller) {
    if (!status.ok()) {
      done(GrpcError(status));
      return;
    }
    if (op.has_value()) {
      // The role alone (a cancel's owner is checked by the service, after the body).
      Principal principal{caller.user(), caller.role()};
      if (absl::Status s = Authorize(principal, *op); !s.ok()) {
        done(StatusError(s));
        return;
      }
    }
    done(std::nullopt);
  });
}

bool Gateway::NeedsCredentials(const Request& header) const {
  absl::StatusOr<std::pair<std::string, absl::string_view>> target = SplitTarget(header);
  if (!target.ok()) return false;
  RouteMatch<Handler> match = FindRoute(Routes(), header.method(), target->first);
  return match.route != nullptr && match.route->permission != Permission::kPublic;
}

template <typename Req, typename Resp, typename Calls>
void Gateway::Unary(const RouteCall& route, Req request, Method<Calls, Req, Resp> method,
                    std::function<Response(const Resp&)> render,
                    std::function<Response(const grpc::Status&)> error) {
  auto call = std::make_shared<UnaryCall<Req, Resp>>();
  call->request = std::move(request);
  if (absl::Status f = ForwardCredentials(route.http, &call->context); !f.ok()) {
    route.out->Reply(StatusError(f));
    return;
  }
  call->context.set_deadline(Deadline(options_.call_timeout));
  calls_->Started(&call->context);
  Calls* stub;
  if constexpr (std::is_same_v<Calls, JobCalls>) {
    stub = jobs_->async();
  } else {
    stub = workers_->async();
  }
  (stub->*method)(&call->context, &call->request, &call->response,
                  [calls = calls_, call, out = route.out, render = std::move(render),
                   error = std::move(error)](grpc::Status status) {
                    out->Reply(status.ok() ? render(call->response) : error(status));
                    calls->Ended(&call->context);
                  });
}

void Gateway::WhoAmI(const Request& http,
                     std::function<void(const grpc::Status&, const v1::WhoAmIResponse&)> done) {
  auto call = std::make_shared<UnaryCall<v1::WhoAmIRequest, v1::WhoAmIResponse>>();
  if (absl::Status f = ForwardCredentials(http, &call->context); !f.ok()) {
    done(grpc::Status(static_cast<grpc::StatusCode>(f.code()), std::string(f.message())),
         call->response);
    return;
  }
  call->context.set_deadline(Deadline(options_.call_timeout));
  calls_->Started(&call->context);
  jobs_->async()->WhoAmI(&call->context, &call->request, &call->response,
                         [calls = calls_, call, done = std::move(done)](grpc::Status status) {
                           calls->Ended(&call->context);
                           done(status, call->response);
                         });
}

namespace {

Response Json(const google::protobuf::Message& message) { return JsonResponse(message); }

}  // namespace

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

void Gateway::Healthz(const RouteCall& call) {
  call.out->Reply(BodyResponse(bhttp::status::ok, "text/plain; charset=utf-8", "ok\n"));
}

// /metrics is no gRPC call: WhoAmI says whether the caller's token is good.
void Gateway::Metrics(const RouteCall& call) {
  WhoAmI(call.http, [self = shared_from_this(), out = call.out](const grpc::Status& status,
                                                                const v1::WhoAmIResponse&) {
    if (!status.ok()) {
      out->Reply(GrpcError(status));
      return;
    }
    out->Reply(BodyResponse(bhttp::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                            self->options_.metrics ? self->options_.metrics() : std::string()));
  });
}

// {"path_roots": [...]}: the directories a job may name paths in.
void Gateway::Config(const RouteCall& call) {
  WhoAmI(call.http, [self = shared_from_this(), out = call.out](const grpc::Status& status,
                                                                const v1::WhoAmIResponse&) {
    if (!status.ok()) {
      out->Reply(GrpcError(status));
      return;
    }
    out->Reply(
        BodyResponse(bhttp::status::ok, "application/json",
                     nlohmann::json({{"path_roots", self->options_.path_roots}}).dump() + "\n"));
  });
}

void Gateway::Portal(const RouteCall& call) { call.out->Reply(portal::Serve(call.http, call.path)); }

void Gateway::WhoAmIRoute(const RouteCall& call) {
  Unary<v1::WhoAmIRequest, v1::WhoAmIResponse>(call, {}, &JobCalls::WhoAmI, Json);
}

void Gateway::ListJobs(const RouteCall& call) {
  absl::StatusOr<v1::ListJobsRequest> request = ListJobsFromQuery(call.query);
  if (!request.ok()) {
    call.out->Reply(StatusError(request.status()));
    return;
  }
  Unary<v1::ListJobsRequest, v1::ListJobsResponse>(call, std::move(*request), &JobCalls::ListJobs,
                                                   Json);
}

void Gateway::SubmitJob(const RouteCall& call) {
  v1::SubmitJobRequest request;
  std::vector<FieldPositions> positions;
  if (std::optional<Response> error = ReadSubmitJob(call.http, call.query, &request, &positions)) {
    call.out->Reply(std::move(*error));
    return;
  }
  Unary<v1::SubmitJobRequest, v1::SubmitJobResponse>(
      call, std::move(request), &JobCalls::SubmitJob,
      [](const v1::SubmitJobResponse& r) {
        return JsonResponse(r, r.created() ? bhttp::status::created : bhttp::status::ok);
      },
      [positions = std::move(positions)](const grpc::Status& status) {
        return SubmitError(status, positions, /*batch=*/false);
      });
}

void Gateway::SubmitJobs(const RouteCall& call) {
  v1::SubmitJobsRequest request;
  std::vector<FieldPositions> positions;
  if (std::optional<Response> error = ReadSubmitJobs(call.http, call.query, &request, &positions)) {
    call.out->Reply(std::move(*error));
    return;
  }
  Unary<v1::SubmitJobsRequest, v1::SubmitJobsResponse>(
      call, std::move(request), &JobCalls::SubmitJobs,
      [](const v1::SubmitJobsResponse& r) {
        bool created = false;
        for (const v1::SubmitJobResponse& j : r.jobs()) created = created || j.created();
        return JsonResponse(r, created ? bhttp::status::created : bhttp::status::ok);
      },
      [positions = std::move(positions)](const grpc::Status& status) {
        return SubmitError(status, positions, /*batch=*/true);
      });
}

void Gateway::GetJob(const RouteCall& call) {
  v1::GetJobRequest request;
  request.set_job_id(call.param("id"));
  Unary<v1::GetJobRequest, v1::Job>(call, std::move(request), &JobCalls::GetJob, Json);
}

// The stored spec as block YAML (MessageToYaml: optional fields keep their presence, so
// an explicit 0 stays 0), ready to submit again: the default checkpoint dir, which is the
// old job's, is left out. ?submitted=true: the spec as it was submitted (Job.submitted_spec,
// what the portal's Resubmit edits) instead of the effective one.
void Gateway::JobSpecYaml(const RouteCall& call) {
  bool submitted = false;
  if (absl::Status s = call.query.GetBool("submitted", &submitted); !s.ok()) {
    call.out->Reply(StatusError(s));
    return;
  }
  v1::GetJobRequest request;
  request.set_job_id(call.param("id"));
  Unary<v1::GetJobRequest, v1::Job>(
      call, std::move(request), &JobCalls::GetJob,
      [root = options_.checkpoint_root, submitted](const v1::Job& job) {
        v1::JobSpec spec = submitted ? job.submitted_spec() : job.spec();
        if (!root.empty() && spec.checkpoint().dir() == absl::StrCat(root, "/", job.id())) {
          spec.mutable_checkpoint()->clear_dir();
        }
        return BodyResponse(bhttp::status::ok, "application/yaml; charset=utf-8",
                            MessageToYaml(spec));
      });
}

namespace {

// POST /api/v1/jobs/{id}:verb: an optional JSON body into `request`, whose job_id the path
// names. False when the body was refused (the reply is sent).
template <typename Request>
bool ReadJobAction(const RouteCall& call, Request* request) {
  if (!call.http.body().empty()) {
    if (TypeOf(call.http) != BodyType::kJson) {
      call.out->Reply(UnsupportedType(call.http, false));
      return false;
    }
    if (absl::Status s = FromJson(call.http.body(), request); !s.ok()) {
      call.out->Reply(StatusError(s));
      return false;
    }
  }
  request->set_job_id(call.param("id"));
  return true;
}

}  // namespace

void Gateway::CancelJob(const RouteCall& call) {
  v1::CancelJobRequest request;
  if (!ReadJobAction(call, &request)) return;
  Unary<v1::CancelJobRequest, v1::CancelJobResponse>(call, std::move(request), &JobCalls::CancelJob,
                                                     Json);
}

void Gateway::DeleteJob(const RouteCall& call) {
  v1::DeleteJobRequest request;
  if (!ReadJobAction(call, &request)) return;
  Unary<v1::DeleteJobRequest, v1::DeleteJobResponse>(call, std::move(request), &JobCalls::DeleteJob,
                                                     Json);
}

void Gateway::JobEvents(const RouteCall& call) {
  const Query& params = call.query;
  bool follow = false;
  int64_t after_seq = 0;
  int32_t limit = 0;
  absl::Status s = params.GetBool("follow", &follow);
  if (s.ok()) s = params.GetInt("after_seq", &after_seq);
  if (s.ok()) s = params.GetInt("limit", &limit);
  // A reconnecting EventSource-style client resumes after the last event it saw.
  auto last_id = call.http.find("last-event-id");
  if (s.ok() && follow && !params.Get("after_seq") && last_id != call.http.end()) {
    if (!absl::SimpleAtoi(absl::string_view(last_id->value().data(), last_id->value().size()),
                          &after_seq)) {
      s = absl::InvalidArgumentError("header Last-Event-ID must be an event seq");
    }
  }
  if (s.ok() && follow && params.Get("limit")) {
    s = absl::InvalidArgumentError("query parameter limit does not apply with follow=true");
  }
  if (!s.ok()) {
    call.out->Reply(StatusError(s));
    return;
  }
  if (!follow) {
    v1::GetJobEventsRequest request;
    request.set_job_id(call.param("id"));
    request.set_after_seq(after_seq);
    request.set_limit(limit);
    Unary<v1::GetJobEventsRequest, v1::GetJobEventsResponse>(call, std::move(request),
                                                             &JobCalls::GetJobEvents, Json);
    return;
  }
  if (!calls_->AcquireStream()) {
    call.out->Reply(Unavailable("too many event streams open; retry later"));
    return;
  }
  using Stream = StreamCall<v1::WatchJobRequest, v1::WatchJobResponse>;
  auto stream = std::make_shared<Stream>(calls_, call.out, /*sse=*/true,
                                         [](const v1::WatchJobResponse& r) {
                                           return r.has_job()
                                                      ? SseEvent("job", MessageToJson(r.job()))
                                                      : SseEvent("event", MessageToJson(r.event()),
                                                                 r.event().seq());
                                         });
  if (absl::Status f = ForwardCredentials(call.http, stream->context()); !f.ok()) {
    call.out->Reply(StatusError(f));
    return;
  }
  stream->request()->set_job_id(call.param("id"));
  stream->request()->set_after_seq(after_seq);
  jobs_->async()->WatchJob(stream->context(), stream->request(), stream.get());
  stream->Begin();
}

void Gateway::JobLogs(const RouteCall& call) {
  const Query& params = call.query;
  bool follow = false;
  int32_t attempt = 0, rank = -1, tail_lines = 0;  // rank -1: every rank
  absl::Status s = params.GetBool("follow", &follow);
  if (s.ok()) s = params.GetInt("attempt", &attempt);
  if (s.ok()) s = params.GetInt("rank", &rank);
  if (s.ok()) s = params.GetInt("tail_lines", &tail_lines);
  if (!s.ok()) {
    call.out->Reply(StatusError(s));
    return;
  }
  if (follow && !calls_->AcquireStream()) {
    call.out->Reply(Unavailable("too many event streams open; retry later"));
    return;
  }
  using Stream = StreamCall<v1::StreamJobLogsRequest, v1::LogChunk>;
  std::shared_ptr<Stream> stream;
  if (follow) {
    stream = std::make_shared<Stream>(calls_, call.out, /*sse=*/true, [](const v1::LogChunk& c) {
      return SseEvent("log", MessageToJson(c));
    });
  } else {
    stream = std::make_shared<Stream>(
        calls_, call.out, /*sse=*/false, [](const v1::LogChunk& c) { return MessageToJson(c); },
        [](std::vector<std::string> chunks) {
          return BodyResponse(bhttp::status::ok, "application/json",
                              absl::StrCat("{\"chunks\":[", absl::StrJoin(chunks, ","), "]}\n"));
        });
  }
  if (absl::Status f = ForwardCredentials(call.http, stream->context()); !f.ok()) {
    call.out->Reply(StatusError(f));
    return;
  }
  if (!follow) stream->context()->set_deadline(Deadline(options_.call_timeout));
  v1::StreamJobLogsRequest* request = stream->request();
  request->set_job_id(call.param("id"));
  request->set_attempt(attempt);
  request->set_rank(rank);
  request->set_tail_lines(tail_lines);
  request->set_follow(follow);
  if (!follow) {
    jobs_->async()->StreamJobLogs(stream->context(), request, stream.get());
    stream->Begin();
    return;
  }
  // A log may stay silent for a long time; check the job first (404, 401, ...) so the
  // stream can open at once instead of waiting for the first line.
  auto check = std::make_shared<UnaryCall<v1::GetJobRequest, v1::Job>>();
  ForwardCredentials(call.http, &check->context).IgnoreError();  // checked above
  check->context.set_deadline(Deadline(options_.call_timeout));
  check->request.set_job_id(call.param("id"));
  calls_->Started(&check->context);
  jobs_->async()->GetJob(
      &check->context, &check->request, &check->response,
      [self = shared_from_this(), check, stream, out = call.out](grpc::Status status) {
        if (status.ok()) {
          self->jobs_->async()->StreamJobLogs(stream->context(), stream->request(), stream.get());
          stream->Begin(": streaming logs\n\n");
        } else {
          out->Reply(GrpcError(status));
        }
        self->calls_->Ended(&check->context);
      });
}

void Gateway::ListCheckpoints(const RouteCall& call) {
  v1::ListCheckpointsRequest request;
  request.set_job_id(call.param("id"));
  Unary<v1::ListCheckpointsRequest, v1::ListCheckpointsResponse>(call, std::move(request),
                                                                 &JobCalls::ListCheckpoints, Json);
}

void Gateway::ListAttempts(const RouteCall& call) {
  v1::ListAttemptsRequest request;
  request.set_job_id(call.param("id"));
  Unary<v1::ListAttemptsRequest, v1::ListAttemptsResponse>(call, std::move(request),
                                                           &JobCalls::ListAttempts, Json);
}

void Gateway::ListSamples(const RouteCall& call) {
  v1::ListSamplesRequest request;
  request.set_job_id(call.param("id"));
  int64_t step = 0;
  bool latest = false;
  absl::Status s = call.query.GetInt("step", &step);
  if (s.ok()) s = call.query.GetBool("latest", &latest);
  if (!s.ok()) {
    call.out->Reply(StatusError(s));
    return;
  }
  request.set_step(step);
  request.set_latest(latest);
  Unary<v1::ListSamplesRequest, v1::ListSamplesResponse>(call, std::move(request),
                                                         &JobCalls::ListSamples, Json);
}

void Gateway::JobMetrics(const RouteCall& call) {
  v1::GetJobMetricsRequest request;
  request.set_job_id(call.param("id"));
  int32_t max_points = 0;
  if (absl::Status s = call.query.GetInt("max_points", &max_points); !s.ok()) {
    call.out->Reply(StatusError(s));
    return;
  }
  request.set_max_points(max_points);
  Unary<v1::GetJobMetricsRequest, v1::GetJobMetricsResponse>(call, std::move(request),
                                                             &JobCalls::GetJobMetrics, Json);
}

void Gateway::ListWorkers(const RouteCall& call) {
  Unary<v1::ListWorkersRequest, v1::ListWorkersResponse>(call, {}, &WorkerCalls::ListWorkers, Json);
}

void Gateway::ListQueues(const RouteCall& call) {
  Unary<v1::ListQueuesRequest, v1::ListQueuesResponse>(call, {}, &JobCalls::ListQueues, Json);
}

void Gateway::GetUsage(const RouteCall& call) {
  v1::GetUsageRequest request;
  request.set_user(call.query.Get("user").value_or(""));
  Unary<v1::GetUsageRequest, v1::GetUsageResponse>(call, std::move(request), &JobCalls::GetUsage,
                                                   Json);
}

}  // namespace llamafleet::http
