#include "server/http/sse.h"

#include "absl/strings/str_cat.h"

namespace llamafleet::http {

std::string SseEvent(absl::string_view event, absl::string_view json, int64_t id) {
  return absl::StrCat(id > 0 ? absl::StrCat("id: ", id, "\n") : "", "event: ", event,
                      "\ndata: ", json, "\n\n");
}

std::string SseError(const grpc::Status& status) {
  std::string body = GrpcError(status).body();
  while (!body.empty() && body.back() == '\n') body.pop_back();
  return SseEvent("error", body);
}

}  // namespace llamafleet::http
