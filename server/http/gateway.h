#ifndef LLAMAFLEET_SERVER_HTTP_GATEWAY_H_
#define LLAMAFLEET_SERVER_HTTP_GATEWAY_H_

// The HTTP routes: /api/v1 (JSON <-> the gRPC services, through the in-process channel),
// /healthz, /metrics and the portal, as one table (Gateway::Routes, gateway.cc): adding
// an endpoint is one line there and a handler. Knows nothing of sockets: it answers
// through a Responder (responder.h).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/http/grpc_calls.h"
#include "server/http/json_errors.h"
#include "server/http/query.h"
#include "server/http/responder.h"
#include "server/http/router.h"

namespace llamafleet::http {

struct GatewayOptions {
  // Concurrent event streams; more are answered 503.
  int max_event_streams = 256;
  // Deadline of each unary gRPC call.
  absl::Duration call_timeout = absl::Seconds(30);
  // Body of /metrics (Prometheus text format 0.0.4). Empty function: an empty body.
  std::function<std::string()> metrics;
  // The coordinator's path roots (GET /api/v1/config: what a job may name).
  std::vector<std::string> path_roots;
  // Where a job's checkpoints go when its spec names no checkpoint.dir: <root>/<job id>.
  // GET /api/v1/jobs/{id}/spec.yaml leaves that dir out, so a resubmission gets its own.
  std::string checkpoint_root;
};

class Gateway;

// One request being answered by a route's handler.
struct RouteCall {
  const Request& http;
  const Query& query;
  const PathParams& params;
  const std::string& path;  // percent-decoded
  std::shared_ptr<Responder> out;

  const std::string& param(absl::string_view name) const { return params.find(name)->second; }
};

// Shared-owned: every gRPC call in flight holds it, so it outlives its callbacks.
class Gateway : public std::enable_shared_from_this<Gateway> {
 public:
  Gateway(std::shared_ptr<grpc::Channel> channel, GatewayOptions options);

  // Answers `request` through `out`, now or later (from a gRPC thread). Never blocks.
  void Handle(Request request, std::shared_ptr<Responder> out);

  // Called with a request's header before its body is read: asks WhoAmI (through the
  // same gRPC auth as every route) whether the credentials it carries are good, and
  // whether their role may do what the route does (its Permission). `done` gets nullopt
  // to go on, or the error response (401, 403, 400) to answer instead of reading the
  // body: a caller who may not submit never gets a body parsed. Never blocks; `done` may
  // run on a gRPC thread.
  void Authenticate(const Request& header, std::function<void(std::optional<Response>)> done);

  // Whether the route `header` names checks its caller's credentials (every route but
  // /healthz and the portal's; false for no route).
  bool NeedsCredentials(const Request& header) const;

  // gRPC calls started and not yet finished (unary and streams).
  int calls_in_flight() const { return calls_->in_flight(); }

  // Cancels every gRPC call in flight, and every later one as it starts (shutdown).
  void CancelAll() { calls_->CancelAll(); }

 private:
  using Handler = void (Gateway::*)(const RouteCall&);
  static const std::vector<Route<Handler>>& Routes();

  // The services' callback-API stubs, and one of their unary methods.
  using JobCalls = v1::JobService::StubInterface::async_interface;
  using WorkerCalls = v1::WorkerService::StubInterface::async_interface;
  template <typename Calls, typename Req, typename Resp>
  using Method = void (Calls::*)(grpc::ClientContext*, const Req*, Resp*,
                                 std::function<void(grpc::Status)>);

  // Unary call of `method` (of jobs_ or workers_); `render` turns the answer into the
  // HTTP response, `error` a failed call.
  template <typename Req, typename Resp, typename Calls>
  void Unary(const RouteCall& call, Req request, Method<Calls, Req, Resp> method,
             std::function<Response(const Resp&)> render,
             std::function<Response(const grpc::Status&)> error = GrpcError);
  // WhoAmI with the request's credentials; `done` runs on a gRPC thread.
  void WhoAmI(const Request& http,
              std::function<void(const grpc::Status&, const v1::WhoAmIResponse&)> done);

  // The handlers, one per route.
  void Healthz(const RouteCall& call);
  void Metrics(const RouteCall& call);
  void Portal(const RouteCall& call);
  void Config(const RouteCall& call);
  void WhoAmIRoute(const RouteCall& call);
  void ListJobs(const RouteCall& call);
  void SubmitJob(const RouteCall& call);
  void SubmitJobs(const RouteCall& call);
  void GetJob(const RouteCall& call);
  void JobSpecYaml(const RouteCall& call);
  void CancelJob(const RouteCall& call);
  void DeleteJob(const RouteCall& call);
  void JobEvents(const RouteCall& call);
  void JobLogs(const RouteCall& call);
  void ListCheckpoints(const RouteCall& call);
  void ListAttempts(const RouteCall& call);
  void ListSamples(const RouteCall& call);
  void JobMetrics(const RouteCall& call);
  void ListWorkers(const RouteCall& call);
  void ListQueues(const RouteCall& call);
  void GetUsage(const RouteCall& call);

  // Constant after construction.
  const GatewayOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::JobService::Stub> jobs_;
  const std::unique_ptr<v1::WorkerService::Stub> workers_;
  const std::shared_ptr<CallRegistry> calls_;
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_GATEWAY_H_
