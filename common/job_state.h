#ifndef LLAMAFLEET_COMMON_JOB_STATE_H_
#define LLAMAFLEET_COMMON_JOB_STATE_H_

// Which job and task states are final. A terminal state never changes again: the store
// refuses transitions out of it and every client stops watching at it.

#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

inline bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

// Whether `event` is the one that ended its job: into a terminal state from another one.
// A note recorded on a finished job (a webhook's delivery) keeps the state and ends nothing.
inline bool EndsJob(const v1::JobEvent& event) {
  return IsTerminal(event.to_state()) && event.from_state() != event.to_state();
}

inline bool IsTerminalTask(v1::TaskState state) {
  return state == v1::TASK_SUCCEEDED || state == v1::TASK_FAILED || state == v1::TASK_KILLED;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_JOB_STATE_H_
