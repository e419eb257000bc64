// `release-dir PATH`.
#include <ostream>

#include "clients/cli/command.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunReleaseDir(const Context& ctx, const std::string& path) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  v1::ReleaseDirRequest request;
  request.set_path(path);
  LF_ASSIGN_OR_RETURN(v1::ReleaseDirResponse response, client->ReleaseDir(request));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  for (const std::string& line : response.released()) *ctx.out << line << " released\n";
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
