#ifndef LLAMAFLEET_SERVER_HTTP_SSE_H_
#define LLAMAFLEET_SERVER_HTTP_SSE_H_

// Server-streaming gRPC calls answered over HTTP: as server-sent events with
// backpressure (?follow=true), or collected into one response when the stream ends.

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http/grpc_calls.h"
#include "server/http/json_errors.h"
#include "server/http/responder.h"
#include "server/stream_limits.h"

namespace llamafleet::http {

// One "id: ...\nevent: ...\ndata: ...\n\n" block (no id line when `id` is 0); `json` is
// a single line.
std::string SseEvent(absl::string_view event, absl::string_view json, int64_t id = 0);
// The error shape (json_errors.h) as an "error" event.
std::string SseError(const grpc::Status& status);

// Owns itself from Begin() until gRPC's OnDone. A hold keeps the call open while an event
// is being written, so the next Read is started only once the previous event reached the
// socket: a slow reader slows its own stream and nobody else's. A client that disconnects
// cancels the call. An SSE call holds one of the registry's stream slots until it ends
// (the caller acquires it).
template <typename Req, typename Resp>
class StreamCall : public grpc::ClientReadReactor<Resp>,
                   public std::enable_shared_from_this<StreamCall<Req, Resp>> {
 public:
  using Render = std::function<std::string(const Resp&)>;
  using Collect = std::function<Response(std::vector<std::string>)>;
  // sse: one event per message; otherwise `collect` turns every rendered message into one
  // response when the stream ends.
  StreamCall(std::shared_ptr<CallRegistry> calls, std::shared_ptr<Responder> out, bool sse,
             Render render, Collect collect = nullptr)
      : calls_(std::move(calls)),
        out_(std::move(out)),
        sse_(sse),
        render_(std::move(render)),
        collect_(std::move(collect)) {
    calls_->Started(&context_);
  }

  ~StreamCall() override {
    if (sse_) calls_->ReleaseStream();
    calls_->Ended(&context_);
  }

  grpc::ClientContext* context() { return &context_; }
  Req* request() { return &request_; }

  // After the stub's async()->Method(context(), request(), this). `opening` (an SSE comment)
  // is written once the service has admitted the stream (its initial metadata carries
  // kStreamOpenKey), before the first message, so the client sees the response head at
  // once; a stream refused before that (its user's cap) is a plain HTTP error. Reading
  // starts once the opening is on the socket.
  void Begin(std::string opening = "") {
    self_ = this->shared_from_this();
    if (sse_) {
      std::weak_ptr<StreamCall> weak = self_;
      out_->OnClose([weak] {
        if (auto call = weak.lock()) call->Abandon();
      });
    }
    this->AddHold();
    if (sse_ && !opening.empty()) {
      opening_ = std::move(opening);
    } else {
      reading_ = true;
      this->StartRead(&message_);
    }
    this->StartCall();
  }

  void OnReadInitialMetadataDone(bool ok) override {
    if (opening_.empty()) return;
    const auto& metadata = context_.GetServerInitialMetadata();
    const bool admitted = ok && metadata.find(kStreamOpenKey) != metadata.end();
    bool release = false, send = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!admitted || abandoned_) {
        release = TakeHoldLocked();  // OnDone then answers with the call's status
      } else {
        started_ = send = true;
      }
    }
    if (release) this->RemoveHold();
    if (!send) return;
    std::weak_ptr<StreamCall> weak = this->shared_from_this();
    out_->SendEvent(std::move(opening_), [weak](bool written) {
      if (auto call = weak.lock()) call->Written(written);
    });
  }

  void OnReadDone(bool ok) override {
    if (ok && !sse_) {
      collected_.push_back(render_(message_));
      this->StartRead(&message_);
      return;
    }
    std::string text = ok ? render_(message_) : "";
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (!ok || abandoned_) {
        release = TakeHoldLocked();
      } else {
        started_ = true;
      }
    }
    if (release) {
      this->RemoveHold();  // may run OnDone (and free this) inline
      return;
    }
    if (!ok) return;
    std::weak_ptr<StreamCall> weak = this->shared_from_this();
    out_->SendEvent(std::move(text), [weak](bool written) {
      if (auto call = weak.lock()) call->Written(written);
    });
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<StreamCall> keep = std::move(self_);
    if (!sse_) {
      out_->Reply(status.ok() ? collect_(std::move(collected_)) : GrpcError(status));
      return;
    }
    bool started, abandoned;
    {
      std::lock_guard<std::mutex> lock(mu_);
      started = started_;
      abandoned = abandoned_;
    }
    if (abandoned) return;  // the connection is closed or closing
    if (!started && !status.ok()) {
      out_->Reply(GrpcError(status));  // before any event: a plain HTTP error
      return;
    }
    if (!status.ok()) out_->SendEvent(SseError(status), [](bool) {});
    out_->EndStream();
  }

 private:
  // The previous event is on the socket (or the client is gone).
  void Written(bool ok) {
    bool read = false;
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) abandoned_ = true;
      if (abandoned_) {
        release = !reading_ && TakeHoldLocked();
      } else {
        reading_ = true;
        read = true;
      }
    }
    if (read) {
      this->StartRead(&message_);
      return;
    }
    context_.TryCancel();
    if (release) this->RemoveHold();
  }

  // The connection closed under the stream.
  void Abandon() {
    bool release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_ = true;
      release = !reading_ && TakeHoldLocked();
    }
    context_.TryCancel();  // a pending Read completes with ok = false and releases the hold
    if (release) this->RemoveHold();
  }

  bool TakeHoldLocked() {
    if (hold_released_) return false;
    hold_released_ = true;
    return true;
  }

  const std::shared_ptr<CallRegistry> calls_;
  const std::shared_ptr<Responder> out_;
  const bool sse_;
  const Render render_;
  const Collect collect_;
  grpc::ClientContext context_;
  std::string opening_;  // until the stream is admitted
  Req request_;
  Resp message_;  // the message being read; reused after its event is written
  std::vector<std::string> collected_;
  std::shared_ptr<StreamCall> self_;

  std::mutex mu_;
  bool reading_ = false;  // a Read is outstanding
  bool started_ = false;  // an event was handed to the connection
  bool abandoned_ = false;
  bool hold_released_ = false;
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_SSE_H_
