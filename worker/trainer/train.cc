#include "train.h"

#include <ATen/ATen.h>
#include <torch/version.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine.h"
#include "hf_io.h"
#include "model.h"
#include "scheduler/memory_estimate.h"
#include "checkpoint_writer.h"
#include "token_cache.h"
#include "sharded_checkpoint.h"
#include "sharded_engine.h"
#include "nlohmann/json.hpp"
#include "util.h"
#include "worker/path_guard.h"
#include "worker/trainer_events.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

double LearningRate(const LrScheduleOptions& s, double lr, int64_t step, int64_t epoch,
                    int64_t total_steps) {
  if (s.kind == LrScheduleKind::kStep) return lr * std::pow(s.gamma, static_cast<double>(epoch));
  if (step < s.warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (s.kind == LrScheduleKind::kConstant) return lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - s.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / span);
  return lr * (s.min_lr_ratio + (1.0 - s.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

absl::StatusOr<DistEnv> DistEnvFromEnvironment() {
  DistEnv env;
  auto get_int = [](const char* name, int* out) -> absl::Status {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out) || *out < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, "=\"", v, "\" is not a non-negative integer"));
    }
    return absl::OkStatus();
  };
  LF_RETURN_IF_ERROR(get_int("RANK", &env.rank));
  LF_RETURN_IF_ERROR(get_int("WORLD_SIZE", &env.world_size));
  LF_RETURN_IF_ERROR(get_int("LOCAL_RANK", &env.local_rank));
  LF_RETURN_IF_ERROR(get_int("LOCAL_WORLD_SIZE", &env.local_world_size));
  LF_RETURN_IF_ERROR(get_int("MASTER_PORT", &env.master_port));
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  if (env.world_size < 1) return absl::InvalidArgumentError("WORLD_SIZE must be >= 1");
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK ", env.rank, " is not below WORLD_SIZE ", env.world_size));
  }
  return env;
}

double PeakTflopsForDevice(const std::string& name) {
  struct Row {
    const char* needle;
    double tflops;
  };
  static const Row kTable[] = {{"H200", 989.0}, {"H100", 989.0}, {"A100", 312.0},
                               {"A10G", 125.0}, {"L40S", 362.0}, {"V100", 125.0}};
  for (const Row& r : kTable) {
    if (name.find(r.needle) != std::string::npos) return r.tflops;
  }
  return 0.0;
}

namespace {

// Torch reports errors as exceptions; they become a Status here, once.
template <typename F>
absl::Status CatchTorch(const char* what, F&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

absl::StatusOr<at::Device> ResolveDevice(const std::string& name, int local_rank) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda" || name == "auto") {
    if (at::hasCUDA()) return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    if (name == "cuda") {
      return absl::FailedPreconditionError("device cuda requested but this LibTorch has no CUDA");
    }
    return at::Device(at::kCPU);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", name, "\" (auto, cpu, cuda)"));
}

absl::StatusOr<at::ScalarType> ResolveComputeDtype(const std::string& name) {
  if (name == "fp32") return at::kFloat;
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  return absl::InvalidArgumentError(absl::StrCat("precision \"", name, "\" (fp32, bf16, fp16)"));
}

// Resident bytes of this process now (/proc/self/statm), 0 if unreadable.
int64_t CurrentRssBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages_total = 0, pages_resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(pages_resident) * sysconf(_SC_PAGESIZE) : 0;
}

}  // namespace

