// The training loop, evaluation and export entry points behind `llamafleet-train`.
//
// Loss semantics (fixed for every later issue): the loss of a global batch is the mean
// over all of its unmasked target tokens, however the batch is split across ranks and
// micro-batches. Each micro-batch contributes sum(token losses) / (global target count),
// where the count is summed over all micro-batches and ranks of the step before the
// first backward, so accumulated gradients are exactly those of the global mean.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "config.h"
#include "data.h"
#include "eval_samples.h"
#include "lora.h"
#include "safetensors.h"
#include "jobspec/memory_estimate.h"
#include "worker/trainer_events.h"

namespace llamafleet::trainer {

enum class LrScheduleKind { kConstant = 1, kStep = 2, kCosine = 3 };

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kConstant;  // shape of the schedule
  double gamma = 0.85;                              // STEP: lr * gamma^epoch
  int64_t warmup_steps = 0;                         // CONSTANT/COSINE: linear warmup steps
  double min_lr_ratio = 0.0;                        // COSINE: final lr / peak lr
};

// Learning rate of optimizer step `step` (0-based) in epoch `epoch` (0-based) of a run of
// `total_steps` steps. Warmup: step s < warmup uses lr * (s + 1) / warmup. Cosine after
// warmup: progress p = (s - warmup) / max(1, total - warmup), lr * (min + (1 - min) *
// (1 + cos(pi * p)) / 2). Step: lr * gamma^epoch.
double LearningRate(const LrScheduleOptions& schedule, double lr, int64_t step, int64_t epoch,
                    int64_t total_steps);

// torchrun-style process placement (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT); all absent means a single process.
struct DistEnv {
  int rank = 0;              // global rank
  int world_size = 1;        // ranks in the job
  int local_rank = 0;        // rank on this node
  int local_world_size = 1;  // ranks on this node
  std::string master_addr;   // rendezvous host (rank 0's node)
  int master_port = 0;       // rendezvous port
};
absl::StatusOr<DistEnv> DistEnvFromEnvironment();

// One source of a training mixture (the JobSpec's data.train[i]).
struct TrainSourceOptions {
  std::string path;                       // JSONL
  DataFormat format = DataFormat::kText;  // of its records
  double weight = 1;                      // relative share of the rows drawn, > 0
};

// One named evaluation set (the JobSpec's data.eval[i]).
struct EvalSetOptions {
  std::string name;  // metric name: the eval event's `set`, TensorBoard's eval/<name>/...
  std::string path;  // JSONL
  DataFormat format = DataFormat::kText;
};

