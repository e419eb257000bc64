#ifndef LLAMAFLEET_TESTS_TESTING_CLUSTER_CLIENT_H_
#define LLAMAFLEET_TESTS_TESTING_CLUSTER_CLIENT_H_

// The calls end-to-end tests make on a coordinator started without authentication
// (cluster.h): submit a job from YAML, read jobs, attempts and workers, and wait for a job
// or a worker to reach a state.

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"

namespace llamafleet::testing {

class ClusterClient {
 public:
  explicit ClusterClient(const std::string& address);

  // One job from its YAML; its id.
  absl::StatusOr<std::string> Submit(const std::string& yaml);
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  // The job as the cancellation left it.
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // The job as GetJob answers (empty when the call fails).
  v1::Job Get(const std::string& id);
  // Newest first.
  std::vector<v1::Attempt> Attempts(const std::string& id);
  // Oldest first.
  std::vector<v1::JobEvent> Events(const std::string& id);
  std::vector<v1::Checkpoint> Checkpoints(const std::string& id);
  std::map<std::string, v1::WorkerInfo> Workers();
  // Workers shown READY.
  size_t ReadyWorkers();

  // Reads the job every 50 ms until `done` holds or `timeout` passes; the last job read.
  v1::Job WaitFor(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  absl::Duration timeout);
  bool WaitForWorkerState(const std::string& name, v1::WorkerState state, absl::Duration timeout);

 private:
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_CLUSTER_CLIENT_H_
