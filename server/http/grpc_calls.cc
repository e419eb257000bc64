#include "server/http/grpc_calls.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/auth_failures.h"

namespace llamafleet::http {

void CallRegistry::Started(grpc::ClientContext* context) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  contexts_.insert(context);
  calls_.store(static_cast<int>(contexts_.size()));
  if (stopped_) context->TryCancel();  // before the call starts: it starts cancelled
}

void CallRegistry::Ended(grpc::ClientContext* context) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  contexts_.erase(context);
  calls_.store(static_cast<int>(contexts_.size()));
}

void CallRegistry::CancelAll() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stopped_ = true;
  // A cancelled call's callback may run inline and end (unregister) any call, so look the
  // next one up again after each cancel instead of walking a copy.
  std::set<grpc::ClientContext*> cancelled;
  for (;;) {
    grpc::ClientContext* next = nullptr;
    for (grpc::ClientContext* c : contexts_) {
      if (!cancelled.count(c)) {
        next = c;
        break;
      }
    }
    if (next == nullptr) break;
    cancelled.insert(next);
    next->TryCancel();
  }
}

bool CallRegistry::AcquireStream() {
  if (streams_.fetch_add(1) >= max_event_streams_) {
    streams_.fetch_sub(1);
    return false;
  }
  return true;
}

absl::Status ForwardCredentials(const Request& http, grpc::ClientContext* context) {
  static const absl::string_view kForwarded[] = {"authorization", "x-llamafleet-user", kForwardedPeerKey,
                                                 kForwardedPeerProofKey};
  for (absl::string_view header : kForwarded) {
    auto it = http.find(boost::beast::string_view(header.data(), header.size()));
    if (it == http.end()) continue;
    const absl::string_view value(it->value().data(), it->value().size());
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat("header ", header, " holds characters outside printable ASCII"));
      }
    }
    context->AddMetadata(std::string(header), std::string(value));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::http
