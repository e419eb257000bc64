// The defaults of job.proto, filled into unset fields.

#include <algorithm>

#include "jobspec/dependencies.h"
#include "jobspec/eval_samples.h"
#include "jobspec/job_kind.h"
#include "jobspec/jobspec.h"

namespace llamafleet {

v1::ActivationCheckpointingMode ActivationCheckpointingOf(const v1::FsdpSpec& fsdp) {
  // The switch decides on or off; the mode picks full or selective when on.
  if (fsdp.has_activation_checkpointing() && !fsdp.activation_checkpointing()) return v1::AC_NONE;
  if (fsdp.activation_checkpointing_mode() == v1::AC_SELECTIVE) return v1::AC_SELECTIVE;
  if (fsdp.activation_checkpointing_mode() == v1::AC_NONE) return v1::AC_NONE;  // switch unset
  return v1::AC_FULL;
}

namespace {

// The training block of a job that trains.
void TrainingDefaults(v1::JobSpec* spec) {
  v1::TrainingSpec* t = spec->mutable_training();
  if (!t->has_epochs() && t->max_steps() == 0) t->set_epochs(1);
  if (!t->has_micro_batch_size()) t->set_micro_batch_size(4);
  if (t->has_global_batch_size() && !t->has_grad_accum()) {
    // Derived for the nominal data-parallel world (nodes x gpus_per_node / tensor_parallel);
    // left unset (and reported by validation) when it does not divide. The trainer derives
    // it again from the world it actually runs on.
    const int gpus = std::max(1, spec->resources().has_gpus_per_node() ? spec->resources().gpus_per_node() : 1);
    const int tp = TensorParallelOf(*spec);
    const int64_t per_step = tp >= 1 && gpus % tp == 0
                                 ? static_cast<int64_t>(t->micro_batch_size()) *
                                       std::max(1, spec->resources().has_nodes() ? spec->resources().nodes() : 1) *
                                       (gpus / tp)
                                 : 0;
    if (per_step > 0 && t->global_batch_size() > 0 && t->global_batch_size() % per_step == 0) {
      t->set_grad_accum(static_cast<int32_t>(t->global_batch_size() / per_step));
    }
  }
  if (!t->has_grad_accum() && !t->has_global_batch_size()) t->set_grad_accum(1);
  if (!t->has_seq_len()) t->set_seq_len(4096);
  if (t->batching() == v1::BATCHING_UNSPECIFIED) t->set_batching(v1::PACKING);
  if (t->optimizer() == v1::OPTIMIZER_UNSPECIFIED) t->set_optimizer(v1::ADAMW);
  if (!t->has_lr()) t->set_lr(1e-4);
  if (t->betas_size() == 0) {
    t->add_betas(0.9);
    t->add_betas(0.999);
  }
  if (!t->has_eps()) t->set_eps(1e-8);
  if (t->objective() == "dpo" && !t->dpo().has_beta()) t->mutable_dpo()->set_beta(0.1);
  v1::LrSchedule* schedule = t->mutable_lr_schedule();
  if (schedule->type() == v1::LR_SCHEDULE_TYPE_UNSPECIFIED) schedule->set_type(v1::CONSTANT);
  if (schedule->type() == v1::STEP && !schedule->has_gamma()) schedule->set_gamma(0.85);
  if (!t->has_seed()) t->set_seed(42);
  if (!t->has_log_every()) t->set_log_every(10);
  if (t->has_early_stopping() && t->early_stopping().metric() == v1::EARLY_STOPPING_METRIC_UNSPECIFIED) {
    t->mutable_early_stopping()->set_metric(v1::EVAL_LOSS);
  }
}

// The output block and the LoRA settings of a new adapter: read only by a job that trains.
void TrainingOnlyDefaults(v1::JobSpec* spec) {
  v1::OutputSpec* o = spec->mutable_output();
  if (o->export_dtype() == v1::PRECISION_UNSPECIFIED) o->set_export_dtype(v1::BF16);
  if (!o->has_max_shard_size_mb()) o->set_max_shard_size_mb(5120);
  if (o->export_() == v1::EXPORT_CHOICE_UNSPECIFIED) o->set_export_(v1::LAST);
  v1::PeftSpec* peft = spec->mutable_peft();
  if ((peft->method() == "lora" || peft->method() == "qlora") && peft->adapter_path().empty()) {
    // llama-recipes' lora_config; with adapter_path the adapter's own values apply.
    if (!peft->has_r()) peft->set_r(8);
    if (!peft->has_alpha()) peft->set_alpha(32);
    // DPO takes its gradient in a second forward pass, which must compute what the first
    // did: no dropout.
    if (!peft->has_dropout()) peft->set_dropout(spec->training().objective() == "dpo" ? 0.0 : 0.05);
    if (peft->target_modules_size() == 0) {
      peft->add_target_modules("q_proj");
      peft->add_target_modules("v_proj");
    }
  }
}

}  // namespace

void ApplyDefaults(v1::JobSpec* spec) {
  if (spec->queue().empty()) spec->set_queue("default");
  for (v1::JobDependency& d : *spec->mutable_depends_on()) {
    if (d.on().empty()) d.set_on(kDependsOnSucceeded);
  }
  if (spec->data().format() == v1::DATA_FORMAT_UNSPECIFIED) {
    spec->mutable_data()->set_format(v1::TEXT);
  }
  // train_on is set for every format (only CHAT reads it): an enum left at 0 would print as
  // TRAIN_ON_UNSPECIFIED in MessageToJson, which no parse accepts back.
  v1::DataSpec* d = spec->mutable_data();
  if (d->train_on() == v1::TRAIN_ON_UNSPECIFIED) d->set_train_on(v1::ASSISTANT);
  // Each source and set without its own format takes data.format.
  bool chat = d->format() == v1::CHAT;
  for (v1::DataSource& s : *d->mutable_train()) {
    if (s.format() == v1::DATA_FORMAT_UNSPECIFIED) s.set_format(d->format());
    if (!s.has_weight()) s.set_weight(1.0);
    chat = chat || s.format() == v1::CHAT;
  }
  for (v1::EvalSet& s : *d->mutable_eval()) {
    if (s.format() == v1::DATA_FORMAT_UNSPECIFIED) s.set_format(d->format());
    chat = chat || s.format() == v1::CHAT;
  }
  if ((chat || d->format() == v1::PREFERENCE) && d->chat_template().empty())
    d->set_chat_template("model");

  const bool evaluate = IsEvaluateJob(*spec);
  if (evaluate) {
    jobspec_internal::ApplyEvaluateDefaults(spec);
  } else {
    TrainingDefaults(spec);
  }

  v1::FsdpSpec* f = spec->mutable_fsdp();
  if (f->sharding() == v1::SHARDING_STRATEGY_UNSPECIFIED) f->set_sharding(v1::FULL_SHARD);
  if (f->mixed_precision() == v1::PRECISION_UNSPECIFIED) f->set_mixed_precision(v1::BF16);
  if (f->reduce_precision() == v1::PRECISION_UNSPECIFIED) f->set_reduce_precision(v1::FP32);
  if (!f->has_activation_checkpointing()) {
    f->set_activation_checkpointing(f->activation_checkpointing_mode() != v1::AC_NONE);
  }
  if (f->activation_checkpointing_mode() == v1::ACTIVATION_CHECKPOINTING_MODE_UNSPECIFIED) {
    f->set_activation_checkpointing_mode(f->activation_checkpointing() ? v1::AC_FULL : v1::AC_NONE);
  }
  if (!f->has_max_inflight_all_gathers()) f->set_max_inflight_all_gathers(2);

  v1::ResourceSpec* res = spec->mutable_resources();
  if (!res->has_nodes()) res->set_nodes(1);
  if (!res->has_gpus_per_node()) res->set_gpus_per_node(1);
  if (!res->has_elastic_cooldown_seconds()) res->set_elastic_cooldown_seconds(300);
  if (f->sharding() == v1::HYBRID_SHARD && f->hybrid_shard_group_size() == 0) {
    f->set_hybrid_shard_group_size(res->gpus_per_node());
  }

  v1::RunPolicy* p = spec->mutable_run_policy();
  if (!p->has_max_restarts()) p->set_max_restarts(3);
  if (!p->has_restart_backoff_seconds()) p->set_restart_backoff_seconds(30);
  if (!p->has_stall_timeout_seconds()) p->set_stall_timeout_seconds(300);

  ApplyEvalSamplesDefaults(spec);  // both kinds: an evaluation job generates samples too
  if (!evaluate) TrainingOnlyDefaults(spec);
  const v1::PeftSpec* peft = &spec->peft();
  if (peft->method().empty() && peft->ByteSizeLong() == 0) spec->clear_peft();
  // An empty parallelism block is the default (tensor_parallel 1, read by TensorParallelOf).
  if (spec->has_parallelism() && spec->parallelism().ByteSizeLong() == 0) spec->clear_parallelism();
}

}  // namespace llamafleet
