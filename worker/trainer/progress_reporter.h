// A rank's progress as its worker sees it: counters the training thread updates (steps
// done, collective waits entered and the time blocked in them) and a background thread
// that prints them as a "progress" line (worker/trainer_events.h) about once a second.
// The line keeps coming while the training thread is blocked in a collective, and stops
// only when the whole process does (SIGSTOP, a wedged process): that is how the
// coordinator tells which rank a hung gang waits for (server/cluster/hang_rules.h).
// No Torch; the counters are lock-free atomics.
#pragma once

#include <chrono>
#include <cstdint>

namespace llamafleet::trainer {

// `step` optimizer steps are done (called by the training loop after each step).
void NoteStepDone(int64_t step);

// Marks the calling thread as waiting in a collective for its lifetime: the collective
// count goes up on entry, and the time inside is added to the rank's wait seconds.
class CollectiveWaitScope {
 public:
  CollectiveWaitScope();
  ~CollectiveWaitScope();
  CollectiveWaitScope(const CollectiveWaitScope&) = delete;
  CollectiveWaitScope& operator=(const CollectiveWaitScope&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
  bool outer_;  // nested waits (a composed collective) count once
};

// Starts printing a progress line every `interval` (once; later calls do nothing).
void StartProgressReporter(std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
// Stops the printing thread and waits for it (before the exit record: no progress line
// follows it). Idempotent; nothing when none was started.
void StopProgressReporter();

}  // namespace llamafleet::trainer
