#ifndef LLAMAFLEET_COMMON_STARTUP_PHASES_H_
#define LLAMAFLEET_COMMON_STARTUP_PHASES_H_

// The start-up phases of an attempt (llamafleet.v1.AttemptPhase), in the order a start
// usually goes through them. The coordinator times "placed" and "trainers_started"; the
// trainer's rank 0 times the other four and its worker relays them. Only these names are
// stored, counted in metrics labels or shown: a worker's string never is. Header-only.

#include <array>
#include <string_view>

namespace llamafleet {

inline constexpr std::array<std::string_view, 6> kStartupPhases = {
    "placed", "trainers_started", "data_ready", "rendezvous", "weights_loaded", "first_step"};

// The phases a trainer reports (the rest are the coordinator's own).
inline bool IsTrainerStartupPhase(std::string_view name) {
  return name == "data_ready" || name == "rendezvous" || name == "weights_loaded" || name == "first_step";
}

inline bool IsStartupPhase(std::string_view name) {
  for (std::string_view p : kStartupPhases) {
    if (p == name) return true;
  }
  return false;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_STARTUP_PHASES_H_
