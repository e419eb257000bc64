// `workers`, `queues` and `whoami`: the cluster and the caller as the coordinator sees them.
#include <algorithm>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "clients/cli/command.h"
#include "clients/cli/output.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunQueues(const Context& ctx) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListQueuesResponse response, client->ListQueues());
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  if (response.queues().empty()) {
    *ctx.out << "No queues: nothing queued or running, no quotas configured.\n";
    return absl::OkStatus();
  }
  *ctx.out << QueuesTable({response.queues().begin(), response.queues().end()}, absl::Now());
  return absl::OkStatus();
}

absl::Status RunWhoAmI(const Context& ctx) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::WhoAmIResponse response, client->WhoAmI());
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  std::string role = absl::AsciiStrToLower(v1::Role_Name(response.role()));
  *ctx.out << response.user() << " (" << role << ")"
           << (response.auth_enabled() ? "" : "; the coordinator runs without authentication")
           << "\n";
  return absl::OkStatus();
}

absl::Status RunWorkers(const Context& ctx) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListWorkersResponse response, client->ListWorkers());
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  if (response.workers().empty()) {
    *ctx.out << "No workers registered.\n";
    return absl::OkStatus();
  }
  std::vector<v1::WorkerInfo> workers(response.workers().begin(), response.workers().end());
  std::sort(workers.begin(), workers.end(),
            [](const v1::WorkerInfo& a, const v1::WorkerInfo& b) { return a.name() < b.name(); });
  *ctx.out << WorkersTable(workers, ctx.format == Format::kWide, absl::Now());
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
