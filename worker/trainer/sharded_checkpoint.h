// Sharded checkpoints of a ShardedEngine: every rank writes its own files, rank 0 writes a
// manifest last (checkpoint_writer.h writes them, off the step loop), and a checkpoint can
// be resumed on any world size, strategy and tensor-parallel degree (tensor_parallel.h
// reslices it).
//
// Layout of <root>/step-N/:
//   shard-SSSSS-of-NNNNN.safetensors  shard S of N (N = shard group size x T): for each unit
//                                     u, "u.param", "u.exp_avg", "u.exp_avg_sq", fp32 [S_u]
//                                     (elements [s*S_u, (s+1)*S_u) of the padded flat unit
//                                     of tensor-parallel rank S / (N / T), s = S % (N / T)).
//                                     Written by the ranks of replica 0 only (replicas hold
//                                     identical shards). T = 1 without tensor parallelism.
//   rank-RRRRR.json                   per-rank state: step, epoch, sampler position, RNG.
//   config.json                       the model config (rank 0), for export.
//   manifest.json                     written last by rank 0 (write + fsync + rename): format,
//                                     step, epoch, loss, world size, strategy, shard group
//                                     size, tensor_parallel T, optimizer steps, loss scale,
//                                     units (name, and numel and padded of one TP rank's
//                                     slice), and every file with its size and CRC-32C
//                                     (checkpoint_manifest.h).
// The directory is assembled as step-N.partial and renamed to step-N once the manifest is
// in place, so a reader that sees step-N with a manifest sees a complete checkpoint, and a
// checkpoint whose files do not match the manifest (truncated, altered) is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint_manifest.h"
#include "config.h"
#include "hf_io.h"
#include "nlohmann/json.hpp"
#include "sharded_engine.h"

namespace llamafleet::trainer {

// What the training loop adds to a checkpoint beyond the engine's state.
struct TrainerProgress {
  int64_t step = 0;        // optimizer steps completed
  int64_t epoch = 0;       // epoch of the next step
  double loss = 0;         // loss of the last step
  uint64_t seed = 0;       // run seed (data order)
  int64_t tokens_seen = 0; // tokens trained on so far
  // The data position, independent of the world size: rows (sequences) consumed so far
  // and rows per optimizer step. 0 in checkpoints written before they were recorded.
  int64_t rows_seen = 0;
  int64_t global_batch = 0;
  // Evaluation (training.eval_every_steps): the eval loss at this step (NaN: none ran at
  // it), and early stopping's state as of this step: the lowest eval loss so far and its
  // step (NaN / 0: no evaluation yet), and the evaluations since the last one that
  // improved on the best by at least min_delta.
  double eval_loss = std::numeric_limits<double>::quiet_NaN();
  double best_eval_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t best_eval_step = 0;
  int64_t evals_without_improvement = 0;
};

// The layout's names, shared by the reader below and the writer (checkpoint_writer.h).
extern const char* const kShardKinds[3];  // per unit: "param", "exp_avg", "exp_avg_sq"
std::string ShardFileName(int index, int count);  // shard-SSSSS-of-NNNNN.safetensors
std::string RankFileName(int rank);               // rank-RRRRR.json
std::string CpuRngStateHex();                     // the default CPU generator's state
absl::Status FsyncDir(const std::string& dir);

struct SavedCheckpoint {
  std::string path;             // <root>/step-N (holds the manifest)
  int64_t step = 0;             // optimizer steps it holds
  double loss = 0;              // loss of its last step
  double eval_loss = std::numeric_limits<double>::quiet_NaN();  // the eval at its step (NaN: none)
  double write_seconds = 0;     // this rank's write: start to complete (checkpoint_writer.h)
  int64_t bytes = 0;            // all files, manifest included
  std::string manifest_sha256;  // hex sha256 of manifest.json
};

// Verifies a recorded checkpoint before a resume: `dir`/manifest.json must hash to
// `manifest_sha256` (skipped when empty), be a complete manifest whose files all exist with
// their recorded sizes, and the files with index % parts == part must match their recorded
// checksum (so `parts` ranks share the hashing; parts = 1 checks every file). DATA_LOSS or
// NOT_FOUND naming the file otherwise.
absl::Status VerifyCheckpoint(const std::string& dir, const std::string& manifest_sha256, int part = 0,
                              int parts = 1);

// A complete checkpoint, opened for reading (files memory-mapped lazily).
class ShardedCheckpoint {
 public:
  // Reads and checks the manifest (NOT_FOUND without one: an incomplete checkpoint) and
  // that every listed file exists with its recorded size (DATA_LOSS naming the file
  // otherwise). `verify_hashes` also checks every file's checksum.
  static absl::StatusOr<std::unique_ptr<ShardedCheckpoint>> Open(const std::string& dir,
                                                                 bool verify_hashes = false);
  ~ShardedCheckpoint();

  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_.json; }
  const CheckpointManifest& parsed_manifest() const { return manifest_; }
  const LlamaConfig& config() const { return config_; }
  int64_t step() const { return manifest_.step; }
  int world_size() const { return manifest_.world_size; }
  int shard_group_size() const { return manifest_.shard_group_size; }
  int tensor_parallel() const { return manifest_.tensor_parallel; }
  TrainerProgress progress() const;

