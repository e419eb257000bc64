// The trainer's set-up, in the order it runs: the options and the device; the model's
// shape, tokenizer and data; process groups and the engine (weights from a checkpoint, the
// model or the seeded init); the model and the "started" event; the checkpoint writer.
#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gguf_export.h"
#include "hf_io.h"
#include "lora.h"
#include "nf4_base_source.h"
#include "sharded_checkpoint.h"
#include "tensor_parallel.h"
#include "trainer.h"
#include "util.h"
#include "worker/job_checkpoint_dir.h"

namespace llamafleet::trainer {

absl::Status Trainer::Setup() {
  LF_RETURN_IF_ERROR(CheckOptionsAndDevice());
  std::unique_ptr<HfModelDir> hf;
  LF_RETURN_IF_ERROR(LoadModelShapeAndData(&hf));
  LF_RETURN_IF_ERROR(LoadSamples());
  LF_RETURN_IF_ERROR(CreateEngine(hf.get()));
  hf.reset();  // unmap the source files
  CreateModelAndAnnounce();
  return CreateCheckpointWriter();
}

absl::Status Trainer::CheckOptionsAndDevice() {
  LF_RETURN_IF_ERROR(CheckJobPaths(opt_, rank0_));
  if (opt_.export_best && (opt_.checkpoint_dir.empty() || EvalSetsOf(opt_).empty())) {
    return absl::InvalidArgumentError(
        "output.export: best needs data.eval_path (or data.eval) and checkpoint.dir (the best "
        "weights are read back from the checkpoint saved at their evaluation)");
  }
  if (!opt_.gguf_dtype.empty()) {
    LF_RETURN_IF_ERROR(ParseGgufDtype(opt_.gguf_dtype).status());
    if (opt_.export_dir.empty())
      return absl::InvalidArgumentError("output.gguf needs output.export_dir");
    if (opt_.lora.enabled && !opt_.merge) {
      return absl::InvalidArgumentError(
          "output.gguf with peft needs output.merge: true (the GGUF is the merged model)");
    }
  }
  checkpoint_io_dir_ = opt_.checkpoint_dir;
  if (!opt_.checkpoint_dir.empty() && !opt_.path_roots.empty() && !opt_.job_id.empty()) {
    LF_ASSIGN_OR_RETURN(checkpoint_dir_fd_, worker::OpenJobCheckpointDir(
                                                opt_.path_roots, opt_.checkpoint_dir, opt_.job_id));
    checkpoint_io_dir_ = FdPath(checkpoint_dir_fd_.get());
  }
  LF_ASSIGN_OR_RETURN(device_, ResolveDevice(opt_.device, env_.local_rank));
  // The rank's GPU is the current device of this thread from here on, so that whatever
  // allocates on "the current device" (NCCL's communicators, the caching allocator's
  // streams, autograd's device threads) uses it.
  if (device_.is_cuda()) c10::impl::getDeviceGuardImpl(device_.type())->setDevice(device_);
  LF_ASSIGN_OR_RETURN(compute_dtype_, ResolveComputeDtype(opt_.compute_dtype));
  at::manual_seed(opt_.seed);

  return absl::OkStatus();
}

absl::Status Trainer::LoadModelShapeAndData(std::unique_ptr<HfModelDir>* hf) {
  // Samples are text: they need the tokenizer even beside pre-tokenized data.
  const bool needs_tokenizer = DataNeedsTokenizer(opt_) || opt_.samples.enabled();
  if (!opt_.model_path.empty()) {
    LF_ASSIGN_OR_RETURN(*hf, HfModelDir::Open(opt_.model_path));
    config_ = (*hf)->config();
  } else {
    LF_ASSIGN_OR_RETURN(config_, PresetConfig(opt_.preset));
    if (PresetTakesTokenizerVocab(opt_.preset) && needs_tokenizer) config_.vocab_size = 0;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MaybeLoadTokenizer(needs_tokenizer ? DataFormat::kText : DataFormat::kTokens,
                         opt_.tokenizer_path, opt_.model_path, &config_);
  // Pre-tokenized preference pairs need no tokenizer: a model directory without one is
  // fine (text and messages pairs then name what is missing).
  if (!tokenizer.ok() && opt_.dpo && opt_.tokenizer_path.empty() &&
      absl::IsNotFound(tokenizer.status())) {
    tokenizer = std::unique_ptr<Tokenizer>();
  }
  if (!tokenizer.ok()) return tokenizer.status();
  tokenizer_ = *std::move(tokenizer);
  LF_ASSIGN_OR_RETURN(
      chat_template_,
      MaybeResolveChatTemplate(DataUsesChat(opt_) ? DataFormat::kChat : DataFormat::kText,
                               opt_.chat_template, tokenizer_.get()));
  if (opt_.dpo && tokenizer_ != nullptr) {
    // Only a pair written as messages needs the template: one that does not resolve is
    // reported by such a record, not before.
    absl::StatusOr<std::optional<ChatTemplate>> t =
        MaybeResolveChatTemplate(DataFormat::kChat, opt_.chat_template, tokenizer_.get());
    if (t.ok()) {
      chat_template_ = *std::move(t);
    } else if (rank0_) {
      LogInfo(absl::StrCat("no chat template for messages pairs: ", t.status().message()));
    }
  }
  full_layout_ = MakeLayout(config_);
  LF_RETURN_IF_ERROR(ResolveLora());
  // Tensor parallelism: groups of T consecutive ranks of one node hold slices of the
  // model and run the same data; the data-parallel world is WORLD_SIZE / T.
  tp_ = std::max(1, opt_.tensor_parallel);
  LF_RETURN_IF_ERROR(CheckTensorParallel(config_, tp_));
  if (env_.local_world_size % tp_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism.tensor_parallel (", tp_,
                                                   ") must divide the ", env_.local_world_size,
                                                   " ranks per node (a tensor-parallel "
                                                   "group stays inside one node)"));
  }
  layout_ = TensorParallelLayout(full_layout_, tp_);
  dp_rank_ = env_.rank / tp_;
  seq_len_ = opt_.seq_len;
  if (seq_len_ > config_.max_position_embeddings) {
    LogWarning(absl::StrCat("seq_len ", seq_len_, " capped to max_position_embeddings ",
                            config_.max_position_embeddings));
    seq_len_ = config_.max_position_embeddings;
  }
  LF_RETURN_IF_ERROR(CheckSequenceLength(config_, seq_len_));
  LF_RETURN_IF_ERROR(LoadData(env_.world_size / tp_));
  if (opt_.evaluate_only) return absl::OkStatus();  // no step to count
  total_steps_ = opt_.epochs > 0 ? opt_.epochs * steps_per_epoch_ : opt_.max_steps;
  if (opt_.max_steps > 0) total_steps_ = std::min(total_steps_, opt_.max_steps);
  if (total_steps_ <= 0) return absl::InvalidArgumentError("nothing to train: zero steps");

  return absl::OkStatus();
}

absl::Status Trainer::CreateEngine(HfModelDir* hf) {
  // Process groups, then the engine: each rank reads only its shard's slices (from the
  // resumed checkpoint, the HF weights, or the seeded init).
  RendezvousOptions ro;
  ro.rank = env_.rank;
  ro.world_size = env_.world_size;
  ro.master_addr = env_.master_addr;
  ro.master_port = env_.master_port;
  ro.timeout = std::chrono::seconds(opt_.collective_timeout_s);
  ro.device = device_;
  LF_ASSIGN_OR_RETURN(dist_, DistContext::Create(ro));
  PhaseDone("rendezvous", absl::StrCat(env_.world_size, env_.world_size == 1 ? " rank" : " ranks"));
  LF_ASSIGN_OR_RETURN(sharding_.strategy, ParseShardingStrategy(opt_.sharding));
  sharding_.hybrid_group_size =
      opt_.hybrid_group_size > 0 ? opt_.hybrid_group_size : env_.local_world_size;
  sharding_.compute_dtype = compute_dtype_;
  LF_ASSIGN_OR_RETURN(sharding_.reduce_dtype, ResolveComputeDtype(opt_.reduce_dtype));
  sharding_.max_inflight_all_gathers = opt_.max_inflight_all_gathers;
  sharding_.adamw = AdamWOptions{opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay};
  // For benchmarks: LLAMAFLEET_ADAMW_KERNEL=per_tensor|foreach|fused picks AdamW's kernel
  // (engine.h); unset or anything else, the default.
  if (const char* k = std::getenv("LLAMAFLEET_ADAMW_KERNEL")) {
    const std::string kernel = k;
    if (kernel == "per_tensor") sharding_.adamw.kernel = AdamWKernel::kPerTensor;
    if (kernel == "foreach") sharding_.adamw.kernel = AdamWKernel::kForeach;
    if (kernel == "fused") sharding_.adamw.kernel = AdamWKernel::kFused;
  }
  sharding_.device = device_;
  sharding_.tensor_parallel = tp_;
  sharding_.forward_only = opt_.evaluate_only;

  std::string resume_dir;
  LF_RETURN_IF_ERROR(ChooseResume(&resume_dir));
  std::unique_ptr<ShardedCheckpoint> resume;
  if (!resume_dir.empty()) {
    LF_ASSIGN_OR_RETURN(resume, ShardedCheckpoint::Open(resume_dir));
    LF_RETURN_IF_ERROR(resume->CheckLayout(full_layout_));
  }
  // Trainable tensors come from the checkpoint when resuming; with LoRA they are the
  // adapters (from adapter_path, or seeded) and the frozen base comes from the model.
  // Every source but a checkpoint holds whole tensors: this rank reads its slice of them.
  const int tp_rank = env_.rank % tp_;
  auto slice = [&](ShardSource whole, bool frozen) {
    return RetileSource(full_layout_, frozen, 1, Untiled(std::move(whole)), tp_, tp_rank);
  };
  ShardSource source, frozen_source;
  if (lora_.enabled) {
    ShardSource base = hf ? HfShardSource(*hf, full_layout_, true)
                          : SeededShardSource(full_layout_, opt_.seed, true);
    // QLoRA quantizes whole tensors: the engine does so and keeps the 4-bit codes; a
    // tensor-parallel slice instead gets the dequantized values of the whole tensor.
    if (lora_.nf4_base && tp_ == 1) sharding_.nf4_frozen = QloraQuantizes(lora_);
    if (lora_.nf4_base && tp_ > 1) base = Nf4BaseSource(std::move(base), full_layout_, QloraQuantizes(lora_));
    frozen_source = slice(std::move(base), true);
  }
  if (resume) {
    source = resume->ParamSource(full_layout_, tp_, tp_rank);
  } else if (lora_.enabled && !lora_.adapter_path.empty()) {
    LF_ASSIGN_OR_RETURN(ShardSource adapter, AdapterSource(lora_.adapter_path, full_layout_));
    source = slice(std::move(adapter), false);
  } else {
    source = slice(hf && !lora_.enabled ? HfShardSource(*hf, full_layout_)
                                        : SeededShardSource(full_layout_, opt_.seed),
                   false);
  }
  LF_ASSIGN_OR_RETURN(
      engine_, ShardedEngine::CreateWithContext(layout_, sharding_, *dist_, source, frozen_source));
  if (resume) LF_RETURN_IF_ERROR(RestoreProgress(*resume, resume_dir));
  PhaseDone("weights_loaded", resume ? absl::StrCat("resumed from step ", start_step_)
                              : hf   ? "from " + opt_.model_path
                                     : "seeded init");
  return absl::OkStatus();
}

absl::Status Trainer::RestoreProgress(ShardedCheckpoint& resume, const std::string& resume_dir) {
  // The data position is global: rows consumed, in rows per step. A different global
  // batch would replay or skip rows, so it is refused rather than guessed.
  const TrainerProgress saved = resume.progress();
  if (saved.global_batch > 0 && saved.global_batch != GlobalBatch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        resume_dir, ": checkpoint was written with ", saved.global_batch,
        " rows per step, this run takes ", GlobalBatch(), " (set training.global_batch_size to ",
        saved.global_batch, " to continue the same data order on any world size)"));
  }
  LF_RETURN_IF_ERROR(resume.RestoreEngine(*engine_, full_layout_));
  start_step_ = std::min(resume.step(), total_steps_);
  if (saved.global_batch > 0 && saved.rows_seen != saved.step * saved.global_batch) {
    return absl::DataLossError(absl::StrCat(resume_dir, ": manifest rows_seen ", saved.rows_seen,
                                            " disagrees with step ", saved.step, " x global_batch ",
                                            saved.global_batch));
  }
  tokens_seen_ = resume.progress().tokens_seen;
  // The last step's loss travels with the checkpoint: a run resumed at its last step
  // trains no step, and its final checkpoint and report carry this loss.
  last_loss_ = saved.loss;
  best_eval_loss_ = saved.best_eval_loss;
  best_eval_step_ = saved.best_eval_step;
  evals_without_improvement_ = saved.evals_without_improvement;
  if (rank0_) {
    LogInfo(absl::StrCat("resumed from ", resume_dir, " at step ", start_step_, " (saved by ",
                         resume.world_size(), " ranks, ", resume.parsed_manifest().strategy, ")"));
  }
  return absl::OkStatus();
}

