// Writing sharded checkpoints (the layout is sharded_checkpoint.h's) off the step loop.
//
// A save has two parts:
//   TakeSnapshot  on the training thread, between steps: copies this rank's fp32 master,
//                 exp_avg and exp_avg_sq shards (replica 0 only: the others hold identical
//                 shards) into a staging buffer laid out as the shard file will be, with
//                 the progress, RNG state and engine metadata. No collective. This is all
//                 the step loop waits for.
//   the write     on a background thread: rank 0 prepares step-N.partial; every rank
//                 writes its files straight from the staging buffer (O_DIRECT, no copy,
//                 direct_file_writer.h), checksums them (CRC-32C, computed as they are
//                 written), fsyncs them and publishes their names, sizes and checksums
//                 under a key of the job's TCPStore; rank 0 waits for
//                 every rank's key, writes config.json and the manifest last, renames the
//                 directory into place and publishes the outcome, which every rank waits
//                 for. So every rank's save ends with the same result, a checkpoint exists
//                 only once every file is durable, and the background thread never runs a
//                 collective that could interleave with the training thread's.
// At most one save is in flight: Start() waits for the previous one first. With
// `async = false` Start() also waits for its own save (the synchronous mode).
//
// A rank killed during the write leaves step-N.partial without a manifest: the previous
// checkpoint stays the newest complete one, and the next save of step N removes the debris.
// Host memory: the staging buffer, 12 bytes per parameter of this rank's shard, mapped at
// the first save and kept for the next ones (so no save pays page faults again).
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives.h"
#include "config.h"
#include "direct_file_writer.h"
#include "sharded_checkpoint.h"
#include "sharded_engine.h"

namespace llamafleet::trainer {

// One rank's state at a checkpoint step, in host memory.
struct CheckpointSnapshot {
  TrainerProgress progress;
  LlamaConfig config;
  int rank = 0;
  int world_size = 1;
  int shard_rank = 0;
  int shard_size = 1;
  int tp_rank = 0;           // tensor-parallel rank and group size (sharded_checkpoint.h)
  int tp_size = 1;
  bool writes_shard = true;  // replica 0 of its shard
  std::string strategy;      // ShardingStrategyName
  int64_t optimizer_steps = 0;
  double loss_scale = 1.0;
  std::vector<std::string> unit_names;
  std::vector<int64_t> unit_numel, unit_padded, unit_shard;
  // The shard file's bytes as they go to disk: the safetensors prefix, then per unit its
  // param, exp_avg and exp_avg_sq (fp32 [shard]). Unused unless writes_shard.
  std::shared_ptr<PageAlignedBuffer> shard_image;
  size_t shard_image_bytes = 0;
  std::string rng_cpu;  // hex of the default CPU generator's state
};

// Copies what a checkpoint of `engine` needs (see the file comment) into `staging`, which
// it grows as needed and which must not be in use by a save. Not a collective.
absl::StatusOr<CheckpointSnapshot> TakeSnapshot(ShardedEngine& engine, const LlamaConfig& config,
                                                const TrainerProgress& progress,
                                                std::shared_ptr<PageAlignedBuffer> staging);

struct CheckpointWriterOptions {
  std::string root;   // checkpoints go to <root>/step-N
  // How reports name `root` (the spec's checkpoint.dir when `root` is the FdPath of the
  // held directory); "" = `root`.
  std::string shown_root;
  bool async = true;  // false: Start() returns once the save is complete
  // How long a rank waits for another's part of a save (rank 0 for every rank's files,
  // the others for the outcome).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Tests: called on the writer thread after this rank's files are written, before they
  // are published (e.g. to SIGKILL the rank mid-save).
  std::function<void(const CheckpointSnapshot&)> after_files_written;
};

class CheckpointWriter {
 public:
  // `kv`: a store shared by the job's ranks (DistContext::NewKeyValueStore).
  CheckpointWriter(std::unique_ptr<KeyValueStore> kv, CheckpointWriterOptions options);
  // A save still in flight is abandoned, not waited for (its thread may be blocked on a
  // peer that died): it leaves step-N.partial, which the next save of step N removes.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the save in flight, if any (returning its error, or its result through
  // `finished` when given), then takes the snapshot of `engine` and starts writing it.
  // Every rank calls Start for the same steps in the same order.
  absl::Status Start(ShardedEngine& engine, const LlamaConfig& config, const TrainerProgress& progress,
                     std::optional<SavedCheckpoint>* finished = nullptr);
  // The save that finished since the last call, without blocking: nullopt while one is
  // running or when none finished. The error of a failed save. Not a collective.
  absl::StatusOr<std::optional<SavedCheckpoint>> Poll();
  // Blocks until the save in flight is finished on every rank; this rank's result
  // (nullopt when none was running or Poll already returned it). A collective, called by
  // every rank at the same point: it waits in rounds of a one-number all-reduce over
  // `engine`'s ranks, so a rank that died during its write fails the wait within the
  // collective timeout (waiting for its files in the store alone would not end).
  absl::StatusOr<std::optional<SavedCheckpoint>> Wait(ShardedEngine& engine);

 private:
  struct Save;  // one save's state, shared with its thread

  // Joins this rank's writer thread (which must be done, or is waited for); its result.
  absl::StatusOr<std::optional<SavedCheckpoint>> Collect();

  std::shared_ptr<KeyValueStore> kv_;
  const CheckpointWriterOptions options_;
  int64_t sequence_ = 0;  // saves started: names each save's store keys
  bool unwaited_ = false;  // a save was started that no Wait has seen end on every rank
  std::shared_ptr<Save> save_;
  std::thread thread_;
  std::shared_ptr<PageAlignedBuffer> staging_ = std::make_shared<PageAlignedBuffer>();
};

}  // namespace llamafleet::trainer
