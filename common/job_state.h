#ifndef LLAMAFLEET_COMMON_JOB_STATE_H_
#define LLAMAFLEET_COMMON_JOB_STATE_H_

// Which job and task states are final. A terminal state never changes again: the store
// refuses transitions out of it and every client stops watching at it.

#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

inline bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

inline bool IsTerminalTask(v1::TaskState state) {
  return state == v1::TASK_SUCCEEDED || state == v1::TASK_FAILED || state == v1::TASK_KILLED;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_JOB_STATE_H_
