#ifndef LLAMAFLEET_CLIENTS_CLI_PROGRESS_H_
#define LLAMAFLEET_CLIENTS_CLI_PROGRESS_H_

// What `watch` shows about training progress: the one-line progress bar drawn on a
// terminal, the plain metrics line printed when stdout is a pipe, and the ETA behind
// both. Pure functions of their inputs (time is passed in), like output.h.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::cli {

// Estimates when training ends from the step rate between the first and the newest
// metrics point of the current attempt (a restarted attempt starts a new estimate: its
// first steps replay from a checkpoint after a restart gap).
class EtaEstimator {
 public:
  // Feeds one point; points may repeat (polling sees the same latest point many times)
  // and come from the metrics history first. A point of an older attempt is ignored.
  void Observe(const v1::JobMetricsPoint& point);

  // Time left at `now`, counting down from the newest point's time; nullopt until two
  // points of the same attempt with different steps and times are known, or without a
  // total step count. Never negative.
  std::optional<absl::Duration> Remaining(absl::Time now) const;

 private:
  int32_t attempt_ = -1;
  bool have_first_ = false;
  int64_t first_step_ = 0;
  absl::Time first_time_;
  int64_t last_step_ = 0;
  int64_t total_steps_ = 0;
  absl::Time last_time_;
};

// The terminal line: "job 3 RUNNING [#######.............] 120/200 loss 2.3140
// 1,234 tok/s ETA 1m05s". Without metrics it says why the job waits ("job 3 QUEUED:
// needs 3 nodes ..."). Cut to `max_width` characters so a redraw with '\r' never wraps.
std::string ProgressLine(const v1::Job& job, std::optional<absl::Duration> eta, size_t max_width);

// The piped line: "step 120/200 loss 2.3140 lr 3e-04 1,234 tok/s mfu 41.2% ETA 1m05s".
std::string MetricsLine(const v1::JobMetricsPoint& point, std::optional<absl::Duration> eta);

// The bar alone: `width` cells, '#' for done and '.' for left.
std::string Bar(int64_t step, int64_t total, int width);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_PROGRESS_H_
