#include "server/http/submission.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "jobspec/grpc_status.h"
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
// by "; ", with one field violation per problem in the same order, its field the path
// inside its document and its line in the file. The API names fields from the request:
// "spec.PATH" for one job, "jobs[N-1].spec.PATH" in a batch; the document number comes
// from the message.
absl::Status WithRequestPaths(absl::Status status, bool batch) {
  std::vector<LocatedFieldViolation> located = LocatedFieldViolationsOf(status);
  const std::vector<absl::string_view> problems = absl::StrSplit(status.message(), "; ");
  if (located.empty() || located.size() != problems.size()) return status;
  for (size_t i = 0; i < located.size(); ++i) {
    absl::string_view problem = problems[i];
    int document = 1;
    if (absl::ConsumePrefix(&problem, "document ")) {
      const size_t colon = problem.find(": ");
      if (colon == absl::string_view::npos ||
          !absl::SimpleAtoi(problem.substr(0, colon), &document) || document < 1) {
        return status;
      }
    }
    v1::FieldViolation& v = located[i].violation;
    v.set_field(batch ? absl::StrCat("jobs[", document - 1, "].spec.", v.field())
                      : absl::StrCat("spec.", v.field()));
  }
  return WithLocatedFieldViolations(std::move(status), located);
}

template <typename SubmitRequest>
std::optional<Response> Read(const Request& http, const Query& query, absl::string_view expected,
                             bool batch,
                             const std::function<absl::Status(std::vector<ParsedJob>)>& from_yaml,
                             SubmitRequest* request, std::vector<FieldPositions>* positions) {
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
      if (!parsed.ok()) {
        s = WithRequestPaths(parsed.status(), batch);
        break;
      }
      for (const ParsedJob& job : *parsed) positions->push_back(job.positions);
      s = from_yaml(std::move(*parsed));
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
                                      v1::SubmitJobRequest* request,
                                      std::vector<FieldPositions>* positions) {
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
      request, positions);
  if (error.has_value()) return error;
  if (std::optional<std::string> key = query.Get("idempotency_key")) {
    request->set_idempotency_key(*key);
  }
  if (std::optional<std::string> from = query.Get("derived_from")) request->set_derived_from(*from);
  return std::nullopt;
}

std::optional<Response> ReadSubmitJobs(const Request& http, const Query& query,
                                       v1::SubmitJobsRequest* request,
                                       std::vector<FieldPositions>* positions) {
  return Read(http, query, "a SubmitJobsRequest (JSON) or job documents (YAML)", /*batch=*/true,
              [request](std::vector<ParsedJob> parsed) -> absl::Status {
                for (ParsedJob& job : parsed) {
                  v1::SubmitJobRequest* item = request->add_jobs();
                  *item->mutable_spec() = std::move(job.spec);
                  item->set_idempotency_key(job.idempotency_key);
                }
                return absl::OkStatus();
              },
              request, positions);
}

Response SubmitError(const grpc::Status& status, const std::vector<FieldPositions>& positions,
                     bool batch) {
  absl::Status s = FromGrpcStatus(status);
  for (size_t i = 0; i < positions.size(); ++i) {
    s = LocateFieldViolations(std::move(s), positions[i],
                              batch ? absl::StrCat("jobs[", i, "].spec.") : "spec.");
  }
  return StatusError(s);
}

}  // namespace llamafleet::http
