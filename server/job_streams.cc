// JobServiceImpl's server streams: WatchJob (a job's snapshot, then its events) and
// StreamJobLogs (its trainers' log lines).
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <grpcpp/alarm.h>

#include "jobspec/jobspec.h"
#include "server/job_service.h"
#include "server/job_service_internal.h"
#include "server/stream_limits.h"

namespace llamafleet {

using job_service_internal::kMaxEventLimit;

// ---------------------------------------------------------------------------
// StreamJobLogs: reads the rank files from where it left off, on a timer when following,
// until the job is terminal and every file is read to its end. Reads (the job's state and
// the files) run on the log store's reader thread, never on a gRPC callback thread; each
// chunk is at most LogStore::kMaxChunkBytes of lines. A following stream holds one of its
// user's stream slots (stream_limits.h) and, once it holds it, sends its initial metadata
// at once with kStreamOpenKey, so the HTTP gateway opens its event stream only then.
// ---------------------------------------------------------------------------

class JobServiceImpl::LogReactor : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  LogReactor(JobServiceImpl* service, grpc::CallbackServerContext* context, int64_t job_id,
             const v1::StreamJobLogsRequest& request)
      : service_(service), context_(context), job_id_(job_id), request_(request) {}

  // A following stream's slot; RESOURCE_EXHAUSTED at its user's cap.
  absl::Status TakeSlot(StreamLimits* limits, const std::string& user) {
    absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
        limits->Acquire(user, "StreamJobLogs", [this](const absl::Status& why, bool write_pending) {
          {
            std::lock_guard<std::mutex> lock(limit_mu_);
            ended_by_limit_ = ToGrpcStatus(why);
          }
          // A write its client does not take never completes: only a cancel ends it. Else
          // the next poll (at most 250 ms away) finishes with `why`.
          if (write_pending) context_->TryCancel();
        });
    if (!slot.ok()) return slot.status();
    slot_ = std::move(*slot);
    return absl::OkStatus();
  }

  void Start() {
    if (request_.follow()) {
      context_->AddInitialMetadata(kStreamOpenKey, "1");
      StartSendInitialMetadata();
    }
    Poll();
  }

  void OnWriteDone(bool ok) override {
    if (slot_ != nullptr) slot_->WriteDone();
    if (!ok) {
      cancelled_ = true;  // client went away; the next poll finishes
    }
    Poll();
  }

  void OnCancel() override { cancelled_ = true; }

  void OnDone() override {
    slot_.reset();
    delete this;
  }

 private:
  void Poll() {
    service_->logs_->RunRead([this] { PollOnReader(); });
  }

