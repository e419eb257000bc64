#ifndef LLAMAFLEET_SERVER_HTTP_QUERY_H_
#define LLAMAFLEET_SERVER_HTTP_QUERY_H_

// URL decoding and the query strings of the HTTP API. Every route names the parameters it
// takes (the route table, gateway.cc), and an unknown one is an error: a typo must not
// silently widen a filter.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::http {

// %XX decoding; `plus_is_space` for query strings (application/x-www-form-urlencoded).
absl::StatusOr<std::string> PercentDecode(absl::string_view in, bool plus_is_space);

class Query {
 public:
  // "a=1&b=x%20y" (without the '?').
  static absl::StatusOr<Query> Parse(absl::string_view query);

  // INVALID_ARGUMENT naming the first parameter not in `allowed`.
  absl::Status Only(const std::vector<std::string>& allowed) const;

  // The last value given for `key`.
  std::optional<std::string> Get(absl::string_view key) const;
  // Every value given for `key`, in order.
  std::vector<std::string> All(absl::string_view key) const;

  // Leave *out as it is when `key` is absent; INVALID_ARGUMENT for a malformed value.
  template <typename Int>
  absl::Status GetInt(absl::string_view key, Int* out) const {
    std::optional<std::string> v = Get(key);
    if (!v) return absl::OkStatus();
    int64_t n;
    if (!absl::SimpleAtoi(*v, &n) || n < std::numeric_limits<Int>::min() ||
        n > std::numeric_limits<Int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter ", key, " must be an integer (got \"", *v, "\")"));
    }
    *out = static_cast<Int>(n);
    return absl::OkStatus();
  }
  // "", "true", "1" → true; "false", "0" → false.
  absl::Status GetBool(absl::string_view key, bool* out) const;

 private:
  std::vector<std::pair<std::string, std::string>> params_;
};

// GET /api/v1/jobs: state=A&state=B (or state=A,B), queue, owner, label (repeatable),
// name, order_by, page_size, page_token, view=basic|full.
absl::StatusOr<v1::ListJobsRequest> ListJobsFromQuery(const Query& query);

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_QUERY_H_