sched::MemoryEstimate EstimateForRun(const LlamaConfig& config, const TrainOptions& opt,
                                     const ShardingOptions& sh, int world_size, int64_t seq_len,
                                     int64_t grad_accum, const at::Device& device, int64_t runtime_rss) {
  sched::MemoryInputs in;
  in.model.hidden = config.hidden_size;
  in.model.intermediate = config.intermediate_size;
  in.model.layers = config.num_hidden_layers;
  in.model.heads = config.num_attention_heads;
  in.model.kv_heads = config.num_key_value_heads;
  in.model.vocab = config.vocab_size;
  in.model.tied_embeddings = config.tie_word_embeddings;
  switch (sh.strategy) {
    case ShardingStrategy::kShardGradOp: in.strategy = sched::Strategy::kShardGradOp; break;
    case ShardingStrategy::kHybridShard: in.strategy = sched::Strategy::kHybridShard; break;
    case ShardingStrategy::kNoShard: in.strategy = sched::Strategy::kNoShard; break;
    default: in.strategy = sched::Strategy::kFullShard; break;
  }
  in.world_size = world_size;
  in.shard_group_size = sh.strategy == ShardingStrategy::kHybridShard ? sh.hybrid_group_size : 0;
  in.compute_bytes = static_cast<int>(c10::elementSize(sh.compute_dtype));
  in.reduce_bytes = static_cast<int>(c10::elementSize(sh.reduce_dtype));
  in.activation_checkpointing = opt.activation_checkpointing;
  in.micro_batch = opt.micro_batch;
  in.seq_len = seq_len;
  in.grad_accum = grad_accum;
  in.max_inflight_all_gathers = sh.max_inflight_all_gathers;
  in.fused_attention = TORCH_VERSION_MAJOR >= 2;  // model.cc uses scaled_dot_product_attention
  in.gpu = device.is_cuda();
  in.cpu_runtime_bytes = runtime_rss;
  return sched::EstimateMemory(in);
}

namespace {

int64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

struct LoadedData {
  TokenRows rows;
  int32_t pad_id = 0;
  int64_t vocab_size = 0;
};

// The rows of a JSONL file through the token cache (token_cache.h): tokenized once into
// `cache_dir`, then memory-mapped. `log_progress`: this process reports a build's progress.
absl::StatusOr<LoadedData> LoadRows(const std::string& path, DataFormat format,
                                    const Tokenizer* tokenizer, const LlamaConfig& config,
                                    BatchingMode batching, int64_t seq_len, const std::string& cache_dir,
                                    bool log_progress) {
  TokenCacheOptions o;
  o.dir = cache_dir;
  o.load.format = format;
  o.load.tokenizer = tokenizer;
  o.load.bos_id = tokenizer && tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : config.bos_token_id;
  o.load.eos_id = tokenizer && tokenizer->eos_id() >= 0 ? tokenizer->eos_id() : config.eos_token_id;
  o.load.vocab_size = config.vocab_size;
  o.load.max_positions = config.max_position_embeddings;
  o.tokenizer_path = tokenizer ? tokenizer->path() : "";
  if (log_progress) {
    o.progress = [path](int64_t done, int64_t total) {
      LogInfo(absl::StrFormat("tokenizing %s: %.0f%% (%.2f of %.2f GB)", path,
                              total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                              static_cast<double>(done) / 1e9, static_cast<double>(total) / 1e9));
    };
  }
  LF_ASSIGN_OR_RETURN(TokenCacheResult cached, OpenTokenCache(path, o));
  if (log_progress) {
    LogInfo(cached.hit ? absl::StrCat("data ", path, ": token cache hit ", cached.file->path())
                       : absl::StrFormat("data %s: tokenized into %s in %.1f s", path, cached.file->path(),
                                         cached.build_seconds));
  }
  std::shared_ptr<const TokenFile> file = std::move(cached.file);
  LF_ASSIGN_OR_RETURN(TokenRows rows, TokenRows::Create(file, batching, seq_len, path));
  return LoadedData{std::move(rows), 0, config.vocab_size};
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MaybeLoadTokenizer(DataFormat format,
                                                              const std::string& explicit_path,
                                                              const std::string& model_dir,
                                                              const LlamaConfig& config) {
  if (format == DataFormat::kTokens) return std::unique_ptr<Tokenizer>();
  std::string path = explicit_path;
  if (path.empty()) {
    if (model_dir.empty()) {
      return absl::InvalidArgumentError(
          "model.tokenizer is required with a preset unless data.format is TOKENS");
    }
    path = (fs::path(model_dir) / "tokenizer.model").string();
  }
  LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizer(path));
  if (tok->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer has ", tok->vocab_size(),
                                                   " pieces, more than the model's vocab_size ",
                                                   config.vocab_size));
  }
  return tok;
}

}  // namespace

