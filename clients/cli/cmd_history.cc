// `checkpoints ID`, `attempts ID` and `samples ID`: what a job has recorded so far.
#include <ostream>

#include "clients/cli/command.h"
#include "clients/cli/output.h"
#include "clients/cli/sample_output.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunCheckpoints(const Context& ctx, const std::string& id) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListCheckpointsResponse response, client->ListCheckpoints(id));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  if (response.checkpoints().empty()) {
    *ctx.out << "No checkpoints recorded for job " << id << ".\n";
    return absl::OkStatus();
  }
  *ctx.out << CheckpointsTable({response.checkpoints().begin(), response.checkpoints().end()});
  return absl::OkStatus();
}

Device HeldDevice(Client& client, const std::vector<v1::Attempt>& attempts) {
  absl::StatusOr<v1::ListWorkersResponse> workers = client.ListWorkers();
  if (!workers.ok()) return Device::kGpu;
  return AttemptsDevice(attempts, {workers->workers().begin(), workers->workers().end()});
}

Device WorkersDevice(Client& client) {
  absl::StatusOr<v1::ListWorkersResponse> workers = client.ListWorkers();
  if (!workers.ok()) return Device::kGpu;
  return ClusterDevice({workers->workers().begin(), workers->workers().end()});
}

absl::Status RunAttempts(const Context& ctx, const std::string& id) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListAttemptsResponse response, client->ListAttempts(id));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  if (response.attempts().empty()) {
    *ctx.out << "Job " << id << " has not started yet.\n";
    return absl::OkStatus();
  }
  const std::vector<v1::Attempt> attempts(response.attempts().begin(), response.attempts().end());
  *ctx.out << AttemptsSection(attempts, HeldDevice(*client, attempts));
  return absl::OkStatus();
}

absl::Status RunSamples(const Context& ctx, const std::string& id, int64_t step, bool latest) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListSamplesResponse response, client->ListSamples(id, step, latest));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  *ctx.out << SamplesText(response);
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
