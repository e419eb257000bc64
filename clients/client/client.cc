#include "clients/client/client.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "jobspec/grpc_status.h"

namespace llamafleet {
namespace {

// Generous: a page of 1000 jobs with full specs is about a megabyte.
constexpr int kMaxReceiveBytes = 64 << 20;
// GetJobEvents answers at most this many per call; fewer means we have them all.
constexpr int kEventsPerCall = 1000;

bool HasWhitespace(const std::string& s) {
  for (char c : s) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

// HOST:PORT, or a gRPC target URI (unix:/path, dns:///host:port). Without a port gRPC
// would silently try 443, which is never the coordinator.
bool IsAddress(const std::string& address) {
  if (address.empty() || HasWhitespace(address)) return false;
  if (absl::StartsWith(address, "unix:") || absl::StrContains(address, "://")) return true;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  for (size_t i = colon + 1; i < address.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(address[i]))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (!IsAddress(options.address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator address must be HOST:PORT, got '", options.address, "'"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  // A restarted coordinator is back within seconds; gRPC's default backoff (1s growing
  // to 120s) would keep a resuming watch waiting far longer than the restart took.
  // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC takes it as the shortest time a
  // connection attempt is given (default 20 s), and at 200 ms a busy coordinator that
  // sent its SETTINGS frame late failed every command with "cannot reach coordinator".
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file, std::ios::binary);
    std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-ca ", options.tls_ca_file, ": cannot read"));
    }
    if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-ca ", options.tls_ca_file, ": no PEM certificate in it"));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem;
    credentials = grpc::SslCredentials(ssl);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, credentials, args);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::JobService::NewStub(channel_)),
      worker_stub_(v1::WorkerService::NewStub(channel_)) {}

void Client::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  if (!options_.user.empty()) context->AddMetadata("x-llamafleet-user", options_.user);
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
}

absl::Status Client::Convert(const grpc::Status& status, absl::Duration timeout) const {
  if (status.ok()) return absl::OkStatus();
  // Transport failures say nothing about the job; name the address so a wrong
  // --coordinator is obvious. The channel state tells a refused or unresolvable address
  // apart from a coordinator that answered UNAVAILABLE itself (e.g. shutting down).
  const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/false);
  const bool never_connected = state != GRPC_CHANNEL_READY;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && never_connected) {
    return absl::UnavailableError(absl::StrCat("cannot reach coordinator at ", options_.address,
                                               ": ", status.error_message()));
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        never_connected ? "cannot reach coordinator at " : "no answer from coordinator at ",
        options_.address, " within ", absl::FormatDuration(timeout), " (--timeout)"));
  }
  if (status.error_message().empty()) {
    const auto code = static_cast<absl::StatusCode>(status.error_code());
    return absl::Status(code, absl::StatusCodeToString(code));
  }
  return FromGrpcStatus(status);  // with the coordinator's field violations
}

template <typename Stub, typename Req, typename Resp>
absl::StatusOr<Resp> Client::Call(Stub* stub, UnaryMethod<Stub, Req, Resp> method,
                                  const Req& request) {
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + options_.timeout);
  Resp response;
  LF_RETURN_IF_ERROR(Convert((stub->*method)(&context, request, &response), options_.timeout));
  return response;
}

absl::StatusOr<v1::SubmitJobResponse> Client::SubmitJob(const v1::SubmitJobRequest& request) {
  return Call(stub_.get(), &JobStub::SubmitJob, request);
}

absl::StatusOr<v1::SubmitJobsResponse> Client::SubmitJobs(const v1::SubmitJobsRequest& request) {
  return Call(stub_.get(), &JobStub::SubmitJobs, request);
}

absl::StatusOr<v1::Job> Client::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Call(stub_.get(), &JobStub::GetJob, request);
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(const v1::ListJobsRequest& request) {
  return Call(stub_.get(), &JobStub::ListJobs, request);
}

absl::StatusOr<v1::CancelJobResponse> Client::CancelJob(const v1::CancelJobRequest& request) {
  return Call(stub_.get(), &JobStub::CancelJob, request);
}

absl::StatusOr<v1::DeleteJobResponse> Client::DeleteJob(const v1::DeleteJobRequest& request) {
  return Call(stub_.get(), &JobStub::DeleteJob, request);
}

absl::StatusOr<v1::ReleaseDirResponse> Client::ReleaseDir(const v1::ReleaseDirRequest& request) {
  return Call(stub_.get(), &JobStub::ReleaseDir, request);
}

