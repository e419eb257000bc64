// `get usage [--user U]`: GPU time and cost per user and queue, all time (CPU time on a
// cluster of CPU workers only).
#include <map>
#include <ostream>

#include "clients/cli/command.h"
#include "clients/cli/usage_output.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunGetUsage(const Context& ctx, const std::string& user) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::GetUsageResponse response, client->GetUsage(user));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  const Device device = WorkersDevice(*client);
  const std::string held = device == Device::kCpu ? "CPU" : "GPU";
  if (response.rows().empty()) {
    *ctx.out << (user.empty() ? "No " + held + " time used yet.\n"
                              : "No " + held + " time used by " + user + " yet.\n");
  } else {
    *ctx.out << UsageTable({response.rows().begin(), response.rows().end()}, device);
  }
  const std::string prices = PricingLine({response.pricing().begin(), response.pricing().end()});
  *ctx.out << (prices.empty() ? "No prices configured (the coordinator's pricing): costs are not shown.\n"
                              : prices + "\n");
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
