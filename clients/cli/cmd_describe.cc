// `describe job ID`: the job with its events, checkpoints and attempts.
#include <ostream>

#include "absl/time/clock.h"
#include "clients/cli/command.h"
#include "clients/cli/output.h"
#include "common/status_macros.h"

namespace llamafleet::cli {

absl::Status RunDescribeJob(const Context& ctx, const std::string& id) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  LF_ASSIGN_OR_RETURN(v1::Job job, client->GetJob(id));
  LF_ASSIGN_OR_RETURN(std::vector<v1::JobEvent> events, client->GetAllJobEvents(id));
  LF_ASSIGN_OR_RETURN(v1::ListCheckpointsResponse checkpoints, client->ListCheckpoints(id));
  v1::GetJobEventsResponse event_list;
  for (const v1::JobEvent& e : events) *event_list.add_events() = e;
  // No proto message holds a job with its events and checkpoints; compose the stable
  // renderings: {"job": Job, "events": [JobEvent], "checkpoints": [Checkpoint]}.
  if (ctx.format == Format::kJson) {
    std::string job_json = ToJson(job, /*pretty=*/false);
    std::string events_json = ToJson(event_list, /*pretty=*/false);
    std::string checkpoints_json = ToJson(checkpoints, /*pretty=*/false);
    job_json.pop_back();
    // Keep only the arrays of {"events":[...]} and {"checkpoints":[...]}.
    events_json = events_json.substr(events_json.find('['));
    events_json.resize(events_json.rfind(']') + 1);
    checkpoints_json = checkpoints_json.substr(checkpoints_json.find('['));
    checkpoints_json.resize(checkpoints_json.rfind(']') + 1);
    *ctx.out << "{\"job\":" << job_json << ",\"events\":" << events_json
             << ",\"checkpoints\":" << checkpoints_json << "}\n";
    return absl::OkStatus();
  }
  if (ctx.format == Format::kYaml) {
    *ctx.out << "job:\n" << Indent(ToYaml(job), 2);
    if (events.empty()) {
      *ctx.out << "events: []\n";
    } else {
      *ctx.out << ToYaml(event_list);
    }
    if (checkpoints.checkpoints().empty()) {
      *ctx.out << "checkpoints: []\n";
    } else {
      *ctx.out << ToYaml(checkpoints);
    }
    return absl::OkStatus();
  }
  const std::vector<v1::Checkpoint> checkpoint_list(checkpoints.checkpoints().begin(),
                                                    checkpoints.checkpoints().end());
  LF_ASSIGN_OR_RETURN(v1::ListAttemptsResponse attempts, client->ListAttempts(id));
  const std::vector<v1::Attempt> attempt_list(attempts.attempts().begin(),
                                              attempts.attempts().end());
  std::vector<v1::EvalPoint> evals;
  if (job.spec().data().eval_size() > 0) {
    // Each named set's latest loss; a coordinator that cannot say leaves them out.
    absl::StatusOr<v1::GetJobMetricsResponse> metrics = client->GetJobMetrics(id);
    if (metrics.ok()) evals.assign(metrics->evals().begin(), metrics->evals().end());
  }
  // The latest evaluation's samples; a coordinator that cannot say leaves them out.
  std::vector<v1::Sample> samples;
  if (absl::StatusOr<v1::ListSamplesResponse> latest = client->ListSamples(id, 0, true);
      latest.ok()) {
    samples.assign(latest->samples().begin(), latest->samples().end());
  }
  *ctx.out << DescribeJob(job, events, checkpoint_list, absl::Now(), attempt_list,
                          HeldDevice(*client, attempt_list), evals, samples);
  return absl::OkStatus();
}

}  // namespace llamafleet::cli