absl::StatusOr<int64_t> GradAccumFor(const TrainOptions& opt, int world_size) {
  if (opt.global_batch <= 0) return opt.grad_accum;
  const int64_t per_step = opt.micro_batch * world_size;
  if (per_step <= 0 || opt.global_batch % per_step != 0) {
    std::vector<std::string> work;
    if (opt.micro_batch > 0 && opt.global_batch % opt.micro_batch == 0) {
      for (int64_t w = 1; w <= opt.global_batch / opt.micro_batch; ++w) {
        if ((opt.global_batch / opt.micro_batch) % w == 0) work.push_back(absl::StrCat(w));
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "training.global_batch_size (", opt.global_batch, ") is not a multiple of micro_batch_size (",
        opt.micro_batch, ") x world size (", world_size, "); world sizes that work: ",
        work.empty() ? "none" : absl::StrJoin(work, ", ")));
  }
  return opt.global_batch / per_step;
}

namespace {

// Mean loss over all target tokens of `rows` (rows split round-robin across ranks).
EvalResult Evaluate(LlamaModel& model, ParamEngine& engine, const LoadedData& data,
                    int64_t micro_batch, const at::Device& device) {
  at::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t count = 0;
  std::vector<int64_t> mine;
  for (int64_t i = engine.rank(); i < data.rows.size(); i += engine.world_size()) {
    mine.push_back(i);
  }
  for (size_t i = 0; i < mine.size(); i += micro_batch) {
    std::vector<int64_t> idx(mine.begin() + i,
                             mine.begin() + std::min(mine.size(), i + static_cast<size_t>(micro_batch)));
    absl::StatusOr<Batch> b_or = data.rows.MakeBatch(idx, data.pad_id, data.vocab_size);
    if (!b_or.ok()) throw std::runtime_error(std::string(b_or.status().message()));
    const Batch& b = *b_or;
    ModelInput in = MakeModelInput(b, device);
    if (in.num_targets == 0) continue;
    loss_sum += model.LossSum(engine, in).item<double>();
    count += in.num_targets;
  }
  EvalResult r;
  loss_sum = engine.AllReduceSum(loss_sum);
  r.tokens = static_cast<int64_t>(engine.AllReduceSum(static_cast<double>(count)));
  r.loss = r.tokens > 0 ? loss_sum / static_cast<double>(r.tokens) : 0.0;
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace

namespace {

// Before anything is read or written: every path the job names stays inside the roots
// with links resolved, and the export directory is new, empty or this job's own.
absl::Status CheckJobPaths(const TrainOptions& opt, bool rank0) {
  if (!opt.path_roots.empty()) {
    const std::pair<const char*, const std::string*> fields[] = {
        {"model.path", &opt.model_path},         {"model.tokenizer", &opt.tokenizer_path},
        {"data.train_path", &opt.train_path},     {"data.eval_path", &opt.eval_path},
        {"checkpoint.dir", &opt.checkpoint_dir}, {"checkpoint.resume", &opt.resume},
        {"output.export_dir", &opt.export_dir}};
    for (const auto& [field, value] : fields) {
      if (value->empty() || (*value == "latest" && std::string(field) == "checkpoint.resume")) continue;
      LF_RETURN_IF_ERROR(worker::CheckPathInRoots(field, *value, opt.path_roots));
    }
  }
  if (rank0 && !opt.export_dir.empty()) {
    LF_RETURN_IF_ERROR(worker::CheckExportDir(opt.export_dir, opt.job_id));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTraining(const TrainOptions& opt, const DistEnv& env) {
  const int64_t runtime_rss = CurrentRssBytes();  // before training allocates anything
  return CatchTorch("training", [&]() -> absl::Status {
    const bool rank0 = env.rank == 0;
    LF_RETURN_IF_ERROR(CheckJobPaths(opt, rank0));
    LF_ASSIGN_OR_RETURN(at::Device device, ResolveDevice(opt.device, env.local_rank));
    LF_ASSIGN_OR_RETURN(at::ScalarType compute_dtype, ResolveComputeDtype(opt.compute_dtype));
    at::manual_seed(opt.seed);

    // Model shape and weights.
    LlamaConfig config;
    std::unique_ptr<HfModelDir> hf;
    if (!opt.model_path.empty()) {
      LF_ASSIGN_OR_RETURN(hf, HfModelDir::Open(opt.model_path));
      config = hf->config();
    } else {
      LF_ASSIGN_OR_RETURN(config, PresetConfig(opt.preset));
    }
    const std::vector<UnitLayout> layout = MakeLayout(config);
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        MaybeLoadTokenizer(opt.format, opt.tokenizer_path, opt.model_path, config));

    int64_t seq_len = opt.seq_len;
    if (seq_len > config.max_position_embeddings) {
      LogWarning(absl::StrCat("seq_len ", seq_len, " capped to max_position_embeddings ",
                              config.max_position_embeddings));
      seq_len = config.max_position_embeddings;
    }
    const std::string cache_dir = opt.token_cache_dir.empty() ? DefaultTokenCacheDir() : opt.token_cache_dir;
    LF_ASSIGN_OR_RETURN(LoadedData train, LoadRows(opt.train_path, opt.format, tokenizer.get(), config,
                                                   opt.batching, seq_len, cache_dir, env.rank == 0));
    std::optional<LoadedData> eval;
    if (!opt.eval_path.empty()) {
      LF_ASSIGN_OR_RETURN(eval, LoadRows(opt.eval_path, opt.format, tokenizer.get(), config,
                                         opt.batching, seq_len, cache_dir, env.rank == 0));
    }
    // With a global batch, the micro-steps per step follow from the world this run got, so
    // every step consumes the same rows whatever the world size (see Sampler).
    LF_ASSIGN_OR_RETURN(const int64_t grad_accum, GradAccumFor(opt, env.world_size));
    Sampler::Options so;
    so.num_rows = train.rows.size();
    so.micro_batch = opt.micro_batch;
    so.grad_accum = grad_accum;
    so.world_size = env.world_size;
    so.seed = opt.seed;
    so.shuffle = opt.shuffle;
    LF_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));
    const int64_t spe = sampler.steps_per_epoch();
    int64_t total_steps = opt.epochs > 0 ? opt.epochs * spe : opt.max_steps;
    if (opt.max_steps > 0) total_steps = std::min(total_steps, opt.max_steps);
    if (total_steps <= 0) return absl::InvalidArgumentError("nothing to train: zero steps");

    // Process groups, then the engine: each rank reads only its shard's slices (from the
    // resumed checkpoint, the HF weights, or the seeded init).
    RendezvousOptions ro;
    ro.rank = env.rank;
    ro.world_size = env.world_size;
    ro.master_addr = env.master_addr;
    ro.master_port = env.master_port;
    ro.timeout = std::chrono::seconds(opt.collective_timeout_s);
    ro.device = device;
    LF_ASSIGN_OR_RETURN(std::unique_ptr<DistContext> dist, DistContext::Create(ro));
    ShardingOptions sh;
    LF_ASSIGN_OR_RETURN(sh.strategy, ParseShardingStrategy(opt.sharding));
    sh.hybrid_group_size = opt.hybrid_group_size > 0 ? opt.hybrid_group_size : env.local_world_size;
    sh.compute_dtype = compute_dtype;
    LF_ASSIGN_OR_RETURN(sh.reduce_dtype, ResolveComputeDtype(opt.reduce_dtype));
    sh.max_inflight_all_gathers = opt.max_inflight_all_gathers;
    sh.adamw = AdamWOptions{opt.beta1, opt.beta2, opt.eps, opt.weight_decay};
    sh.device = device;

    std::string resume_dir = opt.resume;
    if (!opt.resume_candidates.empty()) {
      // Every rank checks the manifest hash and its share of the files' hashes; the ranks
      // agree (one all-reduce) on the newest candidate none of them refused.
      const size_t n = opt.resume_candidates.size();
      std::vector<std::string> reasons(n);
      at::Tensor refused = at::zeros({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kDouble));
      for (size_t i = 0; i < n; ++i) {
        absl::Status v = VerifyCheckpoint(opt.resume_candidates[i].path, opt.resume_candidates[i].manifest_sha256,
                                          env.rank, env.world_size);
        if (!v.ok()) {
          reasons[i] = std::string(v.message());
          refused[static_cast<int64_t>(i)] = 1.0;
        }
      }
      at::Tensor agreed = refused.to(device);
      LF_RETURN_IF_ERROR(dist->world().AllReduceSum(agreed)->Wait());
      agreed = agreed.cpu();
      trainer_events::Resumed used;
      for (size_t i = 0; i < n && used.path.empty(); ++i) {
        const trainer_events::ResumeCandidate& c = opt.resume_candidates[i];
        if (agreed[static_cast<int64_t>(i)].item<double>() == 0) {
          used.path = c.path;
          used.step = c.step;
        } else {
          used.skipped.push_back({c.path, reasons[i].empty() ? "refused by another rank" : reasons[i]});
          if (rank0) LogWarning(absl::StrCat("not resuming from ", c.path, ": ", used.skipped.back().reason));
        }
      }
      if (used.path.empty()) {
        // The job has recorded checkpoints, so starting fresh would lose its progress
        // silently; the storage may come back (or an older attempt's files be restored).
        return absl::UnavailableError(absl::StrCat("none of the ", n, " recorded checkpoints verifies (newest ",
                                                   opt.resume_candidates[0].path, ": ", used.skipped[0].reason,
                                                   "); not starting from scratch"));
      }
      if (rank0) {
        LogInfo(absl::StrCat("resuming from ", used.path, " (step ", used.step, "; ", used.skipped.size(),
                             " newer recorded checkpoint(s) refused)"));
        EmitJsonLine(trainer_events::ToLine(used));
      }
      resume_dir = used.path;
    } else if (resume_dir == "latest") {
      if (opt.checkpoint_dir.empty()) {
        return absl::InvalidArgumentError("checkpoint.resume: latest needs checkpoint.dir");
      }
      auto latest = LatestCheckpoint(opt.checkpoint_dir);
      if (latest.ok()) {
        resume_dir = *latest;
        if (!opt.path_roots.empty()) {
          LF_RETURN_IF_ERROR(worker::CheckPathInRoots("checkpoint.resume (latest)", resume_dir, opt.path_roots));
        }
      } else {
        if (rank0) LogInfo(absl::StrCat("no complete checkpoint in ", opt.checkpoint_dir, ": starting fresh"));
        resume_dir.clear();
      }
    }
    std::unique_ptr<ShardedCheckpoint> resume;
    if (!resume_dir.empty()) {
      LF_ASSIGN_OR_RETURN(resume, ShardedCheckpoint::Open(resume_dir));
      LF_RETURN_IF_ERROR(resume->CheckLayout(layout));
    }
    const ShardSource source = resume ? resume->ParamSource()
                               : hf   ? HfShardSource(*hf, layout)
                                      : SeededShardSource(layout, opt.seed);
    LF_ASSIGN_OR_RETURN(std::unique_ptr<ShardedEngine> engine_owner,
                        ShardedEngine::CreateWithContext(layout, sh, *dist, source));
    ShardedEngine& engine = *engine_owner;
    int64_t start_step = 0, tokens_seen = 0;
    if (resume) {
      // The data position is global: rows consumed, in rows per step. A different global
      // batch would replay or skip rows, so it is refused rather than guessed.
      const TrainerProgress saved = resume->progress();
      if (saved.global_batch > 0 && saved.global_batch != sampler.global_batch()) {
        return absl::FailedPreconditionError(absl::StrCat(
            resume_dir, ": checkpoint was written with ", saved.global_batch,
            " rows per step, this run takes ", sampler.global_batch(),
            " (set training.global_batch_size to ", saved.global_batch,
            " to continue the same data order on any world size)"));
      }
      LF_RETURN_IF_ERROR(resume->RestoreEngine(engine));
      start_step = std::min(resume->step(), total_steps);
      if (saved.global_batch > 0 && saved.rows_seen != saved.step * saved.global_batch) {
        return absl::DataLossError(absl::StrCat(resume_dir, ": manifest rows_seen ", saved.rows_seen,
                                                " disagrees with step ", saved.step, " x global_batch ",
                                                saved.global_batch));
      }
      tokens_seen = resume->progress().tokens_seen;
      if (rank0) {
        LogInfo(absl::StrCat("resumed from ", resume_dir, " at step ", start_step, " (saved by ",
                             resume->world_size(), " ranks, ", resume->manifest().value("strategy", "?"),
                             ")"));
      }
    }
    resume.reset();
    hf.reset();  // unmap the source files
    LlamaModel model(config, device, compute_dtype);
    model.set_activation_checkpointing(opt.activation_checkpointing);

    const int64_t flops_per_token =
        6 * config.NumNonEmbeddingParameters() +
        6 * config.num_hidden_layers * config.num_attention_heads * 2 * config.head_dim() * seq_len;
    // MFU needs the device's peak: --peak-tflops / LLAMAFLEET_PEAK_TFLOPS (the CUDA device-name
    // lookup for PeakTflopsForDevice comes with the GPU path); without one, "mfu" is null.
    double peak = opt.peak_tflops;
    if (peak <= 0 && device.is_cuda()) peak = PeakTflopsForDevice(DeviceName(device));
    const sched::MemoryEstimate estimate =
        EstimateForRun(config, opt, sh, env.world_size, seq_len, grad_accum, device, runtime_rss);
    if (rank0) {
      LogInfo(absl::StrCat("model: ", config.NumParameters(), " parameters, ", config.num_hidden_layers,
                           " layers, dim ", config.hidden_size, "; data: ", train.rows.size(),
                           " rows of <= ", seq_len, " tokens; ", total_steps, " steps (", spe,
                           " per epoch); device ", device.str()));
      trainer_events::Started started{env.world_size, static_cast<int64_t>(config.NumParameters()),
                                      total_steps, spe, train.rows.size(),
                                      seq_len};
      started.global_batch = sampler.global_batch();
      started.grad_accum = grad_accum;
      started.memory_estimate = estimate;
      EmitJsonLine(trainer_events::ToLine(started));
    }

    // Checkpoints: the step loop waits only for the snapshot of this rank's shards; the
    // writer thread writes them (checkpoint_writer.h) and rank 0 reports each checkpoint
    // once it is complete.
    std::unique_ptr<CheckpointWriter> writer;
    if (!opt.checkpoint_dir.empty()) {
      LF_ASSIGN_OR_RETURN(std::unique_ptr<KeyValueStore> kv, dist->NewKeyValueStore("checkpoint-writer"));
      CheckpointWriterOptions wo;
      wo.root = opt.checkpoint_dir;
      wo.async = opt.checkpoint_async;
      wo.timeout = std::max<std::chrono::milliseconds>(std::chrono::minutes(30), dist->timeout());
      writer = std::make_unique<CheckpointWriter>(std::move(kv), wo);
    }
    auto report = [&](const absl::StatusOr<std::optional<SavedCheckpoint>>& done) -> absl::Status {
      if (!done.ok()) return done.status();
      if (rank0 && done->has_value()) {
        const SavedCheckpoint& saved = **done;
        EmitJsonLine(trainer_events::ToLine(trainer_events::CheckpointSaved{
            saved.path, saved.step, saved.bytes, saved.manifest_sha256, saved.loss}));
      }
      return absl::OkStatus();
    };
    auto save_checkpoint = [&](int64_t step, double loss) -> absl::Status {
      if (!writer) return absl::OkStatus();
      TrainerProgress progress;
      progress.step = step;
      progress.epoch = step / spe;
      progress.loss = loss;
      progress.seed = opt.seed;
      progress.tokens_seen = tokens_seen;
      progress.rows_seen = step * sampler.global_batch();
      progress.global_batch = sampler.global_batch();
      std::optional<SavedCheckpoint> previous;
      LF_RETURN_IF_ERROR(writer->Start(TakeSnapshot(engine, config, progress), &previous));
      LF_RETURN_IF_ERROR(report(previous));
      return opt.checkpoint_async ? absl::OkStatus() : report(writer->Wait());
    };
    // The save in flight, finished (before a preemption stop, the export, the end).
    auto finish_checkpoint = [&]() -> absl::Status { return writer ? report(writer->Wait()) : absl::OkStatus(); };
    InstallPreemptionHandler();

    using Clock = std::chrono::steady_clock;
    auto interval_start = Clock::now();
    int64_t interval_tokens = 0, interval_steps = 0;
    double interval_loss = 0, last_loss = 0;
    for (int64_t step = start_step; step < total_steps; ++step) {
      const int64_t epoch = step / spe, in_epoch = step % spe;
      std::vector<ModelInput> micro;
      int64_t local_targets = 0, local_real = 0;
      for (int64_t m = 0; m < grad_accum; ++m) {
        LF_ASSIGN_OR_RETURN(Batch b, train.rows.MakeBatch(sampler.Rows(epoch, in_epoch, m, env.rank), train.pad_id,
                                                          train.vocab_size));
        local_real += b.real_tokens;
        micro.push_back(MakeModelInput(b, device));
        local_targets += micro.back().num_targets;
      }
      const double global_targets = engine.AllReduceSum(static_cast<double>(local_targets));
      const double denom = std::max(1.0, global_targets);
      engine.ZeroGrad();
      double loss_sum = 0;
      for (size_t m = 0; m < micro.size(); ++m) {
        // Only the last micro-step's backward reduces (where the strategy allows).
        engine.SetGradientSync(m + 1 == micro.size());
        at::Tensor l = model.LossSum(engine, micro[m]);
        (l * (engine.loss_scale() / denom)).backward();
        loss_sum += l.item<double>();
      }
      LF_RETURN_IF_ERROR(engine.ReduceGradients());
      const double loss = engine.AllReduceSum(loss_sum) / denom;
      if (!std::isfinite(loss)) {
        return absl::InternalError(absl::StrCat("loss is ", loss, " at step ", step + 1,
                                                " (diverged: lower training.lr or set grad_clip)"));
      }
      const double grad_norm = engine.ClipGradNorm(opt.grad_clip);
      const double lr = LearningRate(opt.schedule, opt.lr, step, epoch, total_steps);
      engine.Step(lr);
      last_loss = loss;

      const int64_t step_tokens = static_cast<int64_t>(engine.AllReduceSum(static_cast<double>(local_real)));
      interval_tokens += step_tokens;
      tokens_seen += step_tokens;
      interval_loss += loss;
      ++interval_steps;
      const bool last = step + 1 == total_steps;
      if (rank0 && ((step + 1) % opt.log_every == 0 || last)) {
        const double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
        const double tps = secs > 0 ? static_cast<double>(interval_tokens) / secs : 0.0;
        const double tflops = tps * static_cast<double>(flops_per_token) / 1e12;
        trainer_events::Metrics line;
        line.step = step + 1;
        line.epoch = epoch;
        line.loss = interval_loss / static_cast<double>(interval_steps);
        line.lr = lr;
        line.grad_norm = grad_norm;
        line.tokens = tokens_seen;
        line.tokens_per_s = tps;
        line.tflops = tflops;
        line.peak_mem_bytes = device.is_cuda() ? PeakDeviceMemoryBytes(device) : PeakRssBytes();
        if (peak > 0) line.mfu = tflops / (peak * env.world_size);
        EmitJsonLine(trainer_events::ToLine(line));
        LogInfo(absl::StrCat("step ", step + 1, "/", total_steps, " loss ", line.loss,
                             " lr ", lr, " grad_norm ", grad_norm, " tokens/s ", static_cast<int64_t>(tps)));
        interval_start = Clock::now();
        interval_tokens = interval_steps = 0;
        interval_loss = 0;
      }
      if (writer) LF_RETURN_IF_ERROR(report(writer->Poll()));
      bool saved_now = false;
      if (opt.checkpoint_every > 0 && (step + 1) % opt.checkpoint_every == 0 && !last) {
        LF_RETURN_IF_ERROR(save_checkpoint(step + 1, loss));
        saved_now = true;
      }
      // Preemption (SIGTERM on any rank): all ranks agree, checkpoint, and stop cleanly.
      if (engine.AllReduceSum(PreemptionRequested() ? 1.0 : 0.0) > 0 && !last) {
        if (!saved_now) LF_RETURN_IF_ERROR(save_checkpoint(step + 1, loss));
        LF_RETURN_IF_ERROR(finish_checkpoint());
        if (rank0) {
          LogInfo(absl::StrCat("SIGTERM: stopped after step ", step + 1, " with a checkpoint"));
          EmitJsonLine(trainer_events::ToLine(trainer_events::Preempted{step + 1, loss}));
        }
        return absl::OkStatus();
      }
    }
    if (eval) {
      EvalResult r = Evaluate(model, engine, *eval, opt.micro_batch, device);
      if (rank0) {
        EmitJsonLine(trainer_events::ToLine(trainer_events::Eval{total_steps, r.loss, r.perplexity, r.tokens}));
      }
    }
    LF_RETURN_IF_ERROR(save_checkpoint(total_steps, last_loss));
    LF_RETURN_IF_ERROR(finish_checkpoint());
    if (!opt.export_dir.empty()) {
      ExportOptions eo;
      eo.dtype = opt.export_dtype;
      eo.max_shard_bytes = opt.max_shard_bytes;
      eo.owner = opt.job_id;
      if (tokenizer) {
        eo.tokenizer_path = opt.tokenizer_path.empty()
                                ? (fs::path(opt.model_path) / "tokenizer.model").string()
                                : opt.tokenizer_path;
      }
      // Gathering a unit is collective; only rank 0 writes.
      if (rank0) {
        LF_RETURN_IF_ERROR(ExportHfDir(
            config, layout, [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> { return engine.FullUnit(u); },
            opt.export_dir, eo));
        LogInfo(absl::StrCat("exported ", opt.export_dir));
      } else {
        for (size_t u = 0; u < layout.size(); ++u) engine.FullUnit(static_cast<int>(u));
      }
    }
    if (rank0) {
      EmitJsonLine(trainer_events::ToLine(trainer_events::Finished{total_steps, last_loss, opt.export_dir}));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<EvalResult> RunEval(const EvalOptions& opt) {
  EvalResult result;
  absl::Status s = CatchTorch("eval", [&]() -> absl::Status {
    LF_ASSIGN_OR_RETURN(at::Device device, ResolveDevice(opt.device, 0));
    LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(opt.model_dir));
    const LlamaConfig config = hf->config();
    const std::vector<UnitLayout> layout = MakeLayout(config);
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        MaybeLoadTokenizer(opt.format, opt.tokenizer_path, opt.model_dir, config));
    int64_t seq_len = opt.seq_len > 0 ? opt.seq_len : config.max_position_embeddings;
    if (seq_len > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("--seq-len ", seq_len, " exceeds max_position_embeddings ",
                                                     config.max_position_embeddings));
    }
    if (opt.micro_batch <= 0) return absl::InvalidArgumentError("--micro-batch must be > 0");
    LF_ASSIGN_OR_RETURN(LoadedData data, LoadRows(opt.data_path, opt.format, tokenizer.get(), config,
                                                  opt.batching, seq_len, DefaultTokenCacheDir(), true));
    LF_ASSIGN_OR_RETURN(auto params, hf->ReadAll(layout));
    LocalEngine engine(layout, std::move(params), device, at::kFloat, AdamWOptions{});
    LlamaModel model(config, device, at::kFloat);
    result = Evaluate(model, engine, data, opt.micro_batch, device);
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return result;
}

absl::Status RunExport(const std::string& checkpoint_dir, const std::string& out_dir, StDtype dtype,
                       uint64_t max_shard_bytes) {
  return CatchTorch("export", [&]() -> absl::Status {
    if (IsShardedCheckpoint(checkpoint_dir)) {
      std::error_code same_ec;
      if (fs::weakly_canonical(checkpoint_dir, same_ec) == fs::weakly_canonical(out_dir, same_ec)) {
        return absl::InvalidArgumentError("--out must differ from --checkpoint");
      }
      // A sharded training checkpoint: consolidated one unit at a time.
      ExportOptions eo;
      eo.dtype = dtype;
      eo.max_shard_bytes = max_shard_bytes;
      return ExportShardedCheckpoint(checkpoint_dir, out_dir, eo);
    }
    LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(checkpoint_dir));
    const std::vector<UnitLayout> layout = MakeLayout(hf->config());
    ExportOptions eo;
    eo.dtype = dtype;
    eo.max_shard_bytes = max_shard_bytes;
    std::error_code ec;
    const fs::path tok = fs::path(checkpoint_dir) / "tokenizer.model";
    if (fs::exists(tok, ec)) eo.tokenizer_path = tok.string();
    // Tensors are read at their stored precision and converted once, so an export to the
    // stored dtype is bit-identical.
    auto fetch = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> {
      std::vector<at::Tensor> out;
      for (const std::string& name : layout[u].param_names) {
        LF_ASSIGN_OR_RETURN(at::Tensor t, hf->Read(name, ToTorchDtype(dtype)));
        out.push_back(std::move(t));
      }
      return out;
    };
    if (fs::weakly_canonical(checkpoint_dir, ec) == fs::weakly_canonical(out_dir, ec)) {
      return absl::InvalidArgumentError("--out must differ from --checkpoint");
    }
    return ExportHfDir(hf->config(), layout, fetch, out_dir, eo);
  });
}

}  // namespace llamafleet::trainer
