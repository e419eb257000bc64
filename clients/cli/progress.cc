#include "clients/cli/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/output.h"
#include "common/job_state.h"

namespace llamafleet::cli {
namespace {

constexpr int kBarWidth = 20;

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// "120/200", or "120" while the total is unknown.
std::string Steps(const v1::JobMetricsPoint& m) {
  return m.total_steps() > 0 ? absl::StrCat(m.step(), "/", m.total_steps())
                             : absl::StrCat(m.step());
}

// A diverged run shows nan or inf as such.
std::string Loss(const v1::JobMetricsPoint& m) {
  return std::isfinite(m.loss()) ? absl::StrFormat("loss %.4f", m.loss())
                                 : absl::StrCat("loss ", m.loss());
}

std::string TokensPerSecond(const v1::JobMetricsPoint& m) {
  return absl::StrCat(FormatCount(std::llround(m.tokens_per_second())), " tok/s");
}

}  // namespace

void EtaEstimator::Observe(const v1::JobMetricsPoint& point) {
  if (point.attempt() < attempt_) return;
  const absl::Time time = ToTime(point.time());
  if (point.attempt() > attempt_ || !have_first_ || point.step() < last_step_) {
    // A new attempt (or a step counter that went back): start over from this point.
    attempt_ = point.attempt();
    have_first_ = true;
    first_step_ = point.step();
    first_time_ = time;
  }
  last_step_ = point.step();
  last_time_ = time;
  total_steps_ = point.total_steps();
}

std::optional<absl::Duration> EtaEstimator::Remaining(absl::Time now) const {
  if (!have_first_ || total_steps_ <= 0) return std::nullopt;
  const int64_t steps = last_step_ - first_step_;
  const absl::Duration elapsed = last_time_ - first_time_;
  if (steps <= 0 || elapsed <= absl::ZeroDuration()) return std::nullopt;
  const int64_t left_steps = std::max<int64_t>(0, total_steps_ - last_step_);
  const absl::Duration left = elapsed * (static_cast<double>(left_steps) / steps);
  return std::max(absl::ZeroDuration(), last_time_ + left - now);
}

std::string Bar(int64_t step, int64_t total, int width) {
  int done = 0;
  if (total > 0) {
    const int64_t clamped = std::clamp<int64_t>(step, 0, total);
    done = static_cast<int>(clamped * width / total);
  }
  return absl::StrCat(std::string(done, '#'), std::string(width - done, '.'));
}

std::string ProgressLine(const v1::Job& job, std::optional<absl::Duration> eta, size_t max_width) {
  std::string line = absl::StrCat("job ", job.id(), " ", v1::JobState_Name(job.state()));
  if (job.has_latest_metrics() && job.state() != v1::QUEUED) {
    const v1::JobMetricsPoint& m = job.latest_metrics();
    if (m.total_steps() > 0) {
      absl::StrAppend(&line, " [", Bar(m.step(), m.total_steps(), kBarWidth), "] ", Steps(m));
    } else {
      absl::StrAppend(&line, " step ", Steps(m));
    }
    absl::StrAppend(&line, " ", Loss(m));
    if (m.has_eval_loss()) absl::StrAppend(&line, absl::StrFormat(" eval %.4f", m.eval_loss()));
    absl::StrAppend(&line, " ", TokensPerSecond(m));
    if (eta.has_value() && !IsTerminal(job.state())) {
      absl::StrAppend(&line, " ETA ", FormatEta(*eta));
    }
  } else {
    const std::string reason = JobReason(job);
    if (!reason.empty()) absl::StrAppend(&line, ": ", reason);
  }
  if (line.size() > max_width) line.resize(max_width);
  return line;
}

std::string MetricsLine(const v1::JobMetricsPoint& m, std::optional<absl::Duration> eta) {
  std::string line = absl::StrCat("step ", Steps(m), " ", Loss(m), " lr ",
                                  absl::StrFormat("%.3g", m.lr()), " ", TokensPerSecond(m));
  if (m.mfu() > 0) absl::StrAppend(&line, " mfu ", absl::StrFormat("%.1f%%", m.mfu() * 100));
  if (eta.has_value()) absl::StrAppend(&line, " ETA ", FormatEta(*eta));
  return line;
}

}  // namespace llamafleet::cli
