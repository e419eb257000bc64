#ifndef LLAMAFLEET_WORKER_TRAINER_SHARDED_ENGINE_INTERNAL_H_
#define LLAMAFLEET_WORKER_TRAINER_SHARDED_ENGINE_INTERNAL_H_

// Shared by the files that implement ShardedEngine (sharded_engine*.cc); not an interface.

#include <c10/util/Exception.h>

#include <string>

#include "absl/status/status.h"

namespace llamafleet::trainer {

// Where the engine runs inside Torch (autograd hooks, functions without a status return):
// a failed collective becomes a c10::Error carrying s's message, which the caller's
// boundary turns back into a status.
inline void ThrowIfError(const absl::Status& s) { TORCH_CHECK(s.ok(), std::string(s.message())); }

}  // namespace llamafleet::trainer

#endif  // LLAMAFLEET_WORKER_TRAINER_SHARDED_ENGINE_INTERNAL_H_