// Everything a training run needs, resolved from a JobSpec (defaults already applied).
struct TrainOptions {
  std::string model_path;      // HF directory; exclusive with preset
  std::string preset;          // built-in shape with seeded random init
  std::string tokenizer_path;  // "" = <model_path>/tokenizer.model (unless tokens data)
  std::string train_path;      // JSONL training data
  std::string eval_path;       // optional JSONL eval data ("" = none)
  // data.train's sources (a weighted mixture, mixture_sampler.h, when there are several);
  // empty: train_path in `format`, one source.
  std::vector<TrainSourceOptions> train_sources;
  // data.eval's named sets, each evaluated at every evaluation; the first decides early
  // stopping and export_best. Empty: eval_path in `format`, unnamed (today's eval event).
  std::vector<EvalSetOptions> eval_sets;
  // The JobSpec's kind evaluate: load the model (and the LoRA adapter at
  // lora.adapter_path), evaluate every eval set once as a training run's evaluation does
  // (the "eval" lines, at step 0), then "finished"; no training data, no optimizer step,
  // no checkpoint, no export.
  bool evaluate_only = false;
  std::string token_cache_dir;  // tokenized datasets (token_cache.h); "" = DefaultTokenCacheDir()
  uint64_t token_cache_max_bytes = 0;  // bound on that directory's entries; 0 = none
  DataFormat format = DataFormat::kText;
  std::string chat_template;               // CHAT: data.chat_template ("" = the model's)
  TrainOn train_on = TrainOn::kAssistant;  // CHAT: which tokens carry loss
  BatchingMode batching = BatchingMode::kPacking;
  int64_t epochs = 1;           // passes over the data; 0 = until max_steps
  int64_t max_steps = 0;        // optimizer steps; 0 = no limit
  int64_t micro_batch = 4;      // rows per rank per micro-step
  int64_t grad_accum = 1;       // micro-steps per optimizer step (ignored with global_batch)
  int64_t global_batch = 0;     // rows per optimizer step over all ranks; 0 = micro x accum x world.
                                // Set: grad_accum = global_batch / (micro_batch x WORLD_SIZE), so
                                // the rows of each step, and the result, do not depend on the world
  int64_t seq_len = 4096;       // tokens per row (capped by max_position_embeddings)
  double lr = 1e-4;             // peak learning rate
  double beta1 = 0.9;           // AdamW
  double beta2 = 0.999;         // AdamW
  double eps = 1e-8;            // AdamW
  double weight_decay = 0.0;    // AdamW, decoupled
  LrScheduleOptions schedule;   // learning-rate schedule
  // training.objective "dpo" (dpo_loss.h): the data are PREFERENCE pairs, micro_batch and
  // global_batch count pairs (two rows each), and LoRA is required.
  bool dpo = false;
  double dpo_beta = 0.1;             // training.dpo.beta
  double dpo_label_smoothing = 0.0;  // training.dpo.label_smoothing
  double grad_clip = 0.0;       // max global grad norm; 0 = off
  uint64_t seed = 42;           // init and data order
  int64_t log_every = 10;       // metrics line every N optimizer steps
  int64_t eval_every = 0;       // evaluate on eval_path every N steps (and after the last); 0 = after the last
  // Early stopping: stop after `patience` evaluations in a row whose eval loss did not go
  // below best - min_delta (0 = off). The state travels in checkpoints (TrainerProgress).
  int early_stopping_patience = 0;
  double early_stopping_min_delta = 0.0;
  bool export_best = false;     // export the weights of the lowest-eval-loss checkpoint, not the last
  // eval.samples (eval_samples.h): generations by rank 0 after each evaluation's loss.
  EvalSamplesOptions samples;
  std::string compute_dtype = "fp32";  // fp32 | bf16: activations and gathered params
  bool shuffle = true;          // shuffle rows each epoch
  std::string checkpoint_dir;   // where step-N checkpoints go ("" = none)
  int64_t checkpoint_every = 0;  // optimizer steps between checkpoints; 0 = at the end only
  bool checkpoint_async = true;  // write checkpoints on a background thread (checkpoint_writer.h)
  std::string export_dir;       // HF export at the end ("" = none); with LoRA, the PEFT adapter
  bool merge = false;           // LoRA: also the merged model in <export_dir>/merged
  // LoRA (lora.h); lora.enabled() false = full finetuning. With adapter_path, r = 0, alpha
  // <= 0, dropout < 0 and empty target_modules mean "the adapter's own value".
  LoraOptions lora;
  StDtype export_dtype = StDtype::kBF16;
  // GGUF beside the export (gguf_export.h): "" = none, else f16 | bf16 | q8_0. With LoRA it
  // goes with the merged model (merge is required).
  std::string gguf_dtype;
  uint64_t max_shard_bytes = 5120ull << 20;
  double peak_tflops = 0.0;     // MFU denominator; 0 = from the device table
  std::string device = "auto";  // auto | cpu | cuda
  // Sharding (the JobSpec's fsdp block); see sharded_engine.h.
  std::string sharding = "FULL_SHARD";  // FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD
  int hybrid_group_size = 0;            // HYBRID_SHARD: ranks per shard group (0 = LOCAL_WORLD_SIZE)
  std::string reduce_dtype = "fp32";    // fp32 | bf16 | fp16: gradient collectives
  int max_inflight_all_gathers = 2;     // units gathered ahead of use, at most
  // Tensor parallelism (the JobSpec's parallelism block; model.h): ranks per tensor-parallel
  // group, consecutive local ranks. The data-parallel world is WORLD_SIZE / tensor_parallel.
  int tensor_parallel = 1;
  // What decoder layers keep for backward (model.h): none | full | selective.
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;
  std::string resume;                   // "" | "latest" (newest in checkpoint_dir) | a step-N dir
  // The job's recorded checkpoints, newest first (the agent's --resume-candidates). When
  // non-empty it replaces `resume`: the newest that verifies on every rank is used, older
  // ones are the fallback, and none verifying is UNAVAILABLE (retryable), never a fresh start.
  std::vector<trainer_events::ResumeCandidate> resume_candidates;
  int collective_timeout_s = 120;       // a collective (or rendezvous) longer than this fails
  // Directories the job may use (the coordinator's path roots, passed by the worker as
  // --path-root). Non-empty: every path above is re-checked with symbolic links resolved
  // before it is opened (worker/path_guard.h); empty: no confinement (a manual run).
  std::vector<std::string> path_roots;
  // Owner written into the export's marker file (LLAMAFLEET_JOB_ID): only an earlier export
  // of the same job may be replaced.
  std::string job_id;
  // The coordinator's attempt number (LLAMAFLEET_ATTEMPT; 0 for a run started by hand):
  // rank 0 writes TensorBoard scalars to <checkpoint_dir>/tensorboard/attempt-<N>.
  int64_t attempt = 0;
};