  // Sends the next chunk, or finishes, or waits a little and looks again.
  void PollOnReader() {
    {
      std::lock_guard<std::mutex> lock(limit_mu_);
      if (ended_by_limit_.has_value()) {
        Done(*ended_by_limit_);
        return;
      }
    }
    if (cancelled_) {
      Done(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    // Terminal before reading: its last lines were queued before its final status, so
    // once the log store's queue is flushed they are on disk.
    absl::StatusOr<v1::Job> job = service_->store_->GetJob(job_id_);
    const bool over = !job.ok() || IsTerminal(job->state());
    if (over && !flushed_) {
      flushed_ = true;
      service_->logs_->Flush();
    }
    for (const LogStore::Source& s : service_->logs_->Sources(job_id_, request_.attempt())) {
      if (request_.rank() >= 0 && s.rank != request_.rank()) continue;
      LogStore::Cursor& c = cursors_[s.path];
      if (!c.opened) {
        c.opened = true;
        c.offset = LogStore::TailOffset(s.path, request_.tail_lines());
      }
      std::vector<std::string> lines = LogStore::ReadLines(s.path, &c);
      if (!lines.empty()) {
        chunk_.Clear();
        chunk_.set_attempt(s.attempt);
        chunk_.set_rank(s.rank);
        for (std::string& l : lines) chunk_.add_lines(std::move(l));
        if (slot_ != nullptr) slot_->WriteStarted();
        StartWrite(&chunk_);
        return;
      }
    }
    if (!request_.follow() || over) {
      Done(grpc::Status::OK);
      return;
    }
    alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(250),
               [this](bool) { Poll(); });
  }

  void Done(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  JobServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const int64_t job_id_;
  const v1::StreamJobLogsRequest request_;
  std::unique_ptr<StreamLimits::Slot> slot_;  // following streams, with limits set
  std::mutex limit_mu_;
  std::optional<grpc::Status> ended_by_limit_;  // guarded by limit_mu_
  std::map<std::string, LogStore::Cursor> cursors_;  // reader thread only
  v1::LogChunk chunk_;
  grpc::Alarm alarm_;
  std::atomic<bool> cancelled_{false};
  bool finished_ = false;  // reader thread only
  bool flushed_ = false;   // reader thread only
};

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::StreamJobLogs(
    grpc::CallbackServerContext* context, const v1::StreamJobLogsRequest* request) {
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead);
  absl::Status error = caller.status();
  if (error.ok()) error = id.status();
  if (error.ok()) error = store_->GetJob(*id).status();
  if (error.ok() && (request->attempt() < 0 || request->tail_lines() < 0 || request->rank() < -1)) {
    error = absl::InvalidArgumentError("attempt and tail_lines must be >= 0, rank >= -1");
  }
  if (error.ok() && logs_ == nullptr) error = absl::UnimplementedError("no log store");
  auto* reactor = new LogReactor(this, context, id.ok() ? *id : 0, *request);
  if (error.ok() && request->follow() && stream_limits_ != nullptr) {
    error = reactor->TakeSlot(stream_limits_, caller->user);
  }
  if (!error.ok()) {
    reactor->Finish(ToGrpcStatus(error));
    return reactor;
  }
  reactor->Start();
  return reactor;
}

// ---------------------------------------------------------------------------
// WatchJob: snapshot, history after `after_seq`, then live events, in seq order and
// without duplicates, until the event that makes the job terminal has been sent.
// ---------------------------------------------------------------------------

class JobServiceImpl::WatchReactor : public grpc::ServerWriteReactor<v1::WatchJobResponse> {
 public:
  WatchReactor(JobServiceImpl* service, grpc::CallbackServerContext* context, int64_t job_id, int64_t after_seq)
      : service_(service), context_(context), job_id_(job_id), next_seq_(after_seq + 1) {}

  // The watch's slot (stream_limits.h); RESOURCE_EXHAUSTED at its user's cap.
  absl::Status TakeSlot(StreamLimits* limits, const std::string& user) {
    absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
        limits->Acquire(user, "WatchJob", [this](const absl::Status& why, bool write_pending) {
          // A write its client does not take never completes: only a cancel ends it.
          if (write_pending) {
            context_->TryCancel();
          } else {
            FinishWith(ToGrpcStatus(why));
          }
        });
    if (!slot.ok()) return slot.status();
    slot_ = std::move(*slot);
    return absl::OkStatus();
  }

  // Subscribes, then reads the snapshot and history; live events that race with the
  // read are buffered and de-duplicated by sequence number.
  void Start() {
    const std::string job_id_string = JobIdString(job_id_);
    subscription_ = service_->store_->Subscribe([this, job_id_string](const v1::JobEvent& e) {
      if (e.job_id() != job_id_string) return;
      std::lock_guard<std::mutex> lock(mu_);
      EnqueueEventLocked(e);
      MaybeWriteLocked();
    });
    absl::StatusOr<v1::Job> job = service_->store_->GetJob(job_id_);
    absl::StatusOr<std::vector<v1::JobEvent>> history =
        job.ok() ? service_->store_->GetEvents(job_id_, next_seq_ - 1, kMaxEventLimit * 100)
                 : absl::StatusOr<std::vector<v1::JobEvent>>(job.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (!history.ok()) {
      FinishLocked(ToGrpcStatus(history.status()));
      return;
    }
    if (IsTerminal(job->state())) terminal_seq_ = job->last_event_seq();
    service_->AddPendingInfo(&*job);
    v1::WatchJobResponse first;
    *first.mutable_job() = std::move(*job);
    // The snapshot goes first; any live events already buffered follow in seq order.
    pending_.push_front(std::move(first));
    std::deque<v1::WatchJobResponse> live = std::move(live_before_snapshot_);
    loaded_ = true;
    for (const v1::JobEvent& e : *history) EnqueueEventLocked(e);
    for (const v1::WatchJobResponse& r : live) EnqueueEventLocked(r.event());
    if (pending_.size() == 1 && terminal_seq_ > 0 && next_seq_ > terminal_seq_) {
      finish_after_write_ = true;
    }
    MaybeWriteLocked();
  }

  void OnWriteDone(bool ok) override {
    if (slot_ != nullptr) slot_->WriteDone();
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (finish_after_write_ && pending_.empty()) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(service_->watches_mu_);
      stopping = service_->watches_stopped_;
    }
    std::lock_guard<std::mutex> lock(mu_);
    // During shutdown gRPC cancels what is still open: say why, so clients reconnect.
    FinishLocked(stopping ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "coordinator is shutting down")
                          : grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    slot_.reset();
    service_->store_->Unsubscribe(subscription_);
    {
      std::lock_guard<std::mutex> lock(service_->watches_mu_);
      service_->watches_.erase(this);
    }
    delete this;
  }

