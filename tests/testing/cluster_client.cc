#include "tests/testing/cluster_client.h"

#include "absl/time/clock.h"
#include "jobspec/jobspec.h"

namespace llamafleet::testing {

ClusterClient::ClusterClient(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  jobs_ = v1::JobService::NewStub(channel);
  workers_ = v1::WorkerService::NewStub(channel);
}

absl::StatusOr<std::string> ClusterClient::Submit(const std::string& yaml) {
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(yaml);
  if (!parsed.ok()) return parsed.status();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = (*parsed)[0].spec;
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
  const absl::Time deadline = absl::Now() + timeout;
  v1::Job job = Get(id);
  while (!done(job) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    job = Get(id);
  }
  return job;
}

bool ClusterClient::WaitForWorkerState(const std::string& name, v1::WorkerState state,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    auto workers = Workers();
    if (auto it = workers.find(name); it != workers.end() && it->second.state() == state)
      return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace llamafleet::testing
