// `wait ID...`: blocks until every job has ended, on each job's watch stream (never by
// polling), across coordinator restarts; one line per job as it ends; the exit code says
// how they ended (cli.h).
#include <algorithm>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "clients/cli/cli.h"
#include "clients/cli/command.h"
#include "clients/cli/interrupt.h"
#include "clients/cli/output.h"
#include "common/job_state.h"
#include "common/status_macros.h"

namespace llamafleet::cli {
namespace {

// How long a wait keeps trying to resume a stream after losing the coordinator.
constexpr absl::Duration kResumeWindow = absl::Seconds(60);
// Jobs one wait follows (one stream each).
constexpr size_t kMaxWaitJobs = 256;

// How one job's wait ended.
struct Ended {
  bool terminal = false;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
  absl::Status error;  // the stream could not be followed (job unknown, coordinator gone)
};

// Follows job `id`'s watch stream until the job is terminal, `deadline` passes, or the
// streams are cancelled; resumes after a lost coordinator for up to kResumeWindow.
Ended Follow(Client& client, const std::string& id, absl::Time deadline) {
  Ended end;
  int64_t after_seq = 0;
  bool seen = false;  // a snapshot arrived: the job exists and the address works
  absl::Time give_up = absl::InfiniteFuture();
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    v1::WatchJobRequest request;
    request.set_job_id(id);
    request.set_after_seq(after_seq);
    const int64_t before = after_seq;
    absl::Status status = client.WatchJob(
        request,
        [&](const v1::WatchJobResponse& m) {
          if (m.has_job()) {
            seen = true;
            // Only events after the snapshot count; the snapshot itself says where the
            // job is (a job already terminal ends the stream right after it).
            after_seq = std::max(after_seq, m.job().last_event_seq());
            end.state = m.job().state();
            end.reason = m.job().status_reason();
          } else if (m.has_event() && m.event().seq() > after_seq) {
            after_seq = m.event().seq();
            end.state = m.event().to_state();
            end.reason = m.event().reason();
          }
          end.terminal = IsTerminal(end.state);
          return absl::OkStatus();
        },
        deadline);
    if (end.terminal) return end;
    const bool interrupted = status.code() == absl::StatusCode::kUnavailable ||
                             (status.code() == absl::StatusCode::kCancelled && status.message() != "interrupted");
    if (status.ok() || !interrupted || !seen) {
      end.error = status.ok() ? absl::UnavailableError(absl::StrCat("watch of job ", id, " ended while it was ",
                                                                    StateName(end.state)))
                              : status;
      return end;
    }
    if (after_seq != before) give_up = absl::InfiniteFuture();
    if (give_up == absl::InfiniteFuture()) give_up = absl::Now() + kResumeWindow;
    if (absl::Now() + backoff > std::min(give_up, deadline)) {
      end.error = absl::Now() + backoff > deadline ? absl::DeadlineExceededError("--timeout") : status;
      return end;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

}  // namespace

absl::Status JobEndStatus(const std::string& id, v1::JobState state, const std::string& reason,
                          bool succeeded_only) {
  if (state == v1::SUCCEEDED || !succeeded_only) return absl::OkStatus();
  const std::string why = reason.empty() ? "" : absl::StrCat(": ", reason);
  if (state == v1::CANCELLED) {
    return JobOutcomeError(absl::StatusCode::kCancelled, kExitJobCancelled,
                           absl::StrCat("job ", id, " was CANCELLED", why));
  }
  return JobOutcomeError(absl::StatusCode::kAborted, kExitJobFailed,
                         absl::StrCat("job ", id, " ", StateName(state), why));
}

absl::Status RunWait(const Context& ctx, const std::vector<std::string>& ids, bool succeeded_only) {
  if (ids.empty()) return UsageError("wait: give at least one job id");
  if (ids.size() > kMaxWaitJobs) {
    return UsageError(absl::StrCat("wait: at most ", kMaxWaitJobs, " jobs at once (got ", ids.size(), ")"));
  }
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const std::string& id : ids) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(id, &n) || n <= 0) return UsageError(absl::StrCat("wait: '", id, "' is not a job id"));
    if (seen.insert(id).second) unique.push_back(id);
  }
  LF_ASSIGN_OR_RETURN(Client* client, Connect(ctx));
  const absl::Time deadline = ctx.watch_timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + ctx.watch_timeout;
  InterruptWatcher interrupt([&] { client->CancelStreams(); });

  std::mutex mu;  // guards ctx.out and `ended`
  std::vector<Ended> ended(unique.size());
  std::vector<std::thread> threads;
  threads.reserve(unique.size());
  for (size_t i = 0; i < unique.size(); ++i) {
    threads.emplace_back([&, i] {
      Ended e = Follow(*client, unique[i], deadline);
      std::lock_guard<std::mutex> lock(mu);
      if (e.terminal) {
        *ctx.out << "job " << unique[i] << " " << StateName(e.state)
                 << (e.reason.empty() ? "" : absl::StrCat(": ", e.reason)) << "\n";
        ctx.out->flush();
      }
      ended[i] = std::move(e);
    });
  }
  for (std::thread& t : threads) t.join();
  if (interrupt.signal() != 0) return Interrupted(interrupt.signal());

  // The most telling outcome decides: a failure, then a cancellation, then a timeout,
  // then an error following a stream.
  std::vector<std::string> failed, cancelled, unfinished;
  absl::Status error;
  for (size_t i = 0; i < unique.size(); ++i) {
    const Ended& e = ended[i];
    if (e.terminal) {
      absl::Status s = JobEndStatus(unique[i], e.state, e.reason, succeeded_only);
      if (s.ok()) continue;
      (JobOutcomeExitCode(s) == kExitJobCancelled ? cancelled : failed).push_back(unique[i]);
    } else if (e.error.code() == absl::StatusCode::kDeadlineExceeded) {
      unfinished.push_back(absl::StrCat(unique[i], " (", StateName(e.state), ")"));
    } else if (error.ok()) {
      // "job 9 not found" names the job already.
      const std::string job = absl::StrCat("job ", unique[i]);
      error = absl::StartsWith(e.error.message(), absl::StrCat(job, " "))
                  ? e.error
                  : WithContext(e.error, absl::StrCat(job, ": "));
    }
  }
  auto jobs = [](const std::vector<std::string>& v) {
    return absl::StrCat(v.size() == 1 ? "job " : "jobs ", absl::StrJoin(v, ", "));
  };
  if (!failed.empty()) {
    return JobOutcomeError(absl::StatusCode::kAborted, kExitJobFailed, absl::StrCat(jobs(failed), " failed"));
  }
  if (!cancelled.empty()) {
    return JobOutcomeError(absl::StatusCode::kCancelled, kExitJobCancelled,
                           absl::StrCat(jobs(cancelled), (cancelled.size() == 1 ? " was" : " were"), " cancelled"));
  }
  if (!unfinished.empty()) {
    return JobOutcomeError(absl::StatusCode::kDeadlineExceeded, kExitJobTimeout,
                           absl::StrCat(jobs(unfinished), " still not finished after --timeout ",
                                        absl::FormatDuration(ctx.watch_timeout)));
  }
  return error;
}

}  // namespace llamafleet::cli