void Trainer::CreateModelAndAnnounce() {
  model_ = std::make_unique<LlamaModel>(config_, device_, compute_dtype_);
  model_->set_activation_checkpointing(opt_.activation_checkpointing);
  model_->set_tensor_parallel(engine_->tensor_parallel_comm());
  if (lora_.enabled) model_->set_lora(lora_);

  // 6 FLOPs per parameter and token (forward 2, backward 4); a frozen weight skips its
  // weight gradient (4), an adapter adds its own 6. Attention has no weights: always 6.
  const int64_t adapter = AdapterParameters(full_layout_);
  flops_per_token_ = (lora_.enabled ? 4 : 6) * config_.NumNonEmbeddingParameters() + 6 * adapter +
                     6 * config_.num_hidden_layers * config_.num_attention_heads * 2 *
                         config_.head_dim() * seq_len_;
  // MFU needs the device's peak: --peak-tflops / LLAMAFLEET_PEAK_TFLOPS, or the device table.
  peak_tflops_ = opt_.peak_tflops;
  if (peak_tflops_ <= 0 && device_.is_cuda())
    peak_tflops_ = PeakTflopsForDevice(DeviceName(device_));
  const int dp_world = env_.world_size / tp_;
  const sched::MemoryEstimate estimate =
      EstimateForRun(config_, opt_, sharding_, env_.world_size, seq_len_, grad_accum_, device_,
                     runtime_rss_, lora_);
  if (rank0_) {
    if (lora_.enabled) {
      LogInfo(absl::StrFormat(
          "%s r %d alpha %g dropout %g on %s: %d trainable parameters (%.3f%%)%s",
          lora_.nf4_base ? "QLoRA (NF4 base)" : "LoRA", lora_.r,
          lora_.alpha, lora_.dropout, absl::StrJoin(lora_.target_modules, ","), adapter,
          100.0 * static_cast<double>(adapter) / static_cast<double>(config_.NumParameters()),
          lora_.adapter_path.empty() ? "" : ", from " + lora_.adapter_path));
    }
    LogInfo(absl::StrCat(
        "model: ", config_.NumParameters(), " parameters, ", config_.num_hidden_layers,
        " layers, dim ", config_.hidden_size, "; data: ", train_rows_, " rows of <= ", seq_len_,
        " tokens; ", total_steps_, " steps (", steps_per_epoch_, " per epoch); device ",
        device_.str(),
        tp_ > 1 ? absl::StrCat("; tensor parallel ", tp_, " x data parallel ", dp_world) : ""));
    trainer_events::Started started;
    started.world_size = env_.world_size;
    started.parameters = static_cast<int64_t>(config_.NumParameters());
    started.total_steps = total_steps_;
    started.steps_per_epoch = steps_per_epoch_;
    started.train_rows = train_rows_;
    started.seq_len = seq_len_;
    started.global_batch = GlobalBatch();
    started.trainable_parameters =
        lora_.enabled ? adapter : static_cast<int64_t>(config_.NumParameters());
    started.grad_accum = grad_accum_;
    started.memory_estimate = estimate;
    EmitJsonLine(trainer_events::ToLine(started));
    started_emitted_ = true;
    FlushPhases();
  }
}

absl::Status Trainer::CreateCheckpointWriter() {
  // Checkpoints: the step loop waits only for the snapshot of this rank's shards; the
  // writer thread writes them (checkpoint_writer.h).
  if (!opt_.checkpoint_dir.empty() && !opt_.evaluate_only) {
    LF_ASSIGN_OR_RETURN(std::unique_ptr<KeyValueStore> kv,
                        dist_->NewKeyValueStore("checkpoint-writer"));
    CheckpointWriterOptions wo;
    wo.root = checkpoint_io_dir_;
    wo.shown_root = opt_.checkpoint_dir;
    wo.async = opt_.checkpoint_async;
    wo.timeout = std::max<std::chrono::milliseconds>(std::chrono::minutes(30), dist_->timeout());
    writer_ = std::make_unique<CheckpointWriter>(std::move(kv), wo);
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
