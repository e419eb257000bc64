// Collectives for the sharding engine: rendezvous through a c10d TCPStore, process groups
// (ProcessGroupGloo on CPU, ProcessGroupNCCL when this LibTorch has CUDA and NCCL), and
// the few operations the engine needs, each returning a CommWork to wait on.
//
// Failure model. Every wait is bounded by the group's timeout (default 120 s): a peer
// that died makes the survivors' next collective fail (Gloo notices the closed socket at
// once; otherwise the timeout fires), and the error comes back as a Status naming the
// operation. As a backstop against a wait that never returns (a wedged transport), a
// watchdog thread ends the process with exit code 3 and an error line on stderr when a
// wait outlives the timeout by more than a grace period. A trainer therefore never hangs
// on a dead peer.
//
// All ranks of a group must issue the same operations in the same order (as with any
// c10d process group). Tensors passed in must stay alive until the work is waited on.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace c10d {
class Store;
}

namespace llamafleet::trainer {

// A collective in flight. Wait() blocks until it completes (or fails / times out) and
// runs any local post-processing (e.g. the local sum of a composed reduce-scatter).
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Idempotent: later calls return the first result.
  virtual absl::Status Wait() = 0;
};

// A process group: `size()` ranks that run collectives together. Sizes of 1 are valid
// (every operation is then a local copy or a no-op).
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl" or "local".
  virtual std::string backend() const = 0;

  // out[r*S:(r+1)*S] = in of rank r, where in is [S] and out is [size*S], both contiguous
  // and of the same dtype (any dtype: bytes are moved, no arithmetic).
  virtual std::unique_ptr<CommWork> AllGather(at::Tensor out, at::Tensor in) = 0;
  // out = sum over ranks r of in_r[rank*S:(rank+1)*S]; in is [size*S], out is [S], same
  // floating dtype. Gloo has no reduce_scatter: it is composed from all-to-all plus a
  // local sum over ranks in rank order (deterministic, and the same bandwidth as a ring
  // reduce-scatter).
  virtual std::unique_ptr<CommWork> ReduceScatterSum(at::Tensor out, at::Tensor in) = 0;
  // t = sum over ranks of t, in place.
  virtual std::unique_ptr<CommWork> AllReduceSum(at::Tensor t) = 0;
  // t = t of rank `root`, in place.
  virtual std::unique_ptr<CommWork> Broadcast(at::Tensor t, int root) = 0;
};

// A Comm of one rank (single process, or NO_SHARD's shard "group").
std::unique_ptr<Comm> MakeLocalComm();

// Keys and values shared by the job's ranks, for work off the training thread (the
// background checkpoint writer): collectives there would interleave with the training
// thread's. Thread-safe; each instance has its own connection.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until some rank has set `key` (DEADLINE_EXCEEDED after `timeout`).
  virtual absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};
// A store for one process (world size 1).
std::unique_ptr<KeyValueStore> MakeLocalKeyValueStore();

struct RendezvousOptions {
  int rank = 0;                    // global rank
  int world_size = 1;              // ranks in the job
  std::string master_addr;         // TCPStore host (rank 0 serves it)
  int master_port = 0;             // TCPStore port
  std::chrono::milliseconds timeout{120000};  // rendezvous and every collective
  std::string backend = "auto";    // auto | gloo | nccl (auto: nccl when device is CUDA)
  at::Device device{at::kCPU};     // tensors' device (picks NCCL's device)
};

// The job's communicators: the world and, for sharding, subgroups of it.
class DistContext {
 public:
  // Connects to (rank 0: serves) the TCPStore at master_addr:master_port and creates the
  // world group. World size 1 needs no address and creates nothing remote. Errors name
  // the address and what failed (refused connection, timeout, unknown backend).
  static absl::StatusOr<std::unique_ptr<DistContext>> Create(const RendezvousOptions& options);
  ~DistContext();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  Comm& world() { return *world_; }

  // A subgroup: every rank calls this with the same `groups` (a partition of all ranks,
  // each group listed in ascending rank order) and the same `tag`, and gets the group it
  // belongs to. Creating groups is itself a rendezvous, so all ranks must call in the
  // same order.
  absl::StatusOr<std::unique_ptr<Comm>> NewGroup(const std::vector<std::vector<int>>& groups,
                                                 const std::string& tag);

  // A new connection to the job's TCPStore under `prefix` (a local store for world size 1),
  // never shared with the process groups.
  absl::StatusOr<std::unique_ptr<KeyValueStore>> NewKeyValueStore(const std::string& prefix);

 private:
  DistContext() = default;
  absl::StatusOr<std::unique_ptr<Comm>> MakeGroup(const std::string& prefix, int rank, int size);

  RendezvousOptions options_;
  std::string backend_;  // resolved: gloo | nccl | local
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Comm> world_;
};

// True when this build can create NCCL process groups.
bool HaveNccl();

// The watchdog backstop (see the file comment). Arm() before a blocking wait that must
// finish within `limit`; the returned guard disarms on destruction. Exposed for tests.
class WatchdogGuard {
 public:
  WatchdogGuard(std::string what, std::chrono::milliseconds limit);
  ~WatchdogGuard();
  WatchdogGuard(const WatchdogGuard&) = delete;
  WatchdogGuard& operator=(const WatchdogGuard&) = delete;

 private:
  uint64_t id_;
};

}  // namespace llamafleet::trainer
