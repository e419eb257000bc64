#include "trainer.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gguf_export.h"
#include "hf_io.h"
#include "host_sync.h"
#include "lora.h"
#include "model_file.h"
#include "progress_reporter.h"
#include "sharded_checkpoint.h"
#include "tensor_parallel.h"
#include "util.h"
#include "worker/job_checkpoint_dir.h"
#include "worker/path_guard.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;

Trainer::Trainer(const TrainOptions& options, const DistEnv& env, int64_t runtime_rss)
    : opt_(options), env_(env), runtime_rss_(runtime_rss), rank0_(env.rank == 0) {}

Trainer::~Trainer() = default;

void Trainer::PhaseDone(const std::string& phase, const std::string& detail) {
  const Clock::time_point now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - phase_start_).count();
  const double since = std::chrono::duration<double>(now - start_).count();
  phase_start_ = now;
  if (!rank0_) return;
  // "started" is the first line a run prints: phases before it wait for it.
  pending_phases_.push_back(trainer_events::ToLine(trainer_events::Phase{phase, seconds, since, detail}));
  if (started_emitted_) FlushPhases();
  phase_summary_.push_back(absl::StrFormat("%s %.2f s%s", phase, seconds, detail.empty() ? "" : " (" + detail + ")"));
}

void Trainer::OpenTensorBoard() {
  if (!rank0_ || opt_.checkpoint_dir.empty()) return;
  const std::string run = TensorBoardAttemptDir(opt_.attempt);
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
      checkpoint_dir_fd_.valid() ? TensorBoardWriter::Open(checkpoint_dir_fd_.get(), run, opt_.checkpoint_dir)
                                 : TensorBoardWriter::Open((fs::path(opt_.checkpoint_dir) / run).string());
  if (!w.ok()) {
    LogWarning(absl::StrCat("no TensorBoard events: ", w.status().message()));
    return;
  }
  tensorboard_ = std::move(*w);
}

void Trainer::ToTensorBoard(int64_t step,
                            const std::vector<std::pair<std::string, double>>& scalars) {
  if (!tensorboard_) return;
  absl::Status s;
  for (const auto& [tag, value] : scalars) {
    if (s.ok()) s = tensorboard_->AddScalar(tag, step, value);
  }
  if (s.ok()) s = tensorboard_->Flush();
  if (!s.ok()) {
    LogWarning(absl::StrCat("TensorBoard events stopped: ", s.message()));
    tensorboard_.reset();
  }
}

void Trainer::ToTensorBoardText(int64_t step, const std::string& tag, const std::string& markdown) {
  if (!tensorboard_) return;
  absl::Status s = tensorboard_->AddText(tag, step, markdown);
  if (s.ok()) s = tensorboard_->Flush();
  if (!s.ok()) {
    LogWarning(absl::StrCat("TensorBoard events stopped: ", s.message()));
    tensorboard_.reset();
  }
}

void Trainer::FlushPhases() {
  for (const std::string& line : pending_phases_) EmitJsonLine(line);
  pending_phases_.clear();
}

absl::Status Trainer::ResolveLora() {
  if (!opt_.lora.enabled) return absl::OkStatus();
  lora_ = opt_.lora;
  if (opt_.dpo && lora_.dropout < 0) lora_.dropout = 0;  // not the adapter's: see trainer_dpo.cc
  if (!lora_.adapter_path.empty()) {
    // The spec's values win where it gives them; r and the targets must then agree with
    // the adapter's tensors.
    LF_ASSIGN_OR_RETURN(const LoraOptions saved, ReadAdapterConfig(lora_.adapter_path));
    if (lora_.r == 0) lora_.r = saved.r;
    if (lora_.alpha <= 0) lora_.alpha = saved.alpha;
    if (lora_.dropout < 0) lora_.dropout = saved.dropout;
    if (lora_.target_modules.empty()) lora_.target_modules = saved.target_modules;
    auto sorted = [](std::vector<std::string> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    if (lora_.r != saved.r || sorted(lora_.target_modules) != sorted(saved.target_modules)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peft: r ", lora_.r, " on [", absl::StrJoin(lora_.target_modules, ", "), "] disagrees with ",
          lora_.adapter_path, "/adapter_config.json (r ", saved.r, " on [", absl::StrJoin(saved.target_modules, ", "),
          "]); leave peft.r and peft.target_modules unset to continue that adapter"));
    }
  }
  if (lora_.dropout < 0) lora_.dropout = 0;
  if (opt_.dpo && lora_.dropout > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peft.dropout must be 0 with training.objective dpo (got ", lora_.dropout, ")"));
  }
  LF_RETURN_IF_ERROR(ValidateLora(lora_));
  ApplyLora(config_, lora_, full_layout_);
  return absl::OkStatus();
}

