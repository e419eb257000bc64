#include "server/http/submission.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jobspec/jobspec.h"
#include "server/http/json_errors.h"

namespace llamafleet::http {

namespace bhttp = boost::beast::http;

BodyType TypeOf(const Request& http) {
  auto it = http.find(bhttp::field::content_type);
  if (it == http.end()) return http.body().empty() ? BodyType::kNone : BodyType::kOther;
  std::string type(it->value().data(), it->value().size());
  type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(type.substr(0, type.find(';'))));
  if (type == "application/json") return BodyType::kJson;
  if (type == "application/yaml" || type == "application/x-yaml" || type == "text/yaml") {
    return BodyType::kYaml;
  }
  return BodyType::kOther;
}

namespace {

// ParseJobDocuments reports each problem as "[document N: ]PATH: what" (jobspec.h), joined
// by "; ". A status without field violations of its own gets one per such problem, its
// path as the API names fields: "spec.PATH" for one job, "jobs[N-1].spec.PATH" in a batch.
absl::Status WithDocumentViolations(absl::Status status, bool batch) {
  if (status.ok() || !FieldViolationsOf(status).empty()) return status;
  auto is_path = [](absl::string_view p) {
    if (p.empty() || p == "document" || !(absl::ascii_isalpha(p[0]) || p[0] == '_')) return false;
    for (char c : p) {
      if (!absl::ascii_isalnum(c) && c != '_' && c != '.' && c != '-' && c != '[' && c != ']') {
        return false;
      }
    }
    return true;
  };
  std::vector<v1::FieldViolation> violations;
  for (absl::string_view problem : absl::StrSplit(status.message(), "; ")) {
    int document = 1;
    if (absl::ConsumePrefix(&problem, "document ")) {
      const size_t colon = problem.find(": ");
      if (colon == absl::string_view::npos ||
          !absl::SimpleAtoi(problem.substr(0, colon), &document) || document < 1) {
        continue;
      }
      problem.remove_prefix(colon + 2);
    }
    const size_t colon = problem.find(": ");
    if (colon == absl::string_view::npos || !is_path(problem.substr(0, colon))) continue;
    const absl::string_view path = problem.substr(0, colon);
    v1::FieldViolation v;
    v.set_field(batch ? absl::StrCat("jobs[", document - 1, "].spec.", path)
                      : absl::StrCat("spec.", path));
    v.set_description(std::string(problem.substr(colon + 2)));
    violations.push_back(std::move(v));
  }
  return violations.empty() ? status : WithFieldViolations(status, violations);
}

template <typename SubmitRequest>
std::optional<Response> Read(const Request& http, const Query& query, absl::string_view expected,
                             bool batch,
                             const std::function<absl::Status(std::vector<ParsedJob>)>& from_yaml,
                             SubmitRequest* request) {
  if (http.body().empty()) {
    return StatusError(
        absl::InvalidArgumentError(absl::StrCat("the request body is empty: send ", expected)));
  }
  absl::Status s;
  switch (TypeOf(http)) {
    case BodyType::kJson:
      s = FromJson(http.body(), request);
      break;
    case BodyType::kYaml: {
      absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(http.body());
      s = parsed.ok() ? from_yaml(std::move(*parsed))
                      : WithDocumentViolations(parsed.status(), batch);
      break;
    }
    default:
      return UnsupportedType(http, true);
  }
  if (s.ok()) {
    bool dry_run = request->dry_run();
    s = query.GetBool("dry_run", &dry_run);
    request->set_dry_run(dry_run);
  }
  if (!s.ok()) return StatusError(s);
  return std::nullopt;
}

}  // namespace

std::optional<Response> ReadSubmitJob(const Request& http, const Query& query,
                                      v1::SubmitJobRequest* request) {
  std::optional<Response> error = Read(
      http, query, "a SubmitJobRequest (JSON) or a job document (YAML)", /*batch=*/false,
      [request](std::vector<ParsedJob> parsed) -> absl::Status {
        if (parsed.size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the body holds ", parsed.size(), " job documents; POST them to /api/v1/jobs:batch"));
        }
        *request->mutable_spec() = std::move(parsed[0].spec);
        request->set_idempotency_key(parsed[0].idempotency_key);
        return absl::OkStatus();
      },
      request);
  if (error.has_value()) return error;
  if (std::optional<std::string> key = query.Get("idempotency_key")) {
    request->set_idempotency_key(*key);
  }
  return std::nullopt;
}

std::optional<Response> ReadSubmitJobs(const Request& http, const Query& query,
                                       v1::SubmitJobsRequest* request) {
  return Read(http, query, "a SubmitJobsRequest (JSON) or job documents (YAML)", /*batch=*/true,
              [request](std::vector<ParsedJob> parsed) -> absl::Status {
                for (ParsedJob& job : parsed) {
                  v1::SubmitJobRequest* item = request->add_jobs();
                  *item->mutable_spec() = std::move(job.spec);
                  item->set_idempotency_key(job.idempotency_key);
                }
                return absl::OkStatus();
              },
              request);
}

}  // namespace llamafleet::http
