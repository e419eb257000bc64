#include "server/worker_service.h"

#include <openssl/crypto.h>

#include <atomic>
#include <deque>

#include "absl/strings/str_cat.h"
#include "server/auth_failures.h"
#include "server/job_service.h"
#include "spdlog/spdlog.h"

namespace llamafleet {

class WorkerServiceImpl::SessionReactor
    : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  // The coordinator's handle on this session; outlives the reactor safely.
  class Link : public WorkerLink {
   public:
    explicit Link(SessionReactor* r) : reactor_(r) {}
    void Send(v1::CoordinatorMessage message) override {
      // The coordinator welcomes only a hello it accepted (a second process under a live
      // name is refused without one: server/cluster/worker_sessions.h).
      if (message.has_welcome()) welcomed_ = true;
      std::lock_guard<std::mutex> lock(mu_);
      if (reactor_ != nullptr) reactor_->Enqueue(std::move(message));
    }
    bool welcomed() const { return welcomed_; }
    void Close(const absl::Status& status) override {
      std::lock_guard<std::mutex> lock(mu_);
      if (reactor_ != nullptr) reactor_->FinishOnce(ToGrpcStatus(status));
    }
    void Detach() {
      std::lock_guard<std::mutex> lock(mu_);
      reactor_ = nullptr;
    }

   private:
    std::mutex mu_;
    SessionReactor* reactor_;
    std::atomic<bool> welcomed_{false};
  };

  SessionReactor(WorkerServiceImpl* service, std::string peer)
      : service_(service), peer_(std::move(peer)), link_(std::make_shared<Link>(this)) {}

