// The training loop of `llamafleet-train train` as an object: Setup() resolves the model,
// data, process groups, engine and resume point; Run() steps, checkpoints, evaluates and
// finishes (export, the finished event). One Trainer per process and run.
//
// Start-up is timed in phases, each reported by rank 0 as a `phase` event line (those
// before the "started" line right after it) and all of them in one log line: data_ready (the token cache hit or built), rendezvous (process
// groups up), weights_loaded (the engine holds this rank's shards, from the HF weights, a
// checkpoint or the seeded init), first_step (the first optimizer step done).
#pragma once

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint_writer.h"
#include "collectives.h"
#include "common/dir_fd.h"
#include "common/tensorboard_writer.h"
#include "config.h"
#include "data.h"
#include "mixture_sampler.h"
#include "model.h"
#include "sharded_engine.h"
#include "tokenizer.h"
#include "train.h"
#include "train_parts.h"
#include "worker/trainer_events.h"

namespace llamafleet::trainer {

class HfModelDir;
class ShardedCheckpoint;

class Trainer {
 public:
  // `runtime_rss`: the process's resident bytes before training allocated anything (the
  // CPU workspace term of the memory estimate).
  Trainer(const TrainOptions& options, const DistEnv& env, int64_t runtime_rss);
  ~Trainer();

  // Setup, then every step to the end (or a preemption stop). Throws c10::Error from
  // Torch; RunTraining converts it.
  absl::Status Run();

