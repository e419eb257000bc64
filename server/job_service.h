#ifndef LLAMAFLEET_SERVER_JOB_SERVICE_H_
#define LLAMAFLEET_SERVER_JOB_SERVICE_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "absl/base/thread_annotations.h"
#include "jobspec/grpc_status.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "server/auth.h"
#include "server/cluster/cluster_manager.h"
#include "server/job_paths_check.h"
#include "server/log_store.h"
#include "server/metrics.h"
#include "server/serial_executor.h"
#include "server/submit_policy.h"
#include "storage/job_store.h"
#include "storage/usage_store.h"

namespace llamafleet {

class StreamLimits;
class UserIdentities;

// JobService over the gRPC callback API. Validation happens here, before anything
// reaches the store; answers are sent from the store's commit callbacks, so a client
// hears "submitted" only once the job is durable. No reaction blocks on a write.
class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  // `store` and `auth` are not owned and must outlive the service. Without `auth`,
  // authentication is off (every caller an admin named by x-llamafleet-user).
  explicit JobServiceImpl(JobStore* store, const Authenticator* auth = nullptr);
  ~JobServiceImpl() override;

  // Optional parts, set before serving (not owned): where QUEUED jobs stand, and the
  // trainers' logs.
  void set_cluster_view(const ClusterView* cluster) { cluster_ = cluster; }
  void set_log_store(LogStore* logs) { logs_ = logs; }
  // GPU quotas per queue, shown by ListQueues.
  void set_queue_quotas(std::map<std::string, int64_t> quotas) { queue_quotas_ = std::move(quotas); }
  // Prices active attempts' usage as it is read, and is GetUsage's pricing (ended attempts
  // keep the price they ended with). Unset: nothing active is priced.
  void set_pricing(PriceTable pricing) { pricing_ = std::move(pricing); }
  // Path roots, queues, priority and active-job limits for submissions (submit_policy.h).
  // Unset: none of these checks (the coordinator always sets one).
  void set_submit_policy(SubmitPolicy policy) { policy_ = std::move(policy); }
  // Where submissions are counted (not owned; must outlive the service). Null: nowhere.
  void set_metrics(CoordinatorMetrics* metrics) { metrics_ = metrics; }
  // Gives each submitter a Unix identity before their first job is stored (not owned;
  // must outlive the service). Null: none.
  void set_user_identities(UserIdentities* identities) { identities_ = identities; }
  // What DeleteJob calls once the caller may delete the job (ClusterManager::DeleteJob).
  // Unset: DeleteJob is UNIMPLEMENTED.
  using JobDeleter = std::function<void(int64_t job_id, std::string export_dir,
                                        std::function<void(absl::StatusOr<std::vector<std::string>>)> done)>;
  void set_job_deleter(JobDeleter deleter) { deleter_ = std::move(deleter); }

  // Per-user caps and bounds on following streams (WatchJob, StreamJobLogs with follow);
  // not owned, must outlive the service. Unset: none.
  void set_stream_limits(StreamLimits* limits) { stream_limits_ = limits; }

  // Ends every open WatchJob stream with UNAVAILABLE; new watches are refused. Called
  // at shutdown, before the server waits for in-flight calls.
  void StopWatches();

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* SubmitJobs(grpc::CallbackServerContext* context,
                                       const v1::SubmitJobsRequest* request,
                                       v1::SubmitJobsResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const v1::DeleteJobRequest* request,
                                      v1::DeleteJobResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseDir(grpc::CallbackServerContext* context,
                                       const v1::ReleaseDirRequest* request,
                                       v1::ReleaseDirResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchJobResponse>* WatchJob(
      grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* GetJobEvents(grpc::CallbackServerContext* context,
                                         const v1::GetJobEventsRequest* request,
                                         v1::GetJobEventsResponse* response) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const v1::ListCheckpointsRequest* request,
                                            v1::ListCheckpointsResponse* response) override;
  grpc::ServerUnaryReactor* ListAttempts(grpc::CallbackServerContext* context,
                                         const v1::ListAttemptsRequest* request,
                                         v1::ListAttemptsResponse* response) override;
  // The readers GetJobMetrics allows (kRead, an existing job); INVALID_ARGUMENT for a
  // negative step.
  grpc::ServerUnaryReactor* ListSamples(grpc::CallbackServerContext* context,
                                        const v1::ListSamplesRequest* request,
                                        v1::ListSamplesResponse* response) override;
  grpc::ServerUnaryReactor* GetJobMetrics(grpc::CallbackServerContext* context,
                                          const v1::GetJobMetricsRequest* request,
                                          v1::GetJobMetricsResponse* response) override;
  grpc::ServerWriteReactor<v1::LogChunk>* StreamJobLogs(
      grpc::CallbackServerContext* context, const v1::StreamJobLogsRequest* request) override;
  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* context,
                                       const v1::ListQueuesRequest* request,
                                       v1::ListQueuesResponse* response) override;
  grpc::ServerUnaryReactor* WhoAmI(grpc::CallbackServerContext* context,
                                   const v1::WhoAmIRequest* request,
                                   v1::WhoAmIResponse* response) override;
  grpc::ServerUnaryReactor* GetUsage(grpc::CallbackServerContext* context,
                                     const v1::GetUsageRequest* request,
                                     v1::GetUsageResponse* response) override;

  class WatchReactor;
  class LogReactor;

 private:
  // Validates and stores a batch for `caller` (authenticated by the RPC, once); `respond`
  // gets one response per request. Refuses an empty or oversized batch at once; the rest
  // runs on submit_checks_ (CheckAndStore).
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context, const Principal& caller,
                                   std::vector<const v1::SubmitJobRequest*> requests,
                                   bool dry_run, bool batch,
                                   std::function<void(std::vector<v1::SubmitJobResponse>)> respond);
  // Expands sweeps, validates everything and hands the batch to the store (or answers a
  // dry run); finishes `reactor` with the first refusal, or once the store answered. On
  // submit_checks_ only. CANCELLED without any work when the call ended while it waited.
  void CheckAndStore(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                     const Principal& caller,
                     const std::vector<const v1::SubmitJobRequest*>& requests, bool dry_run,
                     bool batch, std::function<void(std::vector<v1::SubmitJobResponse>)> respond,
                     std::chrono::steady_clock::time_point received);

