#include "jobspec/grpc_status.h"

#include <string>
#include <vector>

#include "jobspec/jobspec.h"

namespace llamafleet {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const grpc::StatusCode code = static_cast<grpc::StatusCode>(status.code());
  const std::vector<v1::FieldViolation> violations = FieldViolationsOf(status);
  if (violations.empty()) return grpc::Status(code, std::string(status.message()));
  v1::ErrorDetails details;
  details.mutable_field_violations()->Add(violations.begin(), violations.end());
  return grpc::Status(code, std::string(status.message()), details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  v1::ErrorDetails details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) return out;
  return WithFieldViolations(std::move(out), {details.field_violations().begin(),
                                              details.field_violations().end()});
}

}  // namespace llamafleet