absl::Status Trainer::ChooseResume(std::string* resume_dir) {
  // A step of the job's own directory is read through the held descriptor.
  *resume_dir = worker::ThroughHeldDir(opt_.resume, opt_.checkpoint_dir, checkpoint_io_dir_);
  if (!opt_.resume_candidates.empty()) {
    // Every rank checks the manifest hash and its share of the files' hashes; the ranks
    // agree (one all-reduce) on the newest candidate none of them refused.
    const size_t n = opt_.resume_candidates.size();
    std::vector<std::string> reasons(n);
    at::Tensor refused = at::zeros({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kDouble));
    for (size_t i = 0; i < n; ++i) {
      absl::Status v = VerifyCheckpoint(worker::ThroughHeldDir(opt_.resume_candidates[i].path, opt_.checkpoint_dir,
                                                               checkpoint_io_dir_),
                                        opt_.resume_candidates[i].manifest_sha256,
                                        env_.rank, env_.world_size);
      if (!v.ok()) {
        reasons[i] = std::string(v.message());
        refused[static_cast<int64_t>(i)] = 1.0;
      }
    }
    at::Tensor agreed = refused.to(device_);
    LF_RETURN_IF_ERROR(dist_->world().AllReduceSum(agreed)->Wait());
    agreed = agreed.cpu();
    trainer_events::Resumed used;
    for (size_t i = 0; i < n && used.path.empty(); ++i) {
      const trainer_events::ResumeCandidate& c = opt_.resume_candidates[i];
      if (agreed[static_cast<int64_t>(i)].item<double>() == 0) {
        used.path = c.path;
        used.step = c.step;
      } else {
        used.skipped.push_back({c.path, reasons[i].empty() ? "refused by another rank" : reasons[i]});
        if (rank0_) LogWarning(absl::StrCat("not resuming from ", c.path, ": ", used.skipped.back().reason));
      }
    }
    if (used.path.empty()) {
      // The job has recorded checkpoints, so starting fresh would lose its progress
      // silently; the storage may come back (or an older attempt's files be restored).
      return absl::UnavailableError(absl::StrCat("none of the ", n, " recorded checkpoints verifies (newest ",
                                                 opt_.resume_candidates[0].path, ": ", used.skipped[0].reason,
                                                 "); not starting from scratch"));
    }
    if (rank0_) {
      LogInfo(absl::StrCat("resuming from ", used.path, " (step ", used.step, "; ", used.skipped.size(),
                           " newer recorded checkpoint(s) refused)"));
      EmitJsonLine(trainer_events::ToLine(used));
    }
    *resume_dir = worker::ThroughHeldDir(used.path, opt_.checkpoint_dir, checkpoint_io_dir_);
  } else if (*resume_dir == "latest") {
    if (opt_.checkpoint_dir.empty()) return absl::InvalidArgumentError("checkpoint.resume: latest needs checkpoint.dir");
    auto latest = LatestCheckpoint(checkpoint_io_dir_);
    if (latest.ok()) {
      *resume_dir = *latest;
      if (!opt_.path_roots.empty()) {
        LF_RETURN_IF_ERROR(worker::CheckPathInRoots("checkpoint.resume (latest)", *resume_dir, opt_.path_roots));
      }
    } else {
      if (rank0_) LogInfo(absl::StrCat("no complete checkpoint in ", opt_.checkpoint_dir, ": starting fresh"));
      resume_dir->clear();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepResult> Trainer::Step(int64_t step) {
  if (opt_.dpo) return DpoStep(step);
  ShardedEngine& engine = *engine_;
  const int64_t syncs_before = HostSyncCount();
  const int64_t epoch = step / steps_per_epoch_, in_epoch = step % steps_per_epoch_;
  std::vector<ModelInput> micro;
  int64_t local_targets = 0, local_real = 0;
  for (int64_t m = 0; m < grad_accum_; ++m) {
    LF_ASSIGN_OR_RETURN(Batch b, TrainBatch(epoch, in_epoch, m));
    local_real += b.real_tokens;
    micro.push_back(MakeModelInput(b, device_));
    local_targets += micro.back().num_targets;
  }
  // Host reads wait for the device: the step reads once, after the optimizer's inputs are
  // final (host_sync.h). Until then the global target count, the loss and the gradient
  // norm stay on the device; a tensor-parallel group's ranks hold the same counts and
  // losses, and the group contributes them once.
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  const double group_once = env_.rank % tp_ == 0 ? 1.0 : 0.0;
  const at::Tensor targets = engine.AllReduceSumOnDevice(
      at::full({1}, group_once * static_cast<double>(local_targets), f64));
  const at::Tensor loss_weight =
      (engine.loss_scale() / targets.clamp_min(1.0)).to(at::kFloat).reshape({});
  engine.ZeroGrad();
  at::Tensor loss_sum = at::zeros({1}, f64);
  for (size_t m = 0; m < micro.size(); ++m) {
    // Only the last micro-step's backward reduces (where the strategy allows).
    engine.SetGradientSync(m + 1 == micro.size());
    at::Tensor l = model_->LossSum(engine, micro[m]);
    (l * loss_weight).backward();
    loss_sum.add_(l.detach().to(at::kDouble));
  }
  LF_RETURN_IF_ERROR(engine.ReduceGradients());
  // The norm is computed when it is needed: to clip, or to log.
  const bool logging = (step + 1) % opt_.log_every == 0 || step + 1 == total_steps_;
  const at::Tensor norm = opt_.grad_clip > 0 || logging
                              ? engine.ClipGradNormOnDevice(opt_.grad_clip)
                              : at::zeros({}, f64);
  // The step's one blocking collective: [loss sum, real tokens, preemption requests] summed
  // over the world, with the target count and the norm (equal on every rank already)
  // contributed by rank 0 alone.
  const double rank0 = env_.rank == 0 ? 1.0 : 0.0;
  at::Tensor packed = at::cat({loss_sum * group_once,
                               at::full({1}, group_once * static_cast<double>(local_real), f64),
                               at::full({1}, PreemptionRequested() ? 1.0 : 0.0, f64),
                               targets * rank0, norm.reshape({1}) * rank0});
  const at::Tensor summed = ReadOnHost(engine.AllReduceSumOnDevice(packed));
  const double* v = summed.data_ptr<double>();
  const double loss = v[0] / std::max(1.0, v[3]);
  LF_RETURN_IF_ERROR(
      FinishStep(step, StepTotals{loss, static_cast<int64_t>(v[1]), v[4]}, logging, syncs_before));
  return StepResult{loss, v[2] > 0};
}

absl::Status Trainer::FinishStep(int64_t step, const StepTotals& totals, bool logging,
                                 int64_t syncs_before) {
  if (!std::isfinite(totals.loss)) {
    return absl::InternalError(absl::StrCat(opt_.dpo ? "DPO loss" : "loss", " is ", totals.loss,
                                            " at step ", step + 1,
                                            " (diverged: lower training.lr or set grad_clip)"));
  }
  const double lr =
      LearningRate(opt_.schedule, opt_.lr, step, step / steps_per_epoch_, total_steps_);
  engine_->Step(lr);
  last_loss_ = totals.loss;
  interval_tokens_ += totals.tokens;
  tokens_seen_ += totals.tokens;
  interval_loss_ += totals.loss;
  ++interval_steps_;
  step_host_syncs_ += HostSyncCount() - syncs_before;
  ++steps_run_;
  if (rank0_ && logging) LogMetrics(step, lr, totals.grad_norm);
  return absl::OkStatus();
}

void Trainer::LogMetrics(int64_t step, double lr, double grad_norm) {
  const double secs = std::chrono::duration<double>(Clock::now() - interval_start_).count();
  const double tps = secs > 0 ? static_cast<double>(interval_tokens_) / secs : 0.0;
  const double tflops = tps * static_cast<double>(flops_per_token_) / 1e12;
  trainer_events::Metrics line;
  line.step = step + 1;
  line.epoch = step / steps_per_epoch_;
  line.loss = interval_loss_ / static_cast<double>(interval_steps_);
  line.lr = lr;
  line.grad_norm = grad_norm;
  line.tokens = tokens_seen_;
  line.tokens_per_s = tps;
  line.tflops = tflops;
  line.peak_mem_bytes = device_.is_cuda() ? PeakDeviceMemoryBytes(device_) : PeakRssBytes();
  if (peak_tflops_ > 0) line.mfu = tflops / (peak_tflops_ * env_.world_size);
  if (opt_.dpo) {
    const double steps = static_cast<double>(interval_steps_);
    line.dpo = trainer_events::Metrics::Dpo{
        interval_dpo_.rewards_chosen / steps, interval_dpo_.rewards_rejected / steps,
        interval_dpo_.rewards_accuracies / steps, interval_dpo_.rewards_margins / steps};
    interval_dpo_ = {};
  }
  EmitJsonLine(trainer_events::ToLine(line));
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", line.loss},
      {"train/lr", line.lr},
      {"train/grad_norm", line.grad_norm},
      {"perf/tokens_per_s", line.tokens_per_s},
      {"perf/tflops", line.tflops},
      {"memory/peak_gib", static_cast<double>(line.peak_mem_bytes) / (1 << 30)}};
  if (line.mfu.has_value()) scalars.push_back({"perf/mfu", *line.mfu});
  if (line.dpo.has_value()) {
    scalars.insert(scalars.end(), {{"train/rewards/chosen", line.dpo->rewards_chosen},
                                   {"train/rewards/rejected", line.dpo->rewards_rejected},
                                   {"train/rewards/accuracies", line.dpo->rewards_accuracies},
                                   {"train/rewards/margins", line.dpo->rewards_margins}});
  }
  ToTensorBoard(line.step, scalars);
  LogInfo(absl::StrCat("step ", step + 1, "/", total_steps_, " loss ", line.loss, " lr ", lr, " grad_norm ",
                       grad_norm, " tokens/s ", static_cast<int64_t>(tps)));
  interval_start_ = Clock::now();
  interval_tokens_ = interval_steps_ = 0;
  interval_loss_ = 0;
}

void Trainer::LogResumedMetrics(int64_t end_step) {
  trainer_events::Metrics line;
  line.step = end_step;
  line.epoch = (end_step - 1) / steps_per_epoch_;
  line.loss = last_loss_;
  line.lr = LearningRate(opt_.schedule, opt_.lr, end_step - 1, line.epoch, total_steps_);
  line.tokens = tokens_seen_;
  EmitJsonLine(trainer_events::ToLine(line));
  LogInfo(absl::StrCat("step ", end_step, "/", total_steps_, " loss ", last_loss_,
                       " (from the checkpoint; no step left to train)"));
}

absl::Status Trainer::ReportSaved(const absl::StatusOr<std::optional<SavedCheckpoint>>& done) {
  if (!done.ok()) return done.status();
  if (rank0_ && done->has_value()) {
    const SavedCheckpoint& saved = **done;
    trainer_events::CheckpointSaved line{saved.path, saved.step, saved.bytes, saved.manifest_sha256, saved.loss,
                                         std::nullopt};
    if (std::isfinite(saved.eval_loss)) line.eval_loss = saved.eval_loss;
    EmitJsonLine(trainer_events::ToLine(line));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Checkpoint(int64_t step, double loss) {
  if (!writer_) return absl::OkStatus();
  TrainerProgress progress;
  progress.step = step;
  progress.epoch = step / steps_per_epoch_;
  progress.loss = loss;
  progress.seed = opt_.seed;
  progress.tokens_seen = tokens_seen_;
  progress.rows_seen = step * GlobalBatch();
  progress.global_batch = GlobalBatch();
  if (last_eval_step_ == step) progress.eval_loss = last_eval_loss_;
  progress.best_eval_loss = best_eval_loss_;
  progress.best_eval_step = best_eval_step_;
  progress.evals_without_improvement = evals_without_improvement_;
  std::optional<SavedCheckpoint> previous;
  LF_RETURN_IF_ERROR(writer_->Start(*engine_, config_, progress, &previous));
  return ReportSaved(previous);
}

absl::Status Trainer::FinishCheckpoint() {
  if (!writer_) return absl::OkStatus();
  // Wait is a collective that returns once every rank's writer is done: rank 0, which
  // hosts the store the others read the save's outcome from, may exit after it.
  return ReportSaved(writer_->Wait(*engine_));
}

absl::Status Trainer::Run() {
  LF_RETURN_IF_ERROR(Setup());
  OpenTensorBoard();
  if (opt_.evaluate_only) return EvaluateOnly();
  InstallPreemptionHandler();
  interval_start_ = Clock::now();
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    LF_ASSIGN_OR_RETURN(const StepResult done, Step(step));
    const double loss = done.loss;
    NoteStepDone(step + 1);
    if (step == start_step_) {
      PhaseDone("first_step", "");
      if (rank0_) LogInfo("start-up: " + absl::StrJoin(phase_summary_, ", "));
    }
    if (writer_) LF_RETURN_IF_ERROR(ReportSaved(writer_->Poll()));
    const bool last = step + 1 == total_steps_;
    // Evaluations every eval_every steps; the one after the last step is Finish's.
    if (!eval_.empty() && !last && opt_.eval_every > 0 && (step + 1) % opt_.eval_every == 0 &&
        EvaluateAt(step + 1)) {
      const std::string reason = EarlyStopReason(step + 1);
      if (rank0_) {
        LogInfo(reason);
        EmitJsonLine(trainer_events::ToLine(
            trainer_events::StoppedEarly{step + 1, best_eval_step_, best_eval_loss_, reason}));
      }
      return Finish(step + 1);
    }
    // With export_best, each new best is checkpointed: Finish reads the best back from it.
    const bool new_best = opt_.export_best && best_eval_step_ == step + 1;
    bool saved_now = false;
    if (((opt_.checkpoint_every > 0 && (step + 1) % opt_.checkpoint_every == 0) || new_best) && !last) {
      LF_RETURN_IF_ERROR(Checkpoint(step + 1, loss));
      saved_now = true;
    }
    // Preemption (SIGTERM on any rank): all ranks agreed in the step, checkpoint, and stop
    // cleanly.
    if (done.preempt && !last) {
      if (!saved_now) LF_RETURN_IF_ERROR(Checkpoint(step + 1, loss));
      LF_RETURN_IF_ERROR(FinishCheckpoint());
      if (rank0_) {
        LogInfo(absl::StrCat("SIGTERM: stopped after step ", step + 1, " with a checkpoint"));
        EmitJsonLine(trainer_events::ToLine(trainer_events::Preempted{step + 1, loss}));
      }
      return absl::OkStatus();
    }
  }
  return Finish(total_steps_);
}

bool Trainer::EvaluateAt(int64_t step) {
  EvalResult r;  // the first set's
  for (size_t i = 0; i < eval_.size(); ++i) {
    const EvalResult e = Evaluate(*model_, *engine_, eval_[i].data, opt_.micro_batch, device_);
    if (i == 0) r = e;
    if (!rank0_) continue;
    const std::string& name = eval_[i].name;
    EmitJsonLine(
        trainer_events::ToLine(trainer_events::Eval{step, e.loss, e.perplexity, e.tokens, name}));
    const std::string tag = name.empty() ? "eval" : absl::StrCat("eval/", name);
    ToTensorBoard(step, {{tag + "/loss", e.loss}, {tag + "/perplexity", e.perplexity}});
  }
  SampleAt(step);
  last_eval_step_ = step;
  last_eval_loss_ = r.loss;
  // Every rank computes the same all-reduced loss, so every rank decides alike.
  const bool first = std::isnan(best_eval_loss_);
  if (first || r.loss < best_eval_loss_ - opt_.early_stopping_min_delta) {
    evals_without_improvement_ = 0;
  } else {
    ++evals_without_improvement_;
  }
  // The best is the lowest loss, improvements below min_delta included (the export's choice).
  if (first || r.loss < best_eval_loss_) {
    best_eval_loss_ = r.loss;
    best_eval_step_ = step;
  }
  return opt_.early_stopping_patience > 0 && evals_without_improvement_ >= opt_.early_stopping_patience;
}

std::string Trainer::EarlyStopReason(int64_t step) const {
  return absl::StrFormat(
      "stopped early at step %d: eval loss did not improve by %g for %d evaluations (best %.4f at step %d)", step,
      opt_.early_stopping_min_delta, evals_without_improvement_, best_eval_loss_, best_eval_step_);
}

absl::Status Trainer::EvaluateOnly() {
  EvaluateAt(0);
  PhaseDone("evaluated", absl::StrCat(eval_.size(), eval_.size() == 1 ? " set" : " sets"));
  if (rank0_) {
    LogInfo("evaluation job: " + absl::StrJoin(phase_summary_, ", "));
    EmitJsonLine(trainer_events::ToLine(trainer_events::Finished{0, 0.0, ""}));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Finish(int64_t end_step) {
  if (rank0_ && steps_run_ == 0 && end_step > 0) LogResumedMetrics(end_step);
  if (rank0_ && steps_run_ > 0) {
    LogInfo(absl::StrFormat("host synchronisations: %.2f per optimizer step (%d in %d steps)",
                            static_cast<double>(step_host_syncs_) / static_cast<double>(steps_run_),
                            step_host_syncs_, steps_run_));
  }
  if (!eval_.empty() && last_eval_step_ != end_step) EvaluateAt(end_step);
  LF_RETURN_IF_ERROR(Checkpoint(end_step, last_loss_));
  LF_RETURN_IF_ERROR(FinishCheckpoint());
  if (opt_.export_best && !opt_.export_dir.empty() && best_eval_step_ > 0 && best_eval_step_ != end_step) {
    // The best evaluation's weights, from the checkpoint saved at it (kept by the
    // coordinator's retention as the lowest eval loss).
    const std::string dir = (fs::path(checkpoint_io_dir_) / absl::StrCat("step-", best_eval_step_)).string();
    LF_ASSIGN_OR_RETURN(std::unique_ptr<ShardedCheckpoint> best, ShardedCheckpoint::Open(dir));
    LF_RETURN_IF_ERROR(best->RestoreParams(*engine_, full_layout_));
    if (rank0_) {
      LogInfo(absl::StrFormat("exporting the weights of step %d (eval loss %.4f, the lowest of the run)",
                              best_eval_step_, best_eval_loss_));
    }
  }
  if (!opt_.export_dir.empty()) {
    ExportOptions eo;
    eo.dtype = opt_.export_dtype;
    eo.max_shard_bytes = opt_.max_shard_bytes;
    eo.owner = opt_.job_id;
    eo.path_roots = opt_.path_roots;
    if (tokenizer_) {
      LF_ASSIGN_OR_RETURN(eo.extra_files, tokenizer_->ExportFiles());
    }
    if (!opt_.gguf_dtype.empty()) {
      LF_ASSIGN_OR_RETURN(eo.before_commit,
                          GgufExportStep(opt_.gguf_dtype, fs::path(opt_.export_dir).filename().string()));
      // The chat template beside a SentencePiece tokenizer.model travels too, so the GGUF
      // carries it (a tokenizer.json's tokenizer_config.json is among its files already).
      if (tokenizer_) {
        const fs::path dir = fs::path(tokenizer_->path()).parent_path();
        for (const char* name : {"tokenizer_config.json", "chat_template.jinja"}) {
          if (eo.extra_files.count(name)) continue;
          absl::StatusOr<std::string> bytes = ReadModelFile((dir / name).string(), kMaxTokenizerFileBytes);
          if (bytes.ok()) {
            eo.extra_files[name] = *std::move(bytes);
          } else if (!absl::IsNotFound(bytes.status())) {
            return bytes.status();
          }
        }
      }
    }
    // Gathering a unit is collective; only rank 0 writes.
    if (lora_.enabled) {
      LF_RETURN_IF_ERROR(ExportLora(*engine_, config_, full_layout_, lora_, opt_.merge, opt_.export_dir, eo));
      if (rank0_) LogInfo(absl::StrCat("exported the adapter to ", opt_.export_dir, opt_.merge ? " (and merged/)" : ""));
    } else if (rank0_) {
      LF_RETURN_IF_ERROR(ExportHfDir(
          config_, full_layout_,
          [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> { return engine_->FullUnit(u); }, opt_.export_dir,
          eo));
      LogInfo(absl::StrCat("exported ", opt_.export_dir));
    } else {
      for (size_t u = 0; u < layout_.size(); ++u) engine_->FullUnit(static_cast<int>(u));
    }
  }
  if (rank0_) {
    EmitJsonLine(trainer_events::ToLine(trainer_events::Finished{end_step, last_loss_, opt_.export_dir}));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