  // The id of a job the caller may read: UNAUTHENTICATED/PERMISSION_DENIED, INVALID_ARGUMENT
  // for a malformed id, NOT_FOUND for no such job.
  absl::StatusOr<int64_t> ReadableJob(const grpc::CallbackServerContext& context,
                                      const std::string& job_id) const;

  // Resolves the batch's depends_on references and templates (jobspec/dependencies.h),
  // reading the parents it names from the store; fills each input's batch_parents.
  absl::Status ResolveDependencies(const Principal& caller, std::vector<SubmitJobInput>* inputs) const;

  // The checks of a submission that look at the storage and the recorded claims
  // (job_claims.cc; they block on both, so they run on submit_checks_ only): no link in a
  // written directory (INVALID_ARGUMENT), CheckCheckpointReads, no clash with a claim that
  // keeps the submitter out and only directories the submitter's identity may claim
  // (FAILED_PRECONDITION; server/claim_judge.h), and, unless the policy turns it off, the
  // inputs and outputs as the storage has them (server/job_paths_check.h). Fills each
  // input's pending_claims, and `verdicts` (when given) with each input's storage verdict
  // (what was not checked, the tokenizer's vocabulary); left empty when the policy turns
  // the storage check off.
  absl::Status CheckStorage(const Principal& caller, std::vector<SubmitJobInput>* inputs,
                            std::vector<JobPathsVerdict>* verdicts = nullptr) const;
  // PERMISSION_DENIED unless `caller` may read what the spec's checkpoint.resume and
  // model.path name: a path inside another job's checkpoint directory (its default one, or
  // its own checkpoint.dir while that claim is real) is for that job's owner and admins
  // only.
  absl::Status CheckCheckpointReads(const Principal& caller, const v1::JobSpec& spec,
                                    const std::string& prefix) const;

  // The job `caller` may cancel or delete: its owner's, or any for an admin (who may is
  // fixed by the owner, which never changes once a job exists). A caller who may not
  // learns nothing more than a reader would: PERMISSION_DENIED, or the read's NOT_FOUND.
  absl::StatusOr<v1::Job> JobToChange(const Principal& caller, int64_t id) const;

  // Fills job.pending for a QUEUED job from the last scheduling pass.
  void AddPendingInfo(v1::Job* job) const;
  // Fills each job's usage (job_usage.cc): its ended attempts' and its active one's so far.
  absl::Status AddJobUsage(const std::vector<v1::Job*>& jobs) const;
  // Fills each queue's usage from the totals per user and queue.
  absl::Status AddQueueUsage(std::map<std::string, v1::Queue>* queues) const;

  JobStore* const store_;
  const std::unique_ptr<Authenticator> own_auth_;
  const Authenticator* const auth_;
  const ClusterView* cluster_ = nullptr;
  LogStore* logs_ = nullptr;
  std::map<std::string, int64_t> queue_quotas_;
  PriceTable pricing_;
  CoordinatorMetrics* metrics_ = nullptr;
  StreamLimits* stream_limits_ = nullptr;
  std::optional<SubmitPolicy> policy_;
  UserIdentities* identities_ = nullptr;
  JobDeleter deleter_;

  std::mutex watches_mu_;
  bool watches_stopped_ ABSL_GUARDED_BY(watches_mu_) = false;
  std::set<WatchReactor*> watches_ ABSL_GUARDED_BY(watches_mu_);

  // Where submissions are expanded and validated, one at a time: never on a gRPC thread,
  // which worker sessions need for their heartbeats, nor on the cluster loop or the
  // store's writer. Each submission's work is bounded (at most kMaxBatchSize jobs,
  // jobspec/sweep.h's bounds). Last: destroyed first, finishing what was queued while
  // everything it uses still exists.
  std::unique_ptr<SerialExecutor> submit_checks_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_JOB_SERVICE_H_
