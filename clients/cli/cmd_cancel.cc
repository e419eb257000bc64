// `cancel ID` and `cancel --sweep NAME`.
#include <ostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/command.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "jobspec/sweep.h"

namespace llamafleet::cli {
namespace {

void PrintCancelled(const Context& ctx, const v1::CancelJobResponse& response) {
  // The server says "cancelled", or a full sentence ("job 7 is already SUCCEEDED").
  const std::string& message = response.message();
  if (absl::StartsWith(message, "job ")) {
    *ctx.out << message << "\n";
  } else {
    *ctx.out << "job " << response.job().id() << " " << message << "\n";
  }
}

}  // namespace

absl::Status RunCancel(const Context& ctx, const std::string& id, const std::string& reason) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason(reason);
  LF_ASSIGN_OR_RETURN(v1::CancelJobResponse response, client->CancelJob(request));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  PrintCancelled(ctx, response);
  return absl::OkStatus();
}

absl::Status RunCancelSweep(const Context& ctx, const std::string& sweep, const std::string& reason) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  // The caller's own sweep of that name, even for an admin: names are per user.
  LF_ASSIGN_OR_RETURN(v1::WhoAmIResponse me, client->WhoAmI());
  v1::ListJobsRequest list;
  list.add_labels(absl::StrCat(kSweepLabel, "=", sweep));
  list.set_owner(me.user());
  for (v1::JobState s : {v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::RESTARTING, v1::PREEMPTING}) list.add_states(s);
  ListFlags every;
  every.all = true;
  LF_ASSIGN_OR_RETURN(v1::ListJobsResponse listed, ListPages(*client, std::move(list), every));
  std::vector<std::string> ids;
  for (const v1::Job& job : listed.jobs()) ids.push_back(job.id());
  if (ids.empty()) {
    *ctx.out << "sweep " << sweep << ": no unfinished jobs of " << me.user() << "\n";
    return absl::OkStatus();
  }
  absl::Status first_error;
  for (const std::string& id : ids) {
    v1::CancelJobRequest request;
    request.set_job_id(id);
    request.set_reason(reason.empty() ? absl::StrCat("sweep ", sweep, " cancelled") : reason);
    absl::StatusOr<v1::CancelJobResponse> response = client->CancelJob(request);
    if (!response.ok()) {
      const std::string job = absl::StrCat("job ", id);
      // "job 9 not found" names the job already.
      *ctx.err << (absl::StartsWith(response.status().message(), job + " ") ? "" : job + ": ")
               << response.status().message() << "\n";
      if (first_error.ok()) first_error = response.status();
      continue;
    }
    if (!PrintMachine(ctx, *response)) PrintCancelled(ctx, *response);
  }
  return first_error;
}

}  // namespace llamafleet::cli
