#include "server/http/query.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace llamafleet::http {

absl::StatusOr<std::string> PercentDecode(absl::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      int value;
      if (i + 2 >= in.size()) return absl::InvalidArgumentError("bad percent-encoding in the URL");
      const std::string hex(in.substr(i + 1, 2));
      if (!absl::ascii_isxdigit(hex[0]) || !absl::ascii_isxdigit(hex[1]) ||
          !absl::SimpleHexAtoi(hex, &value)) {
        return absl::InvalidArgumentError("bad percent-encoding in the URL");
      }
      out.push_back(static_cast<char>(value));
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

absl::StatusOr<Query> Query::Parse(absl::string_view query) {
  Query q;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    LF_ASSIGN_OR_RETURN(std::string key, PercentDecode(part.substr(0, eq), true));
    LF_ASSIGN_OR_RETURN(
        std::string value,
        PercentDecode(eq == absl::string_view::npos ? "" : part.substr(eq + 1), true));
    q.params_.emplace_back(std::move(key), std::move(value));
  }
  return q;
}

absl::Status Query::Only(const std::vector<std::string>& allowed) const {
  for (const auto& [key, value] : params_) {
    bool ok = false;
    for (const std::string& a : allowed) ok = ok || key == a;
    if (!ok) {
      return absl::InvalidArgumentError(
          allowed.empty()
              ? absl::StrCat("unknown query parameter \"", key, "\": this route takes none")
              : absl::StrCat("unknown query parameter \"", key, "\": this route takes ",
                             absl::StrJoin(allowed, ", ")));
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> Query::Get(absl::string_view key) const {
  std::optional<std::string> out;
  for (const auto& [k, v] : params_) {
    if (k == key) out = v;
  }
  return out;
}

std::vector<std::string> Query::All(absl::string_view key) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : params_) {
    if (k == key) out.push_back(v);
  }
  return out;
}

absl::Status Query::GetBool(absl::string_view key, bool* out) const {
  std::optional<std::string> v = Get(key);
  if (!v) return absl::OkStatus();
  if (*v == "" || *v == "true" || *v == "1") {
    *out = true;
  } else if (*v == "false" || *v == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", key, " must be true or false (got \"", *v, "\")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ListJobsRequest> ListJobsFromQuery(const Query& query) {
  v1::ListJobsRequest request;
  for (const std::string& value : query.All("state")) {
    for (absl::string_view name : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      v1::JobState state;
      if (!v1::JobState_Parse(absl::AsciiStrToUpper(name), &state)) {
        return absl::InvalidArgumentError(
            absl::StrCat("query parameter state: unknown state \"", name, "\""));
      }
      request.add_states(state);
    }
  }
  // view=basic (the default: what a list shows) or view=full (whole specs).
  const std::string view = absl::AsciiStrToUpper(query.Get("view").value_or(""));
  if (view == "FULL" || view == "JOB_VIEW_FULL") {
    request.set_view(v1::JOB_VIEW_FULL);
  } else if (view.empty() || view == "BASIC" || view == "JOB_VIEW_BASIC") {
    request.set_view(v1::JOB_VIEW_BASIC);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "query parameter view must be basic or full (got \"", *query.Get("view"), "\")"));
  }
  int32_t page_size = 0;
  LF_RETURN_IF_ERROR(query.GetInt("page_size", &page_size));
  request.set_page_size(page_size);
  request.set_queue(query.Get("queue").value_or(""));
  request.set_owner(query.Get("owner").value_or(""));
  for (const std::string& label : query.All("label")) request.add_labels(label);
  request.set_name_contains(query.Get("name").value_or(""));
  request.set_order_by(query.Get("order_by").value_or(""));
  request.set_page_token(query.Get("page_token").value_or(""));
  return request;
}

}  // namespace llamafleet::http