  // Takes a place among the sessions waiting for their hello, then reads the hello;
  // without a place the session is refused at once (RESOURCE_EXHAUSTED).
  void Begin() {
    if (service_->hello_limits_ != nullptr) {
      absl::StatusOr<std::unique_ptr<HelloLimits::Waiting>> waiting =
          service_->hello_limits_->Admit(PeerAddress(peer_), [this](const absl::Status& why) {
            spdlog::debug("{}", std::string(why.message()));
            FinishOnce(ToGrpcStatus(why));
          });
      if (!waiting.ok()) {
        spdlog::debug("worker session from {}: {}", peer_, std::string(waiting.status().message()));
        FinishOnce(ToGrpcStatus(waiting.status()));
        return;
      }
      waiting_ = std::move(*waiting);
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the worker closed its side, or the call is gone
      FinishOnce(grpc::Status::OK);
      return;
    }
    if (name_.empty()) {
      if (!in_.has_hello()) {
        FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be hello"));
        return;
      }
      if (const size_t bytes = in_.ByteSizeLong(); bytes > kMaxHelloBytes) {
        FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                absl::StrCat("the hello is ", bytes, " bytes; at most ",
                                             kMaxHelloBytes >> 10, " KiB are accepted")));
        return;
      }
      const std::string address = PeerAddress(peer_);
      if (service_->failures_ != nullptr) {
        if (absl::Status blocked = service_->failures_->CheckPeer(address); !blocked.ok()) {
          FinishOnce(ToGrpcStatus(blocked));
          return;
        }
      }
      const std::string& token = in_.hello().join_token();
      const std::string& expected = service_->join_token_;
      if (expected.empty() || token.size() != expected.size() ||
          CRYPTO_memcmp(token.data(), expected.data(), token.size()) != 0) {
        Failed(address, "bad join token");
        FinishOnce(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad join token"));
        return;
      }
      if (in_.hello().worker_name().empty()) {
        FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello.worker_name is required"));
        return;
      }
      // The join token is good: no longer a stranger's stream, bounded as such. Ended
      // meanwhile (its place taken, or its deadline passed), it goes no further, so no
      // credential is issued that its worker would never receive.
      waiting_.reset();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (finished_) return;
      }
      if (service_->identity_ != nullptr) {
        absl::StatusOr<std::string> issued =
            service_->identity_->Admit(in_.hello().worker_name(), in_.hello().credential());
        if (!issued.ok()) {
          if (absl::IsUnauthenticated(issued.status())) {
            Failed(address, absl::StrCat("bad credential for worker name '", in_.hello().worker_name(), "'"));
          } else {
            spdlog::warn("worker session from {} as {}: {}", peer_, in_.hello().worker_name(),
                         std::string(issued.status().message()));
          }
          FinishOnce(ToGrpcStatus(issued.status()));
          return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        issued_credential_ = std::move(*issued);
      }
      in_.mutable_hello()->clear_credential();  // kept nowhere beyond this check
      name_ = in_.hello().worker_name();
      service_->manager_->OnHello(link_, std::move(*in_.mutable_hello()));
    } else if (!link_->welcomed()) {
      // Before its welcome (a worker sends nothing before it reads one), or refused: a
      // session the coordinator has not accepted speaks for nobody.
      if (!warned_unwelcome_) {
        warned_unwelcome_ = true;
        spdlog::warn("worker session from {} as {}: ignored messages sent before it was welcomed", peer_, name_);
      }
    } else if (in_.has_logs()) {
      const v1::LogLines& l = in_.logs();
      // Log lines are accepted only for a task assigned to this worker.
      if (service_->manager_->IsAssigned(l.task_id(), name_)) {
        service_->logs_->Append(l.task_id(), l.rank(), {l.lines().begin(), l.lines().end()},
                                l.dropped());
      } else if (!warned_foreign_logs_) {
        warned_foreign_logs_ = true;
        spdlog::warn("worker {}: ignored log lines for task {}, which is not assigned to it",
                     name_, l.task_id());
      }
    } else {
      service_->manager_->OnWorkerMessage(name_, std::move(in_));
    }
    in_.Clear();
    StartRead(&in_);
  }

  // A failed join token or credential: counted (and logged, rate-limited) per peer.
  void Failed(const std::string& address, const std::string& what) {
    if (service_->failures_ != nullptr) {
      service_->failures_->RecordFailure(address, absl::StrCat("worker session: ", what));
    } else {
      spdlog::warn("worker session from {}: {}", peer_, what);
    }
  }

  void Enqueue(v1::CoordinatorMessage message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (message.has_welcome() && !issued_credential_.empty()) {
      // A first join: the welcome carries the worker's new credential, once.
      message.mutable_welcome()->set_credential(std::move(issued_credential_));
      issued_credential_.clear();
    }
    out_.push_back(std::move(message));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.pop_front();
    if (!ok || finished_ || out_.empty()) {
      writing_ = false;
      return;
    }
    StartWrite(&out_.front());
  }

  void FinishOnce(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  void OnDone() override {
    waiting_.reset();
    link_->Detach();
    if (!name_.empty()) service_->manager_->OnDisconnected(name_, link_.get());
    {
      std::lock_guard<std::mutex> lock(service_->mu_);
      service_->sessions_.erase(this);
    }
    delete this;
  }

 private:
  WorkerServiceImpl* const service_;
  const std::string peer_;
  std::shared_ptr<Link> link_;
  std::string name_;  // set once hello is accepted (reactor thread only)
  // A place among the sessions waiting for their hello; gone once it is accepted
  // (reactor thread only).
  std::unique_ptr<HelloLimits::Waiting> waiting_;
  bool warned_foreign_logs_ = false;  // reactor thread only
  bool warned_unwelcome_ = false;     // reactor thread only
  v1::WorkerMessage in_;
  std::mutex mu_;
  std::deque<v1::CoordinatorMessage> out_;  // guarded by mu_; front is being written
  bool writing_ = false;                    // guarded by mu_
  bool finished_ = false;                   // guarded by mu_
  std::string issued_credential_;           // guarded by mu_; for the welcome
};

WorkerServiceImpl::WorkerServiceImpl(ClusterManager* manager, LogStore* logs, std::string join_token)
    : manager_(manager), logs_(logs), join_token_(std::move(join_token)) {}

WorkerServiceImpl::~WorkerServiceImpl() = default;

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  auto* reactor = new SessionReactor(this, context->peer());
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.insert(reactor);
  if (closed_) {
    reactor->FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
  } else {
    reactor->Begin();
  }
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ListWorkers(grpc::CallbackServerContext* context,
                                                         const v1::ListWorkersRequest* request,
                                                         v1::ListWorkersResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (auth_ != nullptr) {
    if (absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead); !caller.ok()) {
      reactor->Finish(ToGrpcStatus(caller.status()));
      return reactor;
    }
  }
  for (v1::WorkerInfo& w : manager_->Workers()) *response->add_workers() = std::move(w);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void WorkerServiceImpl::CloseSessions() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (SessionReactor* s : sessions_) {
    s->FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
  }
}

}  // namespace llamafleet