  // Ends the stream (at most once). Safe under any lock: gRPC never runs a write
  // reactor's reactions inline.
  void FinishWith(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(std::move(status));
  }

 private:
  void EnqueueEventLocked(const v1::JobEvent& e) {
    if (!loaded_) {
      v1::WatchJobResponse r;
      *r.mutable_event() = e;
      live_before_snapshot_.push_back(std::move(r));
      return;
    }
    if (e.seq() < next_seq_ || finish_after_write_) return;  // already queued or sent
    next_seq_ = e.seq() + 1;
    v1::WatchJobResponse r;
    *r.mutable_event() = e;
    pending_.push_back(std::move(r));
    if (IsTerminal(e.to_state()) || (terminal_seq_ > 0 && e.seq() >= terminal_seq_)) {
      finish_after_write_ = true;
    }
  }

  void MaybeWriteLocked() {
    if (writing_ || finished_ || pending_.empty()) return;
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    if (slot_ != nullptr) slot_->WriteStarted();
    StartWrite(&current_);
  }

  void FinishLocked(grpc::Status status) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  JobServiceImpl* const service_;
  grpc::CallbackServerContext* const context_;
  const int64_t job_id_;
  int64_t subscription_ = 0;
  std::unique_ptr<StreamLimits::Slot> slot_;  // with limits set; taken before Start

  std::mutex mu_;
  int64_t next_seq_;            // the next event seq to send
  int64_t terminal_seq_ = 0;    // seq of the terminal event, once known
  bool loaded_ = false;         // snapshot and history queued
  bool writing_ = false;
  bool finished_ = false;
  bool finish_after_write_ = false;
  std::deque<v1::WatchJobResponse> live_before_snapshot_;
  std::deque<v1::WatchJobResponse> pending_;
  v1::WatchJobResponse current_;
};

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  absl::StatusOr<int64_t> id = ParseJobId(request->job_id(), "job_id");
  absl::StatusOr<Principal> caller = auth_->Check(*context, Operation::kRead);
  absl::Status error = caller.status();
  if (error.ok()) error = id.status();
  if (error.ok() && request->after_seq() < 0) {
    error = absl::InvalidArgumentError("after_seq must be >= 0");
  }
  auto* reactor = new WatchReactor(this, context, id.ok() ? *id : 0, request->after_seq());
  {
    std::lock_guard<std::mutex> lock(watches_mu_);
    if (error.ok() && watches_stopped_) {
      error = absl::UnavailableError("coordinator is shutting down");
    }
    watches_.insert(reactor);
  }
  if (error.ok() && stream_limits_ != nullptr) error = reactor->TakeSlot(stream_limits_, caller->user);
  if (!error.ok()) {
    reactor->FinishWith(ToGrpcStatus(error));
    return reactor;
  }
  reactor->Start();
  return reactor;
}

void JobServiceImpl::StopWatches() {
  std::lock_guard<std::mutex> lock(watches_mu_);
  watches_stopped_ = true;
  for (WatchReactor* w : watches_) {
    w->FinishWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down"));
  }
}

}  // namespace llamafleet
