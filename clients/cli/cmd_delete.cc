// `delete job ID [--artifacts]`.
#include <ostream>

#include "clients/cli/command.h"

namespace llamafleet::cli {

absl::Status RunDeleteJob(const Context& ctx, const std::string& id, bool artifacts) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  v1::DeleteJobRequest request;
  request.set_job_id(id);
  request.set_artifacts(artifacts);
  absl::StatusOr<v1::DeleteJobResponse> response = (*client)->DeleteJob(request);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  *ctx.out << "job " << id << " deleted\n";
  for (const std::string& line : response->removed()) *ctx.out << "  " << line << "\n";
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
