#ifndef LLAMAFLEET_SERVER_HTTP_GATEWAY_H_
#define LLAMAFLEET_SERVER_HTTP_GATEWAY_H_

// The HTTP routes: /api/v1 (JSON <-> the gRPC services, through the in-process channel),
// /healthz, /metrics and the portal. Knows nothing of sockets: it answers through a
// Responder (responder.h). The route table is in issue 6's contract ("HTTP API").

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/http/responder.h"

namespace llamafleet::http {

struct GatewayOptions {
  // Concurrent event streams; more are answered 503.
  int max_event_streams = 256;
  // Deadline of each unary gRPC call.
  absl::Duration call_timeout = absl::Seconds(30);
  // Body of /metrics (Prometheus text format 0.0.4). Empty function: an empty body.
  std::function<std::string()> metrics;
};

// Shared-owned: every gRPC call in flight holds it, so it outlives its callbacks.
class Gateway : public std::enable_shared_from_this<Gateway> {
 public:
  Gateway(std::shared_ptr<grpc::Channel> channel, GatewayOptions options);

  // Answers `request` through `out`, now or later (from a gRPC thread). Never blocks.
  void Handle(Request request, std::shared_ptr<Responder> out);

  // Called with a request's header before its body is read: asks WhoAmI (through the
  // same gRPC auth as every route) whether the credentials it carries are good. `done`
  // gets nullopt to go on, or the error response (401, 400) to answer instead of reading
  // the body: a caller without a valid token never gets a body parsed. Never blocks;
  // `done` may run on a gRPC thread.
  void Authenticate(const Request& header, std::function<void(std::optional<Response>)> done);

  // gRPC calls started and not yet finished (unary and streams).
  int calls_in_flight() const { return calls_.load(); }

  // Cancels every gRPC call in flight, and every later one as it starts (shutdown).
  void CancelAll();

  // Bookkeeping of the calls (gateway.cc): a call registers its context while it runs.
  bool AcquireStream();
  void ReleaseStream() { streams_.fetch_sub(1); }
  void CallStarted(grpc::ClientContext* context);
  void CallEnded(grpc::ClientContext* context);

 private:
  // Unary call through the async stub: `start(ctx, req, resp, callback)`; `render` turns the
  // answer into the HTTP response.
  template <typename Req, typename Resp, typename Start>
  void Unary(const Request& http, std::shared_ptr<Responder> out, Req request, Start start,
             std::function<Response(const Resp&)> render);

  void Api(const Request& http, absl::string_view path, absl::string_view query,
           std::shared_ptr<Responder> out);
  void ListJobs(const Request& http, absl::string_view query, std::shared_ptr<Responder> out);
  void SubmitJob(const Request& http, absl::string_view query, std::shared_ptr<Responder> out);
  void SubmitJobs(const Request& http, absl::string_view query, std::shared_ptr<Responder> out);
  void CancelJob(const Request& http, const std::string& id, std::shared_ptr<Responder> out);
  void JobEvents(const Request& http, const std::string& id, absl::string_view query,
                 std::shared_ptr<Responder> out);
  void JobLogs(const Request& http, const std::string& id, absl::string_view query,
               std::shared_ptr<Responder> out);
  void Metrics(const Request& http, std::shared_ptr<Responder> out);
  void Portal(const Request& http, absl::string_view path, Responder& out);

  // Constant after construction.
  const GatewayOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::JobService::Stub> jobs_;
  const std::unique_ptr<v1::WorkerService::Stub> workers_;

  std::atomic<int> calls_{0};
  std::atomic<int> streams_{0};
  // Recursive: cancelling a call can run its callback (which calls CallEnded) inline.
  std::recursive_mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_GATEWAY_H_
