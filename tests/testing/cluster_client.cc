#include "tests/testing/cluster_client.h"

#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "tests/testing/wait.h"

namespace llamafleet::testing {

ClusterClient::ClusterClient(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  jobs_ = v1::JobService::NewStub(channel);
  workers_ = v1::WorkerService::NewStub(channel);
}

absl::StatusOr<std::string> ClusterClient::Submit(const std::string& yaml) {
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(yaml);
  if (!parsed.ok()) return parsed.status();
  return Submit((*parsed)[0].spec);
}

absl::StatusOr<std::string> ClusterClient::Submit(const v1::JobSpec& spec) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return resp.job().id();
}

v1::Job ClusterClient::Get(const std::string& id) {
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  grpc::ClientContext ctx;
  (void)jobs_->GetJob(&ctx, req, &job);
  return job;
}

std::vector<v1::Attempt> ClusterClient::Attempts(const std::string& id) {
  v1::ListAttemptsRequest req;
  req.set_job_id(id);
  v1::ListAttemptsResponse resp;
  grpc::ClientContext ctx;
  (void)jobs_->ListAttempts(&ctx, req, &resp);
  return {resp.attempts().begin(), resp.attempts().end()};
}

absl::StatusOr<v1::Job> ClusterClient::Cancel(const std::string& id) {
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::CancelJobResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = jobs_->CancelJob(&ctx, req, &resp);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return resp.job();
}

std::vector<v1::JobEvent> ClusterClient::Events(const std::string& id) {
  v1::GetJobEventsRequest req;
  req.set_job_id(id);
  v1::GetJobEventsResponse resp;
  grpc::ClientContext ctx;
  (void)jobs_->GetJobEvents(&ctx, req, &resp);
  return {resp.events().begin(), resp.events().end()};
}

std::vector<v1::Checkpoint> ClusterClient::Checkpoints(const std::string& id) {
  v1::ListCheckpointsRequest req;
  req.set_job_id(id);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  (void)jobs_->ListCheckpoints(&ctx, req, &resp);
  return {resp.checkpoints().begin(), resp.checkpoints().end()};
}

size_t ClusterClient::ReadyWorkers() {
  size_t ready = 0;
  for (const auto& [name, w] : Workers()) ready += w.state() == v1::WORKER_READY;
  return ready;
}

std::map<std::string, v1::WorkerInfo> ClusterClient::Workers() {
  v1::ListWorkersResponse resp;
  grpc::ClientContext ctx;
  std::map<std::string, v1::WorkerInfo> out;
  if (workers_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) {
    for (const v1::WorkerInfo& w : resp.workers()) out[w.name()] = w;
  }
  return out;
}

v1::Job ClusterClient::WaitFor(const std::string& id,
                               const std::function<bool(const v1::Job&)>& done,
                               absl::Duration timeout) {
  v1::Job job;
  testing::WaitFor([&] { return done(job = Get(id)); }, timeout, absl::Milliseconds(50));
  return job;
}

bool ClusterClient::WaitForWorkerState(const std::string& name, v1::WorkerState state,
                                       absl::Duration timeout) {
  return testing::WaitFor(
      [&] {
        auto workers = Workers();
        auto it = workers.find(name);
        return it != workers.end() && it->second.state() == state;
      },
      timeout, absl::Milliseconds(50));
}

}  // namespace llamafleet::testing
