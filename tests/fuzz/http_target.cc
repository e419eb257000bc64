// An HTTP request target as the gateway reads it: the path percent-decoded and matched
// against the route patterns, the query string parsed and read as each route reads it.
// Property: percent-encoding any bytes and decoding them gives the bytes back.
#include "fuzz_check.h"
#include "server/http/query.h"
#include "server/http/router.h"

using namespace llamafleet;

namespace {
// The route table's patterns (gateway.cc).
constexpr const char* kPatterns[] = {
    "/", "/healthz", "/metrics", "/ui", "/ui/{file...}", "/api/v1/config", "/api/v1/whoami",
    "/api/v1/jobs", "/api/v1/jobs:batch", "/api/v1/jobs/{id}", "/api/v1/jobs/{id}:cancel",
    "/api/v1/jobs/{id}/events", "/api/v1/jobs/{id}/logs", "/api/v1/jobs/{id}/metrics",
    "/api/v1/jobs/{id}/checkpoints", "/api/v1/jobs/{id}/attempts", "/api/v1/jobs/{id}/spec.yaml",
    "/api/v1/queues", "/api/v1/workers"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view target = fuzz::AbslText(data, size);
  const size_t q = target.find('?');
  absl::StatusOr<std::string> path = http::PercentDecode(target.substr(0, q), false);
  if (path.ok()) {
    for (const char* pattern : kPatterns) {
      http::PathParams params;
      if (http::MatchPattern(pattern, *path, &params)) {
        for (const auto& [name, value] : params) {
          FUZZ_CHECK(path->find(value) != std::string::npos, "parameter %s not in the path", name.c_str());
        }
      }
    }
  }
  if (q != std::string_view::npos) {
    absl::StatusOr<http::Query> query = http::Query::Parse(target.substr(q + 1));
    if (query.ok()) {
      (void)query->Only({"state", "queue", "owner", "label", "name", "order_by", "page_size", "page_token", "view"});
      int32_t i32 = 0;
      int64_t i64 = 0;
      bool b = false;
      (void)query->GetInt("page_size", &i32);
      (void)query->GetInt("after", &i64);
      (void)query->GetBool("follow", &b);
      (void)query->All("label");
      (void)http::ListJobsFromQuery(*query);
    }
  }
  std::string encoded;
  static const char* kHex = "0123456789ABCDEF";
  for (unsigned char c : target) {
    encoded.push_back('%');
    encoded.push_back(kHex[c >> 4]);
    encoded.push_back(kHex[c & 15]);
  }
  absl::StatusOr<std::string> decoded = http::PercentDecode(encoded, true);
  FUZZ_CHECK(decoded.ok() && *decoded == target, "%%-encoded input does not decode back");
  return 0;
}
