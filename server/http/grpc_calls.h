#ifndef LLAMAFLEET_SERVER_HTTP_GRPC_CALLS_H_
#define LLAMAFLEET_SERVER_HTTP_GRPC_CALLS_H_

// The gateway's gRPC calls (each HTTP route is one or two calls through the coordinator's
// in-process channel): the registry of calls in flight, so shutdown can cancel them, and
// the per-call plumbing (credentials, deadline).

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/http/responder.h"

namespace llamafleet::http {

// Shared-owned by the gateway and by every call in flight, so it outlives their callbacks.
class CallRegistry {
 public:
  explicit CallRegistry(int max_event_streams) : max_event_streams_(max_event_streams) {}

  // A call registers its context while it runs. After CancelAll, a call that starts is
  // cancelled at once.
  void Started(grpc::ClientContext* context);
  void Ended(grpc::ClientContext* context);
  // Cancels every call in flight, and every later one as it starts (shutdown).
  void CancelAll();
  int in_flight() const { return calls_.load(); }

  // Event-stream slots: false when max_event_streams are open.
  bool AcquireStream();
  void ReleaseStream() { streams_.fetch_sub(1); }

 private:
  const int max_event_streams_;
  std::atomic<int> calls_{0};
  std::atomic<int> streams_{0};
  // Recursive: cancelling a call can run its callback (which calls Ended) inline.
  std::recursive_mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

// The caller's Authorization (and, with authentication off, x-llamafleet-user) as call
// metadata: authentication and authorization are decided by the gRPC services. With them
// the client's address and its proof (kForwardedPeerKey, kForwardedPeerProofKey, set by
// the HTTP server on every request), by which failed token attempts are counted. INVALID_ARGUMENT for a header outside
// printable ASCII.
absl::Status ForwardCredentials(const Request& http, grpc::ClientContext* context);

inline std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// One unary call's state, kept alive by its completion callback.
template <typename Req, typename Resp>
struct UnaryCall {
  grpc::ClientContext context;
  Req request;
  Resp response;
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_GRPC_CALLS_H_
