#include "server/cluster/straggler_rules.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace llamafleet {

std::optional<StragglerAction> ParseStragglerAction(const std::string& name) {
  if (name == "flag") return StragglerAction::kFlag;
  if (name == "restart-without") return StragglerAction::kRestartWithout;
  return std::nullopt;
}

const char* StragglerActionName(StragglerAction action) {
  return action == StragglerAction::kFlag ? "flag" : "restart-without";
}

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<StragglerFlag> StragglerTracker::Observe(const std::map<int, RankBusy>& ranks, int world_size,
                                                     const StragglerPolicy& policy) {
  std::vector<StragglerFlag> out;
  if (world_size < 2 || static_cast<int>(ranks.size()) < world_size) return out;
  // The first sight of every rank opens the first round.
  if (last_.size() < ranks.size()) {
    for (const auto& [rank, r] : ranks) last_.try_emplace(rank, Mark{r.step, r.busy_s});
    return out;
  }
  std::map<int, double> per_step;
  for (const auto& [rank, r] : ranks) {
    const Mark& m = last_[rank];
    if (r.step <= m.step) return out;  // the round is not complete yet
    // (A restarted trainer's counters go back: the round counts as nothing for it.)
    per_step[rank] = std::max(0.0, r.busy_s - m.busy_s) / static_cast<double>(r.step - m.step);
  }
  for (const auto& [rank, r] : ranks) last_[rank] = Mark{r.step, r.busy_s};
  for (const auto& [rank, bps] : per_step) {
    std::vector<double> others;
    for (const auto& [other, o] : per_step) {
      if (other != rank) others.push_back(o);
    }
    const double median = Median(others);
    const bool slow = bps >= policy.min_busy_per_step_s && bps > policy.factor * median;
    int& rounds = slow_rounds_[rank];
    rounds = slow ? rounds + 1 : 0;
    if (rounds < policy.consecutive || flagged_.count(rank) > 0) continue;
    flagged_.insert(rank);
    const std::string& worker = ranks.at(rank).worker;
    out.push_back(StragglerFlag{
        rank, worker, bps, median,
        absl::StrFormat("straggler: rank %d on worker %s works %.3g s a step, the others' median %.3g s "
                        "(more than %.3gx for %d rounds in a row)",
                        rank, worker, bps, median, policy.factor, policy.consecutive)});
  }
  return out;
}

}  // namespace llamafleet
