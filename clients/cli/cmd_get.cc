// `get jobs` (a page-following listing) and `get job ID`.
#include <algorithm>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "clients/cli/command.h"
#include "clients/cli/output.h"
#include "common/status_macros.h"
#include "jobspec/sweep.h"

namespace llamafleet::cli {
namespace {

constexpr int kServerMaxPageSize = 1000;

absl::StatusOr<v1::ListJobsRequest> MakeListRequest(const ListFlags& flags) {
  v1::ListJobsRequest request;
  for (const std::string& value : flags.states) {
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      v1::JobState state;
      const std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
      if (!v1::JobState_Parse(name, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
        return UsageError(absl::StrCat(
            "--state: '", part,
            "' is not one of queued, scheduled, running, succeeded, failed, cancelled, "
            "restarting, preempting"));
      }
      request.add_states(state);
    }
  }
  for (const std::string& label : flags.labels) {
    if (label.find('=') == std::string::npos || label.front() == '=') {
      return UsageError(absl::StrCat("--label expects key=value, got '", label, "'"));
    }
    request.add_labels(label);
  }
  if (!flags.sweep.empty()) request.add_labels(absl::StrCat(kSweepLabel, "=", flags.sweep));
  if (flags.limit < 1) return UsageError("--limit must be >= 1");
  if (flags.page_size < 0) return UsageError("--page-size must be >= 0");
  request.set_queue(flags.queue);
  request.set_owner(flags.owner);
  request.set_page_token(flags.page_token);
  return request;
}

}  // namespace

absl::StatusOr<v1::ListJobsResponse> ListPages(Client& client, v1::ListJobsRequest request,
                                               const ListFlags& flags) {
  v1::ListJobsResponse collected;
  while (true) {
    const int remaining = flags.all ? kServerMaxPageSize : flags.limit - collected.jobs_size();
    int page = std::min(remaining, kServerMaxPageSize);
    if (flags.page_size > 0) page = std::min(page, flags.page_size);
    request.set_page_size(page);
    LF_ASSIGN_OR_RETURN(v1::ListJobsResponse response, client.ListJobs(request));
    for (v1::Job& job : *response.mutable_jobs()) *collected.add_jobs() = std::move(job);
    collected.set_next_page_token(response.next_page_token());
    // An empty page with a token would loop forever; treat it as the end.
    if (response.next_page_token().empty() || response.jobs_size() == 0) return collected;
    if (!flags.all && collected.jobs_size() >= flags.limit) return collected;
    request.set_page_token(response.next_page_token());
  }
}

absl::Status RunGetJobs(const Context& ctx, const ListFlags& flags) {
  LF_ASSIGN_OR_RETURN(v1::ListJobsRequest request, MakeListRequest(flags));
  // The plain table needs only the summary; -o wide shows model and sharding, and
  // -o json/yaml print whole jobs.
  request.set_view(ctx.format == Format::kTable ? v1::JOB_VIEW_BASIC : v1::JOB_VIEW_FULL);
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::ListJobsResponse response, ListPages(*client, request, flags));
  if (PrintMachine(ctx, response)) return absl::OkStatus();
  if (response.jobs_size() == 0) {
    *ctx.out << "No jobs found.\n";
    return absl::OkStatus();
  }
  std::vector<v1::Job> jobs(response.jobs().begin(), response.jobs().end());
  const bool wide = ctx.format == Format::kWide;
  // The wide table's hours column says CPU-H on a cluster of CPU workers (as get usage).
  *ctx.out << JobsTable(jobs, wide, absl::Now(), wide ? WorkersDevice(*client) : Device::kGpu);
  if (!response.next_page_token().empty()) {
    // A note, not an error: the table itself is complete as requested.
    *ctx.err << "llamafleet: showing the newest " << response.jobs_size()
             << " jobs; more may exist (use --limit N or --all)\n";
  }
  return absl::OkStatus();
}

absl::Status RunGetJob(const Context& ctx, const std::string& id) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(id));
  if (PrintMachine(ctx, job)) return absl::OkStatus();
  const bool wide = ctx.format == Format::kWide;
  *ctx.out << JobsTable({job}, wide, absl::Now(), wide ? WorkersDevice(*client) : Device::kGpu);
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
