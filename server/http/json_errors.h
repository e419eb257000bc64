#ifndef LLAMAFLEET_SERVER_HTTP_JSON_ERRORS_H_
#define LLAMAFLEET_SERVER_HTTP_JSON_ERRORS_H_

// JSON bodies of the HTTP API and its one error shape:
//   {"error":{"code":C,"status":"S","message":"M","field_violations":[{"field","description"}]}}
// C is the HTTP status, S the gRPC code's name. Every error the gateway or the transport
// answers has this shape; field_violations names the fields at fault ([] when the error is
// not about a field).

#include <initializer_list>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/proto_text.h"
#include "llamafleet/v1/job.pb.h"
#include "server/http/responder.h"

namespace llamafleet::http {

Response ErrorResponse(int http_status, absl::string_view status, absl::string_view message,
                       const std::vector<v1::FieldViolation>& violations = {});

// The HTTP status for a gRPC code (INVALID_ARGUMENT 400, UNAUTHENTICATED 401, ...).
int HttpStatusFor(grpc::StatusCode code);

// A gRPC status as the error shape: FromGrpcStatus (jobspec/grpc_status.h), then StatusError.
Response GrpcError(const grpc::Status& status);
// An absl::Status as the error shape; its FieldViolationsOf payload (jobspec.h) becomes
// field_violations.
Response StatusError(const absl::Status& status);
Response NotFound(absl::string_view path);
// 405 with an Allow header listing `allowed`.
Response MethodNotAllowed(const Request& http, const std::vector<std::string>& allowed);
// 415 naming the Content-Type received and the ones accepted.
Response UnsupportedType(const Request& http, bool yaml_too);

Response JsonResponse(const google::protobuf::Message& message,
                      boost::beast::http::status status = boost::beast::http::status::ok);
// `body` with its Content-Type.
Response BodyResponse(boost::beast::http::status status, absl::string_view content_type,
                      std::string body);
// Strict: unknown fields are refused, each named in the status's field violations by its
// path in the body ("spec.trainin", "jobs[1].spec.x"). A body of more than kMaxYamlNodes
// JSON values (jobspec.h) is refused before anything is built from it.
absl::Status FromJson(absl::string_view body, google::protobuf::Message* message);

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_JSON_ERRORS_H_
