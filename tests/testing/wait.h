#ifndef LLAMAFLEET_TESTS_TESTING_WAIT_H_
#define LLAMAFLEET_TESTS_TESTING_WAIT_H_

// Waiting for something to happen in another thread or process: poll a predicate until
// it holds or a deadline passes, instead of sleeping a fixed time and hoping.

#include <functional>

#include "absl/time/time.h"

namespace llamafleet::testing {

// Checks `done` every `interval` until it holds (true) or `timeout` has passed (false).
// `done` is checked at least once, and once more at the deadline, so a condition that
// becomes true while the last interval sleeps still counts.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout,
             absl::Duration interval = absl::Milliseconds(20));

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_WAIT_H_