 private:
  // Setup's stages, in order (trainer_setup.cc).
  absl::Status Setup();
  absl::Status CheckOptionsAndDevice();  // paths, output options, device, dtype, seed
  // config_, tokenizer_, chat template, layouts, tensor parallelism, seq_len_, the data and
  // the step count; *hf holds the model directory when there is one.
  absl::Status LoadModelShapeAndData(std::unique_ptr<HfModelDir>* hf);
  // Process groups and the engine, its weights from the resumed checkpoint, `hf` or the
  // seeded init.
  absl::Status CreateEngine(HfModelDir* hf);
  // The step, data position, last loss and early-stopping state a checkpoint carries.
  absl::Status RestoreProgress(ShardedCheckpoint& resume, const std::string& resume_dir);
  // The model over the engine, the FLOPs per token, rank 0's log lines and "started" event.
  void CreateModelAndAnnounce();
  absl::Status CreateCheckpointWriter();
  absl::Status ResolveLora();  // lora_ from the options and adapter_path; the layout's adapters
  absl::Status ChooseResume(std::string* resume_dir);
  struct StepResult {
    double loss = 0;       // the step's mean loss over the global target positions
    bool preempt = false;  // some rank was asked to stop (SIGTERM) before the step's end
  };
  // One optimizer step: one blocking collective, read once on the host (host_sync.h).
  absl::StatusOr<StepResult> Step(int64_t step);
  // Step's DPO form (trainer_dpo.cc, dpo_loss.h): `loss` is the mean DPO loss over the
  // global batch's pairs; the step's rewards are added to interval_dpo_.
  absl::StatusOr<StepResult> DpoStep(int64_t step);
  // What a step's one collective gave, read on the host.
  struct StepTotals {
    double loss = 0;       // the step's mean loss (Step's or DpoStep's)
    int64_t tokens = 0;    // real tokens over the world (a tensor-parallel group once)
    double grad_norm = 0;  // the clipped gradients' norm (0 when neither clipped nor logged)
  };
  // Step's and DpoStep's end once `totals` are read: an error when the loss is not finite
  // (the parameters untouched); otherwise the optimizer step at the schedule's rate, the
  // interval's and run's counters (host syncs since `syncs_before`), and rank 0's
  // metrics line when `logging`.
  absl::Status FinishStep(int64_t step, const StepTotals& totals, bool logging,
                          int64_t syncs_before);
  void LogMetrics(int64_t step, double lr, double grad_norm);
  // Rank 0, when this run trained no step (resumed at its last one): the metrics line
  // the job's progress shows, at `end_step` with the checkpoint's loss and no throughput.
  void LogResumedMetrics(int64_t end_step);
  absl::Status Checkpoint(int64_t step, double loss);
  absl::Status FinishCheckpoint();  // the save in flight, finished and reported
  absl::Status ReportSaved(const absl::StatusOr<std::optional<SavedCheckpoint>>& done);
  // After the last step, or after `end_step` when early stopping ended training: the
  // evaluation (unless one just ran), the final checkpoint, the export (of the best
  // evaluation's weights with export_best) and the finished event.
  absl::Status Finish(int64_t end_step);
  // The evaluation job (TrainOptions::evaluate_only), after Setup: every eval set once at
  // step 0, then the finished event.
  absl::Status EvaluateOnly();
  // One evaluation after `step` steps, on every rank: reported by rank 0, the best and
  // early stopping's count updated. True when early stopping says to stop here.
  bool EvaluateAt(int64_t step);
  // eval.samples: the prompts (every rank reads them, so a bad file fails every rank alike)
  // and the EOS ids generation stops on (trainer_samples.cc).
  absl::Status LoadSamples();
  // eval.samples after the evaluation at `step`, on every rank: the full weights gathered
  // (collective) into a plain model on rank 0's device (LoRA merged in), which generates and
  // prints the "sample" lines and the TensorBoard table while the others wait in one
  // all-reduce. A failure on rank 0 (e.g. out of memory) is a warning and skips the step.
  void SampleAt(int64_t step);
  // The training sources and eval sets, tokenized (each cached once), and the samplers.
  absl::Status LoadData(int dp_world);
  // Rows per optimizer step over all ranks (either sampler's); pairs with DPO; 0 for an
  // evaluation job.
  int64_t GlobalBatch() const;
  // DPO: LoRA, one PREFERENCE source, PADDING, no eval sets, an even row count.
  absl::Status CheckPreferenceData(const std::vector<TrainSourceOptions>& sources) const;
  // DPO: the pairs (rows 2p, 2p + 1 of train_[0]) of rank dp_rank_'s micro-step `micro`.
  std::vector<int64_t> TrainPairs(int64_t epoch, int64_t in_epoch, int64_t micro) const;
  // Rank dp_rank_'s micro-batch `micro` of step `in_epoch` of `epoch`.
  absl::StatusOr<Batch> TrainBatch(int64_t epoch, int64_t in_epoch, int64_t micro) const;
  std::string EarlyStopReason(int64_t step) const;
  // Rank 0's TensorBoard scalars at `step` (nothing when the run has no events file; a
  // failed write is logged once and ends the file, never the training).
  void OpenTensorBoard();
  void ToTensorBoard(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void ToTensorBoardText(int64_t step, const std::string& tag, const std::string& markdown);
  void PhaseDone(const std::string& phase, const std::string& detail);
  void FlushPhases();

  const TrainOptions& opt_;
  const DistEnv env_;
  const int64_t runtime_rss_;
  const bool rank0_;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point phase_start_ = start_;
  std::vector<std::string> phase_summary_;
  std::vector<std::string> pending_phases_;  // phase lines before "started" was printed
  bool started_emitted_ = false;

  at::Device device_{at::kCPU};
  at::ScalarType compute_dtype_ = at::kFloat;
  LlamaConfig config_;
  std::vector<UnitLayout> full_layout_;  // the model's units (with LoRA's adapters)
  std::vector<UnitLayout> layout_;       // this rank's tensor-parallel slice of them
  int tp_ = 1;                           // tensor-parallel group size
  int dp_rank_ = 0;                      // this rank's data-parallel index
  LoraOptions lora_;  // resolved (adapter's values filled in); !enabled = full finetuning
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;  // CHAT data's renderer
  int64_t seq_len_ = 0;
  std::vector<LoadedData> train_;  // one per training source (TrainSourcesOf)
  int64_t train_rows_ = 0;         // rows of all of them
  struct NamedEval {
    std::string name;  // "" for eval_path
    LoadedData data;
  };
  std::vector<NamedEval> eval_;  // the first decides early stopping and export_best
  // eval.samples' prompts (empty: none) and the ids generation stops on.
  std::vector<SamplePrompt> sample_prompts_;
  std::vector<int32_t> sample_eos_ids_;
  int64_t grad_accum_ = 1;
  std::optional<Sampler> sampler_;         // one training source: today's order
  std::optional<MixtureSampler> mixture_;  // several
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  std::unique_ptr<DistContext> dist_;
  ShardingOptions sharding_;
  std::unique_ptr<ShardedEngine> engine_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<CheckpointWriter> writer_;
  // The job's checkpoint dir, held open from Setup on (worker/job_checkpoint_dir.h), and
  // the path every checkpoint write and resume goes through: FdPath of it, or the spec's
  // path when the task has no path roots.
  UniqueFd checkpoint_dir_fd_;
  std::string checkpoint_io_dir_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  int64_t start_step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t flops_per_token_ = 0;
  double peak_tflops_ = 0;

  // The metrics interval.
  Clock::time_point interval_start_;
  int64_t interval_tokens_ = 0, interval_steps_ = 0;
  double interval_loss_ = 0, last_loss_ = 0;
  trainer_events::Metrics::Dpo interval_dpo_;  // DPO: sums over the interval's steps
  // Host synchronisations inside Step() and the steps they were counted over (reported
  // per step when the run finishes).
  int64_t step_host_syncs_ = 0, steps_run_ = 0;

  // Evaluation and early stopping (TrainerProgress states the contract; restored on resume).
  int64_t last_eval_step_ = -1;  // the step of last_eval_loss_
  double last_eval_loss_ = 0;
  double best_eval_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t best_eval_step_ = 0;
  int64_t evals_without_improvement_ = 0;
};

}  // namespace llamafleet::trainer
