#ifndef LLAMAFLEET_COMMON_CLOCK_H_
#define LLAMAFLEET_COMMON_CLOCK_H_

#include <atomic>

#include "absl/time/time.h"

namespace llamafleet {

// Where every component gets the time from, so tests advance time instead of sleeping.
// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process-wide wall clock. Never null; never deleted.
  static Clock* Real();
};

// A clock that moves only when told to. Starts at `start`.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_ns_(absl::ToUnixNanos(start)) {}

  absl::Time Now() const override { return absl::FromUnixNanos(now_ns_.load()); }
  void Advance(absl::Duration d) { now_ns_ += absl::ToInt64Nanoseconds(d); }
  void Set(absl::Time t) { now_ns_ = absl::ToUnixNanos(t); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_CLOCK_H_
