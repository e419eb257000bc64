#include "server/cluster/hang_rules.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llamafleet {
namespace {

// A worker's numbers are input from outside: finite, not negative, and below a day for
// durations (an age or a step time beyond it means nothing here).
bool Finite(double v, double max) { return std::isfinite(v) && v >= 0 && v <= max; }

std::string Seconds(double s) { return absl::StrCat(std::round(s * 10) / 10, " s"); }

}  // namespace

absl::Duration HangBound(const std::deque<double>& step_seconds, const HangPolicy& policy) {
  if (step_seconds.empty()) return policy.floor;
  std::vector<double> sorted(step_seconds.begin(), step_seconds.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  return std::max(policy.floor, absl::Seconds(policy.step_factor * median));
}

bool GangProgress::OnProgress(const std::string& worker, const v1::RankProgress& p, int world_size,
                              absl::Time now) {
  constexpr double kDay = 86400;
  if (p.rank() < 0 || p.rank() >= world_size || p.step() < 0 || p.collectives() < 0 ||
      !Finite(p.age_seconds(), kDay) || !Finite(p.busy_seconds(), 1e9) || !Finite(p.wait_seconds(), 1e9)) {
    return false;
  }
  auto [it, inserted] = ranks_.try_emplace(p.rank());
  Rank& r = it->second;
  if (inserted || r.step != p.step() || r.collectives != p.collectives() || r.in_collective != p.in_collective()) {
    // (A rank's first report is activity too: the gang is judged from its first sight.)
    last_activity_ = std::max(last_activity_, now);
  }
  r.worker = worker;
  r.step = p.step();
  r.collectives = p.collectives();
  r.in_collective = p.in_collective();
  r.busy_s = p.busy_seconds();
  r.age_s = p.age_seconds();
  r.received = now;
  return true;
}

std::map<int, RankBusy> GangProgress::Busy() const {
  std::map<int, RankBusy> out;
  for (const auto& [rank, r] : ranks_) out[rank] = RankBusy{r.worker, r.step, r.busy_s};
  return out;
}

void GangProgress::OnStep(int64_t step, absl::Time now) {
  if (step <= last_step_) return;
  if (last_step_ >= 0 && now > last_step_time_) {
    step_seconds_.push_back(absl::ToDoubleSeconds(now - last_step_time_) / static_cast<double>(step - last_step_));
    if (step_seconds_.size() > static_cast<size_t>(kStepSamples)) step_seconds_.pop_front();
  }
  last_step_ = step;
  last_step_time_ = now;
  last_activity_ = std::max(last_activity_, now);
}

std::optional<HangVerdict> GangProgress::Check(absl::Time now, int world_size, const HangPolicy& policy,
                                               const PauseSteps& pauses) const {
  if (policy.floor <= absl::ZeroDuration() || world_size <= 0) return std::nullopt;
  if (last_step_ < 0 || static_cast<int>(ranks_.size()) < world_size) return std::nullopt;
  const absl::Duration bound = Bound(policy);
  const absl::Duration idle = now - last_activity_;
  if (idle <= bound) return std::nullopt;
  const std::string head = absl::StrCat("hung: no progress for ", absl::FormatDuration(absl::Trunc(idle, absl::Seconds(1))),
                                        " after step ", last_step_, " (bound ",
                                        absl::FormatDuration(absl::Trunc(bound, absl::Milliseconds(100))), ")");

  // Silent: the one silent longest.
  const Rank* silent = nullptr;
  int silent_rank = -1;
  for (const auto& [rank, r] : ranks_) {
    if (absl::Seconds(r.age_s) <= policy.silent_after) continue;
    if (silent == nullptr || r.age_s > silent->age_s) {
      silent = &r;
      silent_rank = rank;
    }
  }
  if (silent != nullptr) {
    return HangVerdict{silent_rank, silent->worker,
                       absl::StrCat(head, "; rank ", silent_rank, " on worker ", silent->worker,
                                    " stopped reporting progress ", Seconds(silent->age_s), " before")};
  }

  // Not there: C is the collective the waiting ranks are furthest in.
  int64_t c = -1;
  std::vector<int> waiting;
  for (const auto& [rank, r] : ranks_) {
    if (!r.in_collective) continue;
    c = std::max(c, r.collectives);
  }
  if (c < 0) return std::nullopt;  // every rank computes: not a collective hang
  const Rank* behind = nullptr;
  int behind_rank = -1;
  bool pausing = false;
  for (const auto& [rank, r] : ranks_) {
    if (r.in_collective && r.collectives == c) {
      waiting.push_back(rank);
      continue;
    }
    if (!r.in_collective && pauses.At(r.step)) {
      pausing = true;  // saving, evaluating or exporting: working, not hung
      continue;
    }
    if (behind == nullptr || r.collectives < behind->collectives) {
      behind = &r;
      behind_rank = rank;
    }
  }
  const std::string who_waits = absl::StrCat(waiting.size() == 1 ? "rank " : "ranks ", absl::StrJoin(waiting, ","));
  if (behind != nullptr) {
    const std::string doing = behind->in_collective
                                  ? absl::StrCat("waits in collective ", behind->collectives)
                                  : absl::StrCat("is not in a collective (", behind->collectives, " entered)");
    return HangVerdict{behind_rank, behind->worker,
                       absl::StrCat(head, "; rank ", behind_rank, " on worker ", behind->worker,
                                    " has not entered collective ", c, " that ", who_waits, " wait", 
                                    waiting.size() == 1 ? "s" : "", " in: it ", doing)};
  }
  if (pausing) return std::nullopt;
  return HangVerdict{-1, "", absl::StrCat(head, "; every rank waits in collective ", c, " (no rank to blame)")};
}

}  // namespace llamafleet
