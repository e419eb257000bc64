// `watch ID`: a job's events until it ends, across reconnects, with its training
// progress from metrics polls.
#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clients/cli/cli.h"
#include "clients/cli/command.h"
#include "clients/cli/interrupt.h"
#include "clients/cli/output.h"
#include "clients/cli/progress.h"
#include "common/job_state.h"
#include "common/status_macros.h"

namespace llamafleet::cli {
namespace {

// How long a watch keeps trying to resume after losing the coordinator.
constexpr absl::Duration kWatchResumeWindow = absl::Seconds(60);
// A metrics poll must not hold up the end of a watch for a whole --timeout.
constexpr absl::Duration kMaxPollTimeout = absl::Seconds(5);
// Metrics history points fetched once to start the ETA estimate.
constexpr int kEtaHistoryPoints = 200;

// Erases the terminal line the cursor is on (after '\r').
constexpr char kClearLine[] = "\r\x1b[K";

// Prints a watch, across reconnects: the first snapshot, then each event once. In the
// table formats it also shows training progress from the metrics polls: a live line
// redrawn in place on a terminal, a "step ..." line per new step through a pipe.
// -o json|yaml print only the WatchJobResponse messages, one per line/document.
//
// Thread-safe: the event stream (main thread) and the metrics poller call in.
class WatchPrinter {
 public:
  enum class Mode { kMachine, kLines, kProgress };

  // `fetch` reads the job now; it is used to show the final metrics before the event
  // that ends the job.
  WatchPrinter(const Context& ctx, bool history, std::function<absl::StatusOr<v1::Job>()> fetch)
      : ctx_(ctx),
        history_(history),
        fetch_(std::move(fetch)),
        mode_(ctx.format == Format::kJson || ctx.format == Format::kYaml ? Mode::kMachine
              : ctx.out_is_tty                                           ? Mode::kProgress
                                                                         : Mode::kLines) {}

  Mode mode() const { return mode_; }

  // Where a (re)started stream should begin.
  int64_t after_seq() const {
    std::lock_guard<std::mutex> lock(mu_);
    return have_snapshot_ ? last_seq_ : 0;
  }
  bool have_snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return have_snapshot_;
  }
  // The state the event stream has reached.
  v1::JobState state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }

  absl::Status OnMessage(const v1::WatchJobResponse& received) {
    const v1::WatchJobResponse* message = &received;
    v1::WatchJobResponse completed;
    if (mode_ != Mode::kMachine) {
      // The job's final metrics come before the event that ends it.
      if (received.has_event() && IsTerminal(received.event().to_state())) {
        if (absl::StatusOr<v1::Job> job = fetch_(); job.ok()) OnPoll(*job);
      }
      // The stream's snapshot carries no pending explanation; GetJob has it.
      if (received.has_job() && received.job().state() == v1::QUEUED &&
          !received.job().has_pending() && !have_snapshot()) {
        absl::StatusOr<v1::Job> job = fetch_();
        if (job.ok() && job->state() == v1::QUEUED && job->has_pending()) {
          completed = received;
          *completed.mutable_job()->mutable_pending() = job->pending();
          message = &completed;
        }
      }
    }
    return OnStreamMessage(*message);
  }

