#ifndef LLAMAFLEET_JOBSPEC_GRPC_STATUS_H_
#define LLAMAFLEET_JOBSPEC_GRPC_STATUS_H_

// Statuses across gRPC: the code and message as they are, and the field violations
// (FieldViolationsOf, jobspec.h) as the status details, a serialized
// llamafleet.v1.ErrorDetails (grpc-status-details-bin).

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace llamafleet {

grpc::Status ToGrpcStatus(const absl::Status& status);
// Details that are not an ErrorDetails are dropped.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_GRPC_STATUS_H_