  // Elements [begin, end) of tensor-parallel rank `tp_rank`'s flat `kind` ("param",
  // "exp_avg", "exp_avg_sq") of unit `unit` into `out` (fp32 CPU [end - begin]), reading
  // only the overlapping slices of the shard files (whose checksum is checked the first time
  // each is opened).
  absl::Status ReadRange(int tp_rank, int unit, const std::string& kind, int64_t begin, int64_t end,
                         at::Tensor out);
  // A ShardSource over the master parameters of rank `tp_rank` of `tensor_parallel`, for
  // the unsplit layout `full` (valid while this object lives).
  ShardSource ParamSource(const std::vector<UnitLayout>& full, int tensor_parallel = 1, int tp_rank = 0);

  // Restores the AdamW moments, step count and loss scale of `engine` (any world size,
  // strategy or tensor-parallel degree: the slices this rank's shards cover are read), and
  // this rank's RNG state when the checkpoint has a file for it. `full`: the unsplit
  // layout of the engine's.
  absl::Status RestoreEngine(ShardedEngine& engine, const std::vector<UnitLayout>& full);
  // Overwrites the engine's master parameters with this checkpoint's (any world size,
  // strategy or tensor-parallel degree, as above): exporting an earlier step's weights.
  absl::Status RestoreParams(ShardedEngine& engine, const std::vector<UnitLayout>& full);

  // The units must match the unsplit layout the caller will train (same model shape).
  absl::Status CheckLayout(const std::vector<UnitLayout>& full) const;

 private:
  ShardedCheckpoint() = default;
  absl::StatusOr<const SafetensorsFile*> Shard(int index);
  absl::Status FillEngine(ShardedEngine& engine, const std::vector<UnitLayout>& full, const char* kind,
                          const std::function<at::Tensor(int)>& dst);

  std::string dir_;
  CheckpointManifest manifest_;
  LlamaConfig config_;
  std::map<std::string, CheckpointManifest::File> files_;  // by name
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<int64_t> unit_padded_;
};

// The newest complete checkpoint under `root` (step-N directories whose manifest exists
// and whose files have their recorded sizes); NOT_FOUND when there is none. Incomplete or
// damaged ones are skipped with a warning.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& root);

// True when `dir` holds a sharded checkpoint (a manifest.json of this format).
bool IsShardedCheckpoint(const std::string& dir);

// Consolidates a sharded checkpoint into an HF-format directory, one unit at a time.
absl::Status ExportShardedCheckpoint(const std::string& dir, const std::string& out_dir,
                                     const ExportOptions& options);

// Preemption: SIGTERM asks the trainer to checkpoint and stop. The handler only records
// the request (async-signal-safe); the loop polls PreemptionRequested() after each step
// and agrees on it across ranks (an all-reduce), so every rank saves at the same step.
void InstallPreemptionHandler();
bool PreemptionRequested();

// Hex sha256 of a file's contents (streamed).
absl::StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace llamafleet::trainer
