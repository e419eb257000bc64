#include "server/cluster/attempt_tracker.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace llamafleet {

int ExitStatusCode(const v1::RankExit& e) {
  if (e.status_code() != 0) return e.status_code();
  // Legacy relay ("CODE: message"): only an exact canonical code name before the colon.
  const std::string& err = e.last_error();
  const size_t colon = err.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 24) return 0;
  const std::string name = err.substr(0, colon);
  for (int code = 1; code <= 16; ++code) {
    if (name == absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) return code;
  }
  return 0;
}

namespace {

bool IsPermanentCode(int code) {
  switch (static_cast<absl::StatusCode>(code)) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

// NOT_FOUND of a checkpoint: its message names one of the task's checkpoint paths, or
// says "checkpoint" (the trainer names what it could not find).
bool IsCheckpointNotFound(const v1::RankExit& e, const FailureContext& context) {
  const std::string& text = e.status_message().empty() ? e.last_error() : e.status_message();
  for (const std::string& path : context.checkpoint_paths) {
    if (!path.empty() && absl::StrContains(text, path)) return true;
  }
  return absl::StrContains(absl::AsciiStrToLower(text), "checkpoint");
}

}  // namespace

AttemptOutcome ClassifyFailure(const v1::TaskStatus& status, const FailureContext& context) {
  if (status.exits_size() == 0) return AttemptOutcome::kNodeFault;  // could not launch it
  bool started = false;
  for (const v1::RankExit& e : status.exits()) {
    const int code = ExitStatusCode(e);
    if (IsPermanentCode(code)) return AttemptOutcome::kPermanent;
    if (code == static_cast<int>(absl::StatusCode::kNotFound) && !IsCheckpointNotFound(e, context)) {
      return AttemptOutcome::kPermanent;
    }
    if (e.exit_code() == 127 || e.exit_code() == 126) continue;  // could not execute the trainer
    started = true;
  }
  return started ? AttemptOutcome::kRetryable : AttemptOutcome::kNodeFault;
}

std::string AttemptTracker::WorkerOf(const std::string& task_id) const {
  for (const TaskRecord& t : record.tasks) {
    if (t.task_id == task_id) return t.worker;
  }
  return "";
}

TaskReportEffect AttemptTracker::OnTaskStatus(const std::string& worker,
                                              const v1::TaskStatus& status) {
  TaskReportEffect effect;
  auto it = task_states.find(status.task_id());
  if (it == task_states.end()) return effect;
  // A terminal state is final: a late RUNNING (reordered, or from a session that was
  // replaced) does not bring an abandoned task back.
  if (IsTerminalTask(it->second)) return effect;
  it->second = status.state();
  missing_since.erase(status.task_id());
  effect.applied = true;
  if (stopping) return effect;

  auto all_in = [&](v1::TaskState s) {
    for (const auto& [id, state] : task_states) {
      if (state != s) return false;
    }
    return true;
  };
  switch (status.state()) {
    case v1::TASK_RUNNING:
      if (all_in(v1::TASK_RUNNING) && !running_recorded) {
        running_recorded = true;
        effect.record_running = true;
      }
      break;
    case v1::TASK_FAILED: {
      FailureContext context;
      context.checkpoint_paths.insert(record.resume_from);
      context.checkpoint_paths.insert(spec.checkpoint().dir());
      effect.end = ClassifyFailure(status, context);
      effect.reason = absl::StrCat("task ", status.task_id(), " on ", worker, " failed: ",
                                   status.message());
      if (*effect.end == AttemptOutcome::kNodeFault) effect.excluded_worker = worker;
      break;
    }
    case v1::TASK_KILLED:
      effect.end = AttemptOutcome::kRetryable;
      effect.reason = absl::StrCat("task ", status.task_id(), " was stopped on ", worker, ": ",
                                   status.message());
      break;
    case v1::TASK_SUCCEEDED:
      if (all_in(v1::TASK_SUCCEEDED)) {
        effect.end = AttemptOutcome::kSucceeded;
        effect.reason = stopped_early.empty() ? absl::StrCat("attempt ", record.attempt, ": every rank exited 0")
                                              : stopped_early;
      }
      break;
    default:
      break;
  }
  return effect;
}

int AttemptTracker::WorldSize() const {
  int n = 0;
  for (const TaskRecord& t : record.tasks) n += t.ranks;
  return n;
}

void AttemptTracker::OnStep(int64_t step, int64_t total, absl::Time now) {
  if (total > 0) total_steps = total;
  gang.OnStep(step, now);
  if (step <= last_step) return;
  if (first_step < 0) {
    first_step = step;
    first_step_time = now;
  }
  last_step = step;
  last_step_time = now;
  last_progress = now;
}

void AttemptTracker::MarkMissing(const std::string& task_id, absl::Time now) {
  auto it = task_states.find(task_id);
  if (it == task_states.end() || IsTerminalTask(it->second)) return;
  missing_since.emplace(task_id, now);
}

std::vector<std::string> AttemptTracker::Abandoned(absl::Time now, absl::Duration grace) const {
  std::vector<std::string> out;
  for (const auto& [task_id, state] : task_states) {
    if (IsTerminalTask(state)) continue;
    auto m = missing_since.find(task_id);
    if ((m != missing_since.end() && now - m->second >= grace) || now >= stop_deadline) {
      out.push_back(task_id);
    }
  }
  return out;
}

void AttemptTracker::Abandon(const std::string& task_id) {
  auto it = task_states.find(task_id);
  if (it != task_states.end() && !IsTerminalTask(it->second)) it->second = v1::TASK_FAILED;
  missing_since.erase(task_id);
}

void AttemptTracker::BeginStopping(absl::Time now, absl::Duration grace, absl::Duration slack) {
  stopping = true;
  // The first stop sets the deadline: a later, shorter cancel (after a preemption's
  // outcome is recorded) does not cut the preemption's checkpoint time short.
  if (stop_deadline == absl::InfiniteFuture()) stop_deadline = now + grace + slack;
}

std::vector<sched::Allocation> AttemptTracker::HeldAllocations() const {
  std::vector<sched::Allocation> out;
  for (const TaskRecord& t : record.tasks) {
    auto it = task_states.find(t.task_id);
    if (it != task_states.end() && IsTerminalTask(it->second)) continue;
    out.push_back({t.worker, t.ranks});
  }
  return out;
}

std::optional<absl::Time> AttemptTracker::ExpectedEnd(absl::Time now) const {
  std::optional<absl::Time> end;
  if (total_steps > 0 && first_step >= 0 && last_step > first_step &&
      last_step_time > first_step_time) {
    const double seconds_per_step = absl::ToDoubleSeconds(last_step_time - first_step_time) /
                                    static_cast<double>(last_step - first_step);
    const int64_t remaining = std::max<int64_t>(0, total_steps - last_step);
    end = std::max(now, last_step_time + absl::Seconds(seconds_per_step * remaining));
  }
  const int64_t deadline = spec.run_policy().active_deadline_seconds();
  if (deadline > 0) {
    const absl::Time by_deadline = record.started + absl::Seconds(deadline);
    end = end.has_value() ? std::min(*end, by_deadline) : by_deadline;
  }
  return end;
}

}  // namespace llamafleet
