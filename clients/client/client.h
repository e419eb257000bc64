#ifndef LLAMAFLEET_CLIENTS_CLIENT_CLIENT_H_
#define LLAMAFLEET_CLIENTS_CLIENT_CLIENT_H_

// A small synchronous client for the coordinator's JobService (and the read-only part of
// its WorkerService).
//
// It owns the channel and the caller's identity, and converts every gRPC outcome into an
// absl::Status once, here, so callers (the CLI, scripts, tests) deal in one error type.
// A coordinator that cannot be reached is reported as UNAVAILABLE whose message starts
// with "cannot reach coordinator at HOST:PORT"; every other error keeps the server's
// code and message unchanged.

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"

namespace llamafleet {

struct ClientOptions {
  // Coordinator address, HOST:PORT.
  std::string address = "127.0.0.1:7070";
  // Sent as x-llamafleet-user metadata when non-empty; names the caller only on a
  // coordinator running with --insecure-no-auth (tokens name callers otherwise).
  std::string user;
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string token;
  // PEM file of the CA that signed the coordinator's certificate: the channel uses TLS
  // (the coordinator was started with --tls-cert/--tls-key). Empty: plaintext.
  std::string tls_ca_file;
  // Deadline of each unary call. Watches take their own deadline.
  absl::Duration timeout = absl::Seconds(30);
};

class Client {
 public:
  // Creates the channel; connecting happens lazily on the first call, so this fails
  // only on a malformed address (INVALID_ARGUMENT): HOST:PORT or a gRPC target URI.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& address() const { return options_.address; }

  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::SubmitJobsResponse> SubmitJobs(const v1::SubmitJobsRequest& request);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  absl::StatusOr<v1::CancelJobResponse> CancelJob(const v1::CancelJobRequest& request);
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request);
  absl::StatusOr<v1::ReleaseDirResponse> ReleaseDir(const v1::ReleaseDirRequest& request);
  // All events of a job after `after_seq`, following the server's per-call limit.
  absl::StatusOr<std::vector<v1::JobEvent>> GetAllJobEvents(const std::string& job_id,
                                                            int64_t after_seq = 0);

  // Streams WatchJob, calling `on_message` for each message in order. Returns OK when
  // the server ends the stream normally (the job became terminal); DEADLINE_EXCEEDED at
  // `deadline`. If `on_message` returns an error the watch is cancelled and that error
  // returned. UNAVAILABLE or CANCELLED (coordinator gone or restarting) is worth
  // resuming from the last event seen: WatchJobRequest.after_seq.
  absl::Status WatchJob(const v1::WatchJobRequest& request,
                        const std::function<absl::Status(const v1::WatchJobResponse&)>& on_message,
                        absl::Time deadline = absl::InfiniteFuture());

  // Recorded checkpoints of a job, newest first.
  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(const std::string& job_id);
  // Every attempt of a job, newest first, with its tasks, gang size and resize.
  absl::StatusOr<v1::ListAttemptsResponse> ListAttempts(const std::string& job_id);
  // A job's metrics history, oldest first, at most `max_points` (0 = the server's default).
  absl::StatusOr<v1::GetJobMetricsResponse> GetJobMetrics(const std::string& job_id,
                                                          int max_points = 0);
  // The samples of a job's evaluations (eval.samples): every step (step 0), one step, or
  // the latest step that has any; `steps` lists every step that has samples.
  absl::StatusOr<v1::ListSamplesResponse> ListSamples(const std::string& job_id, int64_t step = 0,
                                                      bool latest = false);
  // Every registered worker, live or lost.
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers();
  // Queues: depth, running jobs, GPUs in use and quota.
  absl::StatusOr<v1::ListQueuesResponse> ListQueues();
  // The user and role the caller's token names.
  absl::StatusOr<v1::WhoAmIResponse> WhoAmI();
  // GPU time and cost per user and queue ("" = every user), and the coordinator's pricing.
  absl::StatusOr<v1::GetUsageResponse> GetUsage(const std::string& user);

  // Streams StreamJobLogs, calling `on_chunk` for each chunk in order. Returns OK when the
  // server ends the stream (the logs are read to their end; with follow, once the job is
  // terminal); otherwise as WatchJob.
  absl::Status StreamJobLogs(const v1::StreamJobLogsRequest& request,
                             const std::function<absl::Status(const v1::LogChunk&)>& on_chunk,
                             absl::Time deadline = absl::InfiniteFuture());

  // Cancels the streams in progress (WatchJob, StreamJobLogs) and every one started later;
  // each returns CANCELLED with the message "interrupted". Thread-safe and non-blocking,
  // so a signal watcher thread may call it (never a signal handler itself).
  void CancelStreams();

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);

  // Metadata and deadline for one call.
  void Prepare(grpc::ClientContext* context, absl::Time deadline) const;
  // The one place a grpc::Status becomes an absl::Status.
  absl::Status Convert(const grpc::Status& status, absl::Duration timeout) const;

  // Registers a stream's context so CancelStreams reaches it; false once cancelled (the
  // caller must not start the stream then).
  bool AddStream(grpc::ClientContext* context);
  void RemoveStream(grpc::ClientContext* context);

  using JobStub = v1::JobService::Stub;
  template <typename Stub, typename Req, typename Resp>
  using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Req&, Resp*);
  template <typename Req, typename Message>
  using StreamMethod =
      std::unique_ptr<grpc::ClientReader<Message>> (JobStub::*)(grpc::ClientContext*, const Req&);

  // One unary call, with the caller's identity and the --timeout deadline.
  template <typename Stub, typename Req, typename Resp>
  absl::StatusOr<Resp> Call(Stub* stub, UnaryMethod<Stub, Req, Resp> method, const Req& request);
  // One server stream read to its end (registered for CancelStreams), cancelled if
  // `on_message` fails.
  template <typename Req, typename Message>
  absl::Status Stream(StreamMethod<Req, Message> method, const Req& request,
                      const std::function<absl::Status(const Message&)>& on_message,
                      absl::Time deadline);

  // Constant after construction.
  const ClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::JobService::Stub> stub_;
  const std::unique_ptr<v1::WorkerService::Stub> worker_stub_;

  std::mutex mu_;
  bool streams_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_CLIENTS_CLIENT_CLIENT_H_
