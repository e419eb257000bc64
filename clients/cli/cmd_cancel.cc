// `cancel ID`.
#include <ostream>

#include "absl/strings/match.h"
#include "clients/cli/command.h"

namespace llamafleet::cli {

absl::Status RunCancel(const Context& ctx, const std::string& id, const std::string& reason) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason(reason);
  absl::StatusOr<v1::CancelJobResponse> response = (*client)->CancelJob(request);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  // The server says "cancelled", or a full sentence ("job 7 is already SUCCEEDED").
  const std::string& message = response->message();
  if (absl::StartsWith(message, "job ")) {
    *ctx.out << message << "\n";
  } else {
    *ctx.out << "job " << response->job().id() << " " << message << "\n";
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
