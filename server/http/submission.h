#ifndef LLAMAFLEET_SERVER_HTTP_SUBMISSION_H_
#define LLAMAFLEET_SERVER_HTTP_SUBMISSION_H_

// The bodies of POST /api/v1/jobs and /api/v1/jobs:batch: JSON (the request message
// itself) or YAML job documents, parsed exactly as `llamafleet submit -f` parses them
// (spec and derived idempotency key); then the query's dry_run (and idempotency_key for
// one job), which override the body. The caller's permission to submit is checked before
// the body is read (Gateway::Authenticate), so only a caller who may submit gets a body
// parsed.

#include <optional>
#include <vector>

#include <grpcpp/support/status.h>

#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.pb.h"
#include "server/http/query.h"
#include "server/http/responder.h"

namespace llamafleet::http {

enum class BodyType { kNone, kJson, kYaml, kOther };

// From Content-Type: application/json; application/yaml, application/x-yaml, text/yaml.
BodyType TypeOf(const Request& http);

// nullopt with `request` ready to send, or the error to answer (400 with the fields at
// fault in field_violations, 415 for another Content-Type). For a YAML body `positions`
// gets where each document's fields are written (one entry per job); for JSON, nothing.
std::optional<Response> ReadSubmitJob(const Request& http, const Query& query,
                                      v1::SubmitJobRequest* request,
                                      std::vector<FieldPositions>* positions);
std::optional<Response> ReadSubmitJobs(const Request& http, const Query& query,
                                       v1::SubmitJobsRequest* request,
                                       std::vector<FieldPositions>* positions);

// The job service's refusal of a submission read by the functions above: its field
// violations ("spec.F" for one job, "jobs[N].spec.F" in a batch) get the line and column
// of F in the document that wrote it.
Response SubmitError(const grpc::Status& status, const std::vector<FieldPositions>& positions,
                     bool batch);

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_SUBMISSION_H_
