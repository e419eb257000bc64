// `release-dir PATH`.
#include <ostream>

#include "clients/cli/command.h"

namespace llamafleet::cli {

absl::Status RunReleaseDir(const Context& ctx, const std::string& path) {
  absl::StatusOr<Client*> client = Connect(ctx);
  if (!client.ok()) return client.status();
  v1::ReleaseDirRequest request;
  request.set_path(path);
  absl::StatusOr<v1::ReleaseDirResponse> response = (*client)->ReleaseDir(request);
  if (!response.ok()) return response.status();
  if (PrintMachine(ctx, *response)) return absl::OkStatus();
  for (const std::string& line : response->released()) *ctx.out << line << " released\n";
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