absl::StatusOr<std::vector<v1::JobEvent>> Client::GetAllJobEvents(const std::string& job_id,
                                                                  int64_t after_seq) {
  std::vector<v1::JobEvent> events;
  while (true) {
    v1::GetJobEventsRequest request;
    request.set_job_id(job_id);
    request.set_after_seq(after_seq);
    request.set_limit(kEventsPerCall);
    LF_ASSIGN_OR_RETURN(v1::GetJobEventsResponse response,
                        Call(stub_.get(), &JobStub::GetJobEvents, request));
    for (const v1::JobEvent& e : response.events()) events.push_back(e);
    if (response.events_size() < kEventsPerCall) return events;
    after_seq = response.events(response.events_size() - 1).seq();
  }
}

bool Client::AddStream(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_cancelled_) return false;
  streams_.insert(context);
  return true;
}

void Client::RemoveStream(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(context);
}

void Client::CancelStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  streams_cancelled_ = true;
  for (grpc::ClientContext* context : streams_) context->TryCancel();
}

template <typename Req, typename Message>
absl::Status Client::Stream(StreamMethod<Req, Message> method, const Req& request,
                            const std::function<absl::Status(const Message&)>& on_message,
                            absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(&context, deadline);
  if (!AddStream(&context)) return absl::CancelledError("interrupted");
  std::unique_ptr<grpc::ClientReader<Message>> reader = (stub_.get()->*method)(&context, request);
  absl::Status status = absl::OkStatus();
  Message message;
  while (status.ok() && reader->Read(&message)) status = on_message(message);
  if (!status.ok()) {
    context.TryCancel();
    (void)reader->Finish();
  } else {
    const grpc::Status finished = reader->Finish();
    // Our own cancel reads as an interruption, not as the server's CANCELLED.
    std::lock_guard<std::mutex> lock(mu_);
    status = streams_cancelled_ && !finished.ok() ? absl::CancelledError("interrupted")
                                                   : Convert(finished, deadline - absl::Now());
  }
  RemoveStream(&context);
  return status;
}

absl::Status Client::WatchJob(
    const v1::WatchJobRequest& request,
    const std::function<absl::Status(const v1::WatchJobResponse&)>& on_message,
    absl::Time deadline) {
  return Stream(&JobStub::WatchJob, request, on_message, deadline);
}

absl::Status Client::StreamJobLogs(const v1::StreamJobLogsRequest& request,
                                   const std::function<absl::Status(const v1::LogChunk&)>& on_chunk,
                                   absl::Time deadline) {
  return Stream(&JobStub::StreamJobLogs, request, on_chunk, deadline);
}

absl::StatusOr<v1::ListCheckpointsResponse> Client::ListCheckpoints(const std::string& job_id) {
  v1::ListCheckpointsRequest request;
  request.set_job_id(job_id);
  return Call(stub_.get(), &JobStub::ListCheckpoints, request);
}

absl::StatusOr<v1::ListAttemptsResponse> Client::ListAttempts(const std::string& job_id) {
  v1::ListAttemptsRequest request;
  request.set_job_id(job_id);
  return Call(stub_.get(), &JobStub::ListAttempts, request);
}

absl::StatusOr<v1::ListSamplesResponse> Client::ListSamples(const std::string& job_id, int64_t step,
                                                            bool latest) {
  v1::ListSamplesRequest request;
  request.set_job_id(job_id);
  request.set_step(step);
  request.set_latest(latest);
  return Call(stub_.get(), &JobStub::ListSamples, request);
}

absl::StatusOr<v1::GetJobMetricsResponse> Client::GetJobMetrics(const std::string& job_id,
                                                                int max_points) {
  v1::GetJobMetricsRequest request;
  request.set_job_id(job_id);
  request.set_max_points(max_points);
  return Call(stub_.get(), &JobStub::GetJobMetrics, request);
}

absl::StatusOr<v1::ListWorkersResponse> Client::ListWorkers() {
  return Call(worker_stub_.get(), &v1::WorkerService::Stub::ListWorkers, v1::ListWorkersRequest());
}

absl::StatusOr<v1::ListQueuesResponse> Client::ListQueues() {
  return Call(stub_.get(), &JobStub::ListQueues, v1::ListQueuesRequest());
}

absl::StatusOr<v1::WhoAmIResponse> Client::WhoAmI() {
  return Call(stub_.get(), &JobStub::WhoAmI, v1::WhoAmIRequest());
}

absl::StatusOr<v1::GetUsageResponse> Client::GetUsage(const std::string& user) {
  v1::GetUsageRequest request;
  request.set_user(user);
  return Call(stub_.get(), &JobStub::GetUsage, request);
}

}  // namespace llamafleet
