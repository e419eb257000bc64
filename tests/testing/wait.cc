#include "tests/testing/wait.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace llamafleet::testing {

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout, absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    absl::SleepFor(std::min(interval, deadline - now));
  }
  return true;
}

}  // namespace llamafleet::testing