// The run's training sources: train_sources, else train_path in `format` with weight 1
// (none when that is empty too).
std::vector<TrainSourceOptions> TrainSourcesOf(const TrainOptions& options);
// The run's eval sets: eval_sets, else eval_path in `format` as one set with an empty name
// (its metrics keep their unnamed tags); none without either.
std::vector<EvalSetOptions> EvalSetsOf(const TrainOptions& options);
// Whether any training or eval file is read with a tokenizer (its format is not tokens).
bool DataNeedsTokenizer(const TrainOptions& options);
// Whether any source or eval set is in the chat format (a chat template is then resolved).
bool DataUsesChat(const TrainOptions& options);

// Micro-steps per optimizer step on `world_size` ranks: options.grad_accum, or with a global
// batch global_batch / (micro_batch x world_size), INVALID_ARGUMENT (naming
// training.global_batch_size and the world sizes that work) when that does not divide.
absl::StatusOr<int64_t> GradAccumFor(const TrainOptions& options, int world_size);

// The coordinator's memory-fit estimate (jobspec/memory_estimate.h) for a run as it
// really is: its world size, device, sequence length and grad_accum. On a CPU the
// workspace is the process as it was before training allocated anything (`runtime_rss`);
// the trainer reports it in its "started" event next to the measured peak_mem_bytes.
struct ShardingOptions;
sched::MemoryEstimate EstimateForRun(const LlamaConfig& config, const TrainOptions& options,
                                     const ShardingOptions& sharding, int world_size, int64_t seq_len,
                                     int64_t grad_accum, const at::Device& device, int64_t runtime_rss,
                                     const LoraOptions& lora = {});

// Runs training to completion. Metrics and events go to stdout as JSON lines (rank 0),
// human logs to stderr. Returns the first error (bad input names the file/field).
absl::Status RunTraining(const TrainOptions& options, const DistEnv& env);

struct EvalOptions {
  std::string model_dir;       // HF directory
  std::string data_path;       // JSONL
  std::string tokenizer_path;  // "" = <model_dir>/tokenizer.model (unless tokens data)
  DataFormat format = DataFormat::kText;
  std::string chat_template;  // CHAT: as TrainOptions'
  TrainOn train_on = TrainOn::kAssistant;
  BatchingMode batching = BatchingMode::kPadding;
  int64_t seq_len = 0;         // 0 = max_position_embeddings
  int64_t micro_batch = 4;     // rows per forward
  std::string device = "auto";
};
struct EvalResult {
  double loss = 0;        // mean over all target tokens
  int64_t tokens = 0;     // target tokens counted
  double perplexity = 0;  // exp(loss)
};
absl::StatusOr<EvalResult> RunEval(const EvalOptions& options);

// Re-exports an HF-format directory (a model or a step-N checkpoint) to `out_dir`, with the
// tokenizer files found in `checkpoint_dir`; with a non-empty `gguf_dtype` (f16, bf16,
// q8_0) also <out_dir>/model.gguf and an Ollama Modelfile (gguf_export.h).
absl::Status RunExport(const std::string& checkpoint_dir, const std::string& out_dir,
                       StDtype dtype, uint64_t max_shard_bytes, const std::string& gguf_dtype = "");

// Peak dense bf16 TFLOP/s of a device by name (A100 312, H100/H200 989); 0 if unknown.
double PeakTflopsForDevice(const std::string& device_name);

}  // namespace llamafleet::trainer
