#ifndef LLAMAFLEET_SERVER_WORKER_SERVICE_H_
#define LLAMAFLEET_SERVER_WORKER_SERVICE_H_

#include <mutex>
#include <set>

#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/auth.h"
#include "server/cluster/cluster_manager.h"
#include "server/cluster/worker_identity.h"
#include "server/hello_limits.h"
#include "server/log_store.h"

namespace llamafleet {

// WorkerService over the callback API: one bidi reactor per worker session. The join
// token, then the worker's credential (WorkerIdentity), are checked on the first message,
// before anything from the session is used or an existing session is touched; log
// lines go straight to the LogStore, everything else to the ClusterManager's strand.
// Until its hello has presented the join token a session holds a place in HelloLimits
// (refused at once without one, ended when its hello is late), and its first message may
// be at most kMaxHelloBytes: a stream that has not authenticated holds no more than that.
class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  // The largest first message (the hello) accepted; a larger one ends the session with
  // INVALID_ARGUMENT before any of it is used.
  static constexpr size_t kMaxHelloBytes = 64 << 10;

  // Not owned; must outlive the service.
  WorkerServiceImpl(ClusterManager* manager, LogStore* logs, std::string join_token);
  // Client calls (ListWorkers) are checked by `auth` (not owned; null = no checks).
  // Worker sessions authenticate with the join token only.
  void set_authenticator(const Authenticator* auth) { auth_ = auth; }
  // Per-worker credentials (not owned; null = the join token alone admits any name).
  void set_identity(WorkerIdentity* identity) { identity_ = identity; }
  // Where bad join tokens and credentials are counted per peer (auth_failures.h); a
  // blocked peer's hellos are refused. Not owned. Unset: each is logged, none counted.
  void set_failures(AuthFailures* failures) { failures_ = failures; }
  // Bounds on sessions before their hello is accepted (not owned; must outlive every
  // session). Unset: none.
  void set_hello_limits(HelloLimits* limits) { hello_limits_ = limits; }
  ~WorkerServiceImpl() override;

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;

  // Ends every session (at shutdown).
  void CloseSessions();

  class SessionReactor;

 private:
  const Authenticator* auth_ = nullptr;
  WorkerIdentity* identity_ = nullptr;
  AuthFailures* failures_ = nullptr;
  HelloLimits* hello_limits_ = nullptr;
  ClusterManager* const manager_;
  LogStore* const logs_;
  const std::string join_token_;
  std::mutex mu_;
  std::set<SessionReactor*> sessions_;  // guarded by mu_
  bool closed_ = false;                  // guarded by mu_
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_WORKER_SERVICE_H_
