// `delete job ID [--artifacts]`.
#include <ostream>

#include "clients/cli/command.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunDeleteJob(const Context& ctx, const std::string& id, bool artifacts) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  v1::DeleteJobRequest request;
  request.set_job_id(id);
  request.set_artifacts(artifacts);
  LF_ASSIGN_OR_RETURN(v1::DeleteJobResponse response, client->DeleteJob(request));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  *ctx.out << "job " << id << " deleted\n";
  for (const std::string& line : response.removed()) *ctx.out << "  " << line << "\n";
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