  // Metrics history, oldest first: starts the ETA estimate before two polls have passed.
  void OnHistory(const v1::GetJobMetricsResponse& history) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const v1::JobMetricsPoint& p : history.points()) eta_.Observe(p);
  }

  // The job as a poll found it.
  void OnPoll(const v1::Job& job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kMachine || !have_snapshot_) return;
    // An event newer than this poll already moved the line on; keep its state.
    if (job.last_event_seq() >= job_.last_event_seq()) {
      job_ = job;
    } else {
      *job_.mutable_latest_metrics() = job.latest_metrics();
    }
    UpdateMetricsLocked(job);
  }

  // Ends the live line, so whatever follows starts on a fresh one.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_ == Mode::kProgress && drawn_) {
      *ctx_.out << "\n";
      ctx_.out->flush();
      drawn_ = false;
    }
  }

 private:
  // The snapshot or event as received (after OnMessage completed it).
  absl::Status OnStreamMessage(const v1::WatchJobResponse& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (message.has_job()) {
      state_ = message.job().state();
      // A resumed stream starts with a fresh snapshot; the events tell the story.
      if (have_snapshot_) return absl::OkStatus();
      have_snapshot_ = true;
      // The server replays history from seq 1; without --history only what happens from
      // now on is shown, i.e. everything newer than the snapshot.
      last_seq_ = history_ ? 0 : message.job().last_event_seq();
      job_ = message.job();
      PrintLocked(message);
      UpdateMetricsLocked(message.job());
      return absl::OkStatus();
    }
    if (message.has_event()) {
      if (message.event().seq() <= last_seq_) return absl::OkStatus();
      last_seq_ = message.event().seq();
      state_ = message.event().to_state();
      // The live line shows the newest state even between polls.
      if (message.event().seq() > job_.last_event_seq()) {
        job_.set_last_event_seq(message.event().seq());
        job_.set_state(state_);
        job_.set_status_reason(message.event().reason());
        job_.clear_pending();
      }
      PrintLocked(message);
    }
    return absl::OkStatus();
  }

  void PrintLocked(const v1::WatchJobResponse& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ctx_.format == Format::kJson) {
      *ctx_.out << ToJson(message, /*pretty=*/false);
    } else if (ctx_.format == Format::kYaml) {
      *ctx_.out << "---\n" << ToYaml(message);
    } else {
      if (drawn_) *ctx_.raw_out << kClearLine;
      if (message.has_job()) {
        *ctx_.out << JobStateLine(message.job()) << "\n";
      } else {
        *ctx_.out << EventLine(message.event()) << "\n";
      }
      drawn_ = false;
      if (mode_ == Mode::kProgress) DrawLocked();
    }
    // Someone may be following along through a pipe.
    ctx_.out->flush();
  }

  // Feeds the ETA; through a pipe prints a line per new step; on a terminal redraws.
  void UpdateMetricsLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (mode_ == Mode::kMachine) return;
    if (job.has_latest_metrics()) {
      const v1::JobMetricsPoint& m = job.latest_metrics();
      eta_.Observe(m);
      const bool is_new = m.attempt() != printed_attempt_ || m.step() != printed_step_;
      if (mode_ == Mode::kLines && is_new) {
        *ctx_.out << MetricsLine(m, eta_.Remaining(absl::Now())) << "\n";
        ctx_.out->flush();
      }
      printed_attempt_ = m.attempt();
      printed_step_ = m.step();
    }
    if (mode_ == Mode::kProgress) DrawLocked();
  }

  void DrawLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // One column short of the width: a line that fills it exactly wraps on some terminals.
    const size_t width = ctx_.terminal_width > 1 ? ctx_.terminal_width - 1 : 79;
    *ctx_.raw_out << kClearLine;
    *ctx_.out << ProgressLine(job_, eta_.Remaining(absl::Now()), width);
    ctx_.out->flush();
    drawn_ = true;
  }

  // Constant after construction.
  const Context& ctx_;
  const bool history_;
  const std::function<absl::StatusOr<v1::Job>()> fetch_;
  const Mode mode_;

  mutable std::mutex mu_;
  bool have_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::JOB_STATE_UNSPECIFIED;
  // What the live line shows: the newest of the stream's and the polls' view.
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  EtaEstimator eta_ ABSL_GUARDED_BY(mu_);
  int32_t printed_attempt_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t printed_step_ ABSL_GUARDED_BY(mu_) = -1;
  // The live line is on screen (the cursor is at its end).
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

// Calls `poll` every `interval` on its own thread until stopped (or destroyed).
class Poller {
 public:
  Poller(absl::Duration interval, std::function<void()> poll)
      : interval_(interval), poll_(std::move(poll)), thread_([this] { Run(); }) {}
  ~Poller() { Stop(); }

