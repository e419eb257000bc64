// The trainer's data: its training sources and eval sets, tokenized once each (token_cache.h),
// and the rows each step takes from them (Sampler for one source, MixtureSampler for several).
#include "absl/strings/str_cat.h"
#include "trainer.h"
#include "util.h"

namespace llamafleet::trainer {

absl::Status Trainer::LoadData(int dp_world) {
  const std::string cache_dir =
      opt_.token_cache_dir.empty() ? DefaultTokenCacheDir() : opt_.token_cache_dir;
  const ChatDataOptions chat{chat_template_ ? &*chat_template_ : nullptr, opt_.train_on};
  auto load = [&](const std::string& path, DataFormat format) {
    return LoadRows(path, format, tokenizer_.get(), config_, opt_.batching, seq_len_, cache_dir,
                    opt_.token_cache_max_bytes, rank0_, ProgressEventsWanted(), chat);
  };
  bool all_hits = true;
  // An evaluation job reads its eval sets only.
  const std::vector<TrainSourceOptions> sources =
      opt_.evaluate_only ? std::vector<TrainSourceOptions>{} : TrainSourcesOf(opt_);
  if (sources.empty() && !opt_.evaluate_only) return absl::InvalidArgumentError("data.train_path is required");
  for (const TrainSourceOptions& source : sources) {
    LF_ASSIGN_OR_RETURN(LoadedData data, load(source.path, source.format));
    all_hits = all_hits && data.cache_hit;
    train_rows_ += data.rows.size();
    train_.push_back(std::move(data));
  }
  for (const EvalSetOptions& set : EvalSetsOf(opt_)) {
    LF_ASSIGN_OR_RETURN(LoadedData data, load(set.path, set.format));
    all_hits = all_hits && data.cache_hit;
    eval_.push_back(NamedEval{set.name, std::move(data)});
  }
  PhaseDone("data_ready", all_hits ? "token cache hit" : "tokenized");
  if (opt_.evaluate_only) {
    if (eval_.empty()) {
      return absl::InvalidArgumentError("kind evaluate needs data.eval or data.eval_path (the sets to score)");
    }
    return absl::OkStatus();
  }
  // With a global batch, the micro-steps per step follow from the world this run got, so
  // every step consumes the same rows whatever the world size (see Sampler).
  LF_ASSIGN_OR_RETURN(grad_accum_, GradAccumFor(opt_, dp_world));
  if (opt_.dpo) LF_RETURN_IF_ERROR(CheckPreferenceData(sources));
  if (train_.size() == 1) {
    Sampler::Options so;
    // DPO samples pairs (rows 2p and 2p + 1: ParseRecordSequences).
    so.num_rows = opt_.dpo ? train_[0].rows.size() / 2 : train_[0].rows.size();
    so.micro_batch = opt_.micro_batch;
    so.grad_accum = grad_accum_;
    so.world_size = dp_world;
    so.seed = opt_.seed;
    so.shuffle = opt_.shuffle;
    LF_ASSIGN_OR_RETURN(sampler_, Sampler::Create(so));
    steps_per_epoch_ = sampler_->steps_per_epoch();
    return absl::OkStatus();
  }
  MixtureSampler::Options mo;
  for (size_t k = 0; k < train_.size(); ++k)
    mo.sources.push_back({train_[k].rows.size(), sources[k].weight});
  mo.micro_batch = opt_.micro_batch;
  mo.grad_accum = grad_accum_;
  mo.world_size = dp_world;
  mo.seed = opt_.seed;
  mo.shuffle = opt_.shuffle;
  LF_ASSIGN_OR_RETURN(mixture_, MixtureSampler::Create(mo));
  steps_per_epoch_ = mixture_->steps_per_epoch();
  return absl::OkStatus();
}

absl::Status Trainer::CheckPreferenceData(const std::vector<TrainSourceOptions>& sources) const {
  if (sources.size() != 1 || sources[0].format != DataFormat::kPreference) {
    return absl::InvalidArgumentError(
        "training.objective dpo takes one training source in data.format PREFERENCE");
  }
  if (!lora_.enabled) {
    return absl::InvalidArgumentError(
        "training.objective dpo needs peft.method lora (the reference is the base with the adapter "
        "off)");
  }
  if (opt_.batching != BatchingMode::kPadding) {
    return absl::InvalidArgumentError("training.objective dpo needs training.batching PADDING");
  }
  if (!eval_.empty())
    return absl::InvalidArgumentError("training.objective dpo runs no evaluation (data.eval)");
  if (train_[0].rows.size() % 2 != 0) {
    return absl::InternalError(absl::StrCat(sources[0].path, ": odd number of preference rows"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> Trainer::TrainPairs(int64_t epoch, int64_t in_epoch, int64_t micro) const {
  return sampler_->Rows(epoch, in_epoch, micro, dp_rank_);
}

int64_t Trainer::GlobalBatch() const {
  if (sampler_) return sampler_->global_batch();
  return mixture_ ? mixture_->global_batch() : 0;
}

absl::StatusOr<Batch> Trainer::TrainBatch(int64_t epoch, int64_t in_epoch, int64_t micro) const {
  if (sampler_) {
    return train_[0].rows.MakeBatch(sampler_->Rows(epoch, in_epoch, micro, dp_rank_),
                                    train_[0].pad_id, train_[0].vocab_size);
  }
  std::vector<const TokenRows*> rows;
  for (const LoadedData& d : train_) rows.push_back(&d.rows);
  // One tokenizer and model for every source: the same pad id and vocabulary.
  return MakeMixtureBatch(rows, mixture_->Rows(epoch, in_epoch, micro, dp_rank_), train_[0].pad_id,
                          train_[0].vocab_size);
}

}  // namespace llamafleet::trainer
