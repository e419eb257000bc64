// The helpers every command shares (command.h).
#include "clients/cli/command.h"

#include <ostream>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "google/protobuf/util/json_util.h"

namespace llamafleet::cli {
namespace {

// Marks a status as the user's mistake on the command line (exit 2, not 1).
constexpr char kUsagePayload[] = "llamafleet.dev/usage";
// Marks a status as "stopped by this signal" (Ctrl-C): exit 128+signal, nothing printed.
constexpr char kInterruptedPayload[] = "llamafleet.dev/interrupted";
// Carries the exit code of a job outcome (`wait`, `watch`).
constexpr char kOutcomePayload[] = "llamafleet.dev/exit-code";

}  // namespace

absl::Status JobOutcomeError(absl::StatusCode code, int exit_code, const std::string& message) {
  absl::Status status(code, message);
  status.SetPayload(kOutcomePayload, absl::Cord(absl::StrCat(exit_code)));
  return status;
}

int JobOutcomeExitCode(const absl::Status& status) {
  const auto payload = status.GetPayload(kOutcomePayload);
  int code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) return 0;
  return code;
}

absl::Status UsageError(const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::Status Interrupted(int signo) {
  absl::Status status = absl::CancelledError("interrupted");
  status.SetPayload(kInterruptedPayload, absl::Cord(absl::StrCat(signo)));
  return status;
}

int InterruptSignal(const absl::Status& status) {
  const auto payload = status.GetPayload(kInterruptedPayload);
  int signo = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &signo)) return 0;
  return signo;
}

absl::Status WithContext(const absl::Status& status, const std::string& context) {
  absl::Status out(status.code(), absl::StrCat(context, status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::StatusOr<absl::Duration> ParseDuration(const std::string& flag, const std::string& text) {
  double seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' is not a duration (e.g. 30s, 2m)"));
  }
  if (d <= absl::ZeroDuration()) return UsageError(absl::StrCat(flag, " must be > 0"));
  return d;
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  std::string json = MessageToJson(message, pretty);
  if (json.empty() || json.back() != '\n') json += "\n";
  return json;
}

std::string ToYaml(const google::protobuf::Message& message) {
  std::string yaml = MessageToYaml(message);
  if (yaml.empty() || yaml.back() != '\n') yaml += "\n";
  return yaml;
}

bool PrintMachine(const Context& ctx, const google::protobuf::Message& message) {
  if (ctx.format == Format::kJson) {
    *ctx.out << ToJson(message, /*pretty=*/true);
    return true;
  }
  if (ctx.format == Format::kYaml) {
    *ctx.out << ToYaml(message);
    return true;
  }
  return false;
}

// RunCli owns the client (see LeaveConnectionsOpenAtExit).
absl::StatusOr<Client*> Connect(const Context& ctx) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(ctx.client_options);
  if (!client.ok()) return UsageError(std::string(client.status().message()));
  ctx.clients->push_back(std::move(*client));
  return ctx.clients->back().get();
}

}  // namespace llamafleet::cli