  // Waits for a poll in progress to return; no poll starts after this.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      lock.unlock();
      poll_();
      lock.lock();
      cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [this] { return stopped_; });
    }
  }

  const absl::Duration interval_;
  const std::function<void()> poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is ready
};

}  // namespace

absl::Status RunWatch(const Context& ctx, const std::string& id, bool history,
                      absl::Duration interval) {
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  // Polls get their own short deadline, so a coordinator that went away does not hold up
  // the end of the watch.
  ClientOptions poll_options = ctx.client_options;
  poll_options.timeout = std::min(poll_options.timeout, kMaxPollTimeout);
  absl::StatusOr<std::unique_ptr<Client>> poll_client = Client::Create(poll_options);
  if (!poll_client.ok()) return UsageError(std::string(poll_client.status().message()));
  const absl::Time deadline = ctx.watch_timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + ctx.watch_timeout;
  WatchPrinter printer(ctx, history, [&] { return (*poll_client)->GetJob(id); });

  std::optional<Poller> poller;
  InterruptWatcher interrupt([&] {
    client->CancelStreams();
    (*poll_client)->CancelStreams();
  });
  if (printer.mode() != WatchPrinter::Mode::kMachine) {
    poller.emplace(interval, [&, seeded = false]() mutable {
      if (!printer.have_snapshot()) return;  // the first line comes from the stream
      absl::StatusOr<v1::Job> job = (*poll_client)->GetJob(id);
      if (!job.ok()) return;  // the stream reports a coordinator that is gone
      if (!seeded && job->has_latest_metrics()) {
        seeded = true;
        absl::StatusOr<v1::GetJobMetricsResponse> history_points =
            (*poll_client)->GetJobMetrics(id, kEtaHistoryPoints);
        if (history_points.ok()) printer.OnHistory(*history_points);
      }
      printer.OnPoll(*job);
    });
  }

  absl::Time give_up = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Status status;
  while (interrupt.signal() == 0) {
    v1::WatchJobRequest request;
    request.set_job_id(id);
    request.set_after_seq(printer.after_seq());
    const int64_t before = printer.after_seq();
    status = client->WatchJob(
        request, [&printer](const v1::WatchJobResponse& m) { return printer.OnMessage(m); },
        deadline);
    if (interrupt.signal() != 0) break;
    // Resume only a watch that once worked: an address that never answered is a typo.
    // CANCELLED counts as an interruption too: we never cancel a watch we keep, and a
    // coordinator shutting down cancels the streams it still has.
    const bool interrupted = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kCancelled;
    if (!interrupted || !printer.have_snapshot()) break;
    if (printer.after_seq() != before) give_up = absl::InfiniteFuture();  // made progress
    if (give_up == absl::InfiniteFuture()) {
      printer.Close();
      *ctx.err << "llamafleet: watch interrupted (" << status.message() << "); resuming\n";
      give_up = absl::Now() + kWatchResumeWindow;
      backoff = absl::Milliseconds(200);
    }
    if (absl::Now() + backoff > std::min(give_up, deadline)) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  if (poller.has_value()) poller->Stop();
  printer.Close();
  if (interrupt.signal() != 0) return Interrupted(interrupt.signal());
  if (status.code() == absl::StatusCode::kDeadlineExceeded ||
      (!status.ok() && absl::Now() >= deadline)) {
    return JobOutcomeError(absl::StatusCode::kDeadlineExceeded, kExitJobTimeout,
                           absl::StrCat("job ", id, " is still ", StateName(printer.state()),
                                        " after --timeout ", absl::FormatDuration(ctx.watch_timeout)));
  }
  if (!status.ok()) return status;
  if (!IsTerminal(printer.state())) {
    return absl::UnavailableError(
        absl::StrCat("watch of job ", id, " ended while it was ", StateName(printer.state())));
  }
  // Like `wait`: a job that did not succeed is not a watch that did.
  return JobEndStatus(id, printer.state(), "", /*succeeded_only=*/true);
}

}  // namespace llamafleet::cli
