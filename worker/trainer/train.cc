#include "train.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "engine.h"
#include "gguf_export.h"
#include "hf_io.h"
#include "model.h"
#include "model_file.h"
#include "jobspec/memory_estimate.h"
#include "token_cache.h"
#include "train_parts.h"
#include "trainer.h"
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

absl::StatusOr<at::Device> ResolveDevice(const std::string& name, int local_rank) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda" || name == "auto") {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string visible_env = cvd != nullptr ? cvd : "unset";
    if (at::hasCUDA()) {
      const size_t visible = at::getNumGPUs();
      if (local_rank < 0 || static_cast<size_t>(local_rank) >= visible) {
        return absl::FailedPreconditionError(absl::StrCat(
            "LOCAL_RANK ", local_rank, " needs CUDA device ", local_rank, " but ", visible,
            " are visible (CUDA_VISIBLE_DEVICES=", visible_env, ")"));
      }
      return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    }
    if (name == "cuda") {
#if defined(LLAMAFLEET_HAVE_CUDA)
      return absl::FailedPreconditionError(absl::StrCat(
          "device cuda requested but no CUDA device is usable here: this trainer is built with CUDA, "
          "and the CUDA runtime finds no GPU (no NVIDIA driver loaded, or none visible: "
          "CUDA_VISIBLE_DEVICES=", visible_env, ")"));
#else
      return absl::FailedPreconditionError(
          "device cuda requested but this LibTorch has no CUDA (a CPU build of llamafleet-train)");
#endif
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


sched::MemoryEstimate EstimateForRun(const LlamaConfig& config, const TrainOptions& opt,
                                     const ShardingOptions& sh, int world_size, int64_t seq_len,
                                     int64_t grad_accum, const at::Device& device, int64_t runtime_rss,
                                     const LoraOptions& lora) {
  sched::MemoryInputs in;
  in.model.hidden = config.hidden_size;
  in.model.intermediate = config.intermediate_size;
  in.model.layers = config.num_hidden_layers;
  in.model.heads = config.num_attention_heads;
  in.model.kv_heads = config.num_key_value_heads;
  in.model.vocab = config.vocab_size;
  in.model.tied_embeddings = config.tie_word_embeddings;
  in.model.head_dim = config.head_dim();
  in.model.qkv_bias = config.qkv_bias;
  switch (sh.strategy) {
    case ShardingStrategy::kShardGradOp: in.strategy = sched::Strategy::kShardGradOp; break;
    case ShardingStrategy::kHybridShard: in.strategy = sched::Strategy::kHybridShard; break;
    case ShardingStrategy::kNoShard: in.strategy = sched::Strategy::kNoShard; break;
    default: in.strategy = sched::Strategy::kFullShard; break;
  }
  in.world_size = world_size;
  in.shard_group_size = sh.strategy == ShardingStrategy::kHybridShard ? sh.hybrid_group_size : 0;
  // The estimate's contract: world_size and shard_group_size count every rank, tensor-parallel
  // ones included; it divides them by tensor_parallel itself.
  in.tensor_parallel = opt.tensor_parallel;
  in.compute_bytes = static_cast<int>(c10::elementSize(sh.compute_dtype));
  in.reduce_bytes = static_cast<int>(c10::elementSize(sh.reduce_dtype));
  switch (opt.activation_checkpointing) {
    case ActivationCheckpointing::kNone:
      in.activation_checkpointing = sched::Checkpointing::kNone;
      break;
    case ActivationCheckpointing::kFull:
      in.activation_checkpointing = sched::Checkpointing::kFull;
      break;
    case ActivationCheckpointing::kSelective:
      in.activation_checkpointing = sched::Checkpointing::kSelective;
      break;
  }
  in.micro_batch = opt.micro_batch;
  in.seq_len = seq_len;
  in.grad_accum = grad_accum;
  in.max_inflight_all_gathers = sh.max_inflight_all_gathers;
  in.fused_attention = TORCH_VERSION_MAJOR >= 2;  // model.cc uses scaled_dot_product_attention
  in.document_mask = opt.batching == BatchingMode::kPacking;
  in.gpu = device.is_cuda();
  in.cpu_runtime_bytes = runtime_rss;
  in.async_checkpoints = !opt.checkpoint_dir.empty() && opt.checkpoint_async;
  in.forward_only = opt.evaluate_only;
  if (lora.enabled) {
    in.lora_r = lora.r;
    in.nf4_base = lora.nf4_base;
    for (const std::string& m : lora.target_modules) in.lora_modules |= sched::LoraModuleBit(m);
  }
  return sched::EstimateMemory(in);
}


int64_t PeakRssBytes() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

bool ProgressEventsWanted() {
  const char* v = std::getenv("LLAMAFLEET_PROGRESS_EVENTS");
  return v != nullptr && std::string_view(v) == "1";
}

// The rows of a JSONL file through the token cache (token_cache.h): tokenized once into
// `cache_dir`, then memory-mapped. `log_progress`: this process reports a build's progress.
absl::StatusOr<LoadedData> LoadRows(const std::string& path, DataFormat format,
                                    const Tokenizer* tokenizer, const LlamaConfig& config,
                                    BatchingMode batching, int64_t seq_len,
                                    const std::string& cache_dir, uint64_t cache_max_bytes,
                                    bool log_progress, bool progress_events,
                                    const ChatDataOptions& chat) {
  TokenCacheOptions o;
  o.dir = cache_dir;
  o.max_bytes = cache_max_bytes;
  o.load.format = format;
  o.load.tokenizer = tokenizer;
  // A tokenizer.json without a BOS in its post-processor (Qwen2.5) adds none, as
  // transformers does; a SentencePiece model without one falls back to config.json's.
  o.load.bos_id = tokenizer && (tokenizer->bos_id() >= 0 || tokenizer->kind() != "sentencepiece")
                      ? tokenizer->bos_id()
                      : config.bos_token_id;
  o.load.eos_id = tokenizer && tokenizer->eos_id() >= 0 ? tokenizer->eos_id() : config.eos_token_id;
  o.load.vocab_size = config.vocab_size;
  o.load.max_positions = config.max_position_embeddings;
  o.load.chat_template = chat.chat_template;
  o.load.train_on = chat.train_on;
  if (log_progress || progress_events) {  // (only a process that builds the entry calls it)
    o.progress = [path, progress_events](int64_t done, int64_t total) {
      if (progress_events) EmitJsonLine(trainer_events::ToLine(trainer_events::Tokenizing{path, done, total}));
      LogInfo(absl::StrFormat(
          "tokenizing %s: %.0f%% (%s of %s)", path,
          total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
          FormatBytes(done), FormatBytes(total)));
    };
  }
  LF_ASSIGN_OR_RETURN(TokenCacheResult cached, OpenTokenCache(path, o));
  if (log_progress) {
    LogInfo(cached.built_meanwhile ? absl::StrCat("data ", path, ": tokenized by another process into ", cached.file->path())
            : cached.hit           ? absl::StrCat("data ", path, ": token cache hit ", cached.file->path())
                                   : absl::StrFormat("data %s: tokenized into %s in %.1f s", path, cached.file->path(),
                                                     cached.build_seconds));
  }
  // In the powers of 1024 that --token-cache-max-size is given in.
  auto size = [](uint64_t bytes) { return FormatBytes(static_cast<int64_t>(bytes)); };
  if (cached.evicted > 0) {
    LogInfo(absl::StrFormat("token cache %s: removed the %d least recently used entries (%s) to stay within %s",
                            cache_dir, cached.evicted, size(cached.evicted_bytes), size(cache_max_bytes)));
  }
  if (cache_max_bytes > 0 && cached.kept_bytes > cache_max_bytes) {
    LogWarning(absl::StrFormat("token cache %s holds %s, over its bound of %s: what is left is in use (this "
                               "run's entry included), removed by a later build once nothing maps it",
                               cache_dir, size(cached.kept_bytes), size(cache_max_bytes)));
  }
  std::shared_ptr<const TokenFile> file = std::move(cached.file);
  LF_ASSIGN_OR_RETURN(TokenRows rows, TokenRows::Create(file, batching, seq_len, path));
  // Built by another process (a rank of this run) while this one waited: tokenized for this start.
  return LoadedData{std::move(rows), 0, config.vocab_size, cached.hit && !cached.built_meanwhile};
}

absl::StatusOr<std::optional<ChatTemplate>> MaybeResolveChatTemplate(DataFormat format,
                                                                     const std::string& setting,
                                                                     const Tokenizer* tokenizer) {
  if (format != DataFormat::kChat) return std::nullopt;
  if (tokenizer == nullptr) return absl::InvalidArgumentError("chat data needs a tokenizer");
  const std::string& path = tokenizer->path();
  const size_t slash = path.rfind('/');
  return ResolveChatTemplate(setting, slash == std::string::npos ? "." : path.substr(0, slash));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MaybeLoadTokenizer(DataFormat format,
                                                              const std::string& explicit_path,
                                                              const std::string& model_dir,
                                                              LlamaConfig* config) {
  if (format == DataFormat::kTokens) return std::unique_ptr<Tokenizer>();
  std::string path = explicit_path;
  if (path.empty()) {
    if (model_dir.empty()) {
      return absl::InvalidArgumentError(
          "model.tokenizer is required with a preset unless data.format is TOKENS");
    }
    path = model_dir;  // its tokenizer.json, else its tokenizer.model
  }
  LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, LoadTokenizer(path));
  path = tok->path();
  if (config->vocab_size == 0) {
    config->vocab_size = tok->vocab_size();
    // Sized from a file the job names: bounded like any config.json's before anything
    // is allocated from it.
    if (absl::Status s = ValidateConfig(*config); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
  } else if (tok->vocab_size() > config->vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer has ", tok->vocab_size(),
                                                   " pieces, more than the model's vocab_size ",
                                                   config->vocab_size));
  }
  return tok;
}

std::vector<TrainSourceOptions> TrainSourcesOf(const TrainOptions& opt) {
  if (!opt.train_sources.empty()) return opt.train_sources;
  if (opt.train_path.empty()) return {};
  return {TrainSourceOptions{opt.train_path, opt.format, 1.0}};
}

std::vector<EvalSetOptions> EvalSetsOf(const TrainOptions& opt) {
  if (!opt.eval_sets.empty()) return opt.eval_sets;
  if (opt.eval_path.empty()) return {};
  return {EvalSetOptions{"", opt.eval_path, opt.format}};
}

bool DataNeedsTokenizer(const TrainOptions& opt) {
  if (opt.train_sources.empty() && opt.eval_sets.empty()) return opt.format != DataFormat::kTokens;
  for (const TrainSourceOptions& s : TrainSourcesOf(opt)) {
    if (s.format != DataFormat::kTokens) return true;
  }
  for (const EvalSetOptions& s : EvalSetsOf(opt)) {
    if (s.format != DataFormat::kTokens) return true;
  }
  return false;
}

bool DataUsesChat(const TrainOptions& opt) {
  if (opt.train_sources.empty() && opt.eval_sets.empty()) return opt.format == DataFormat::kChat;
  for (const TrainSourceOptions& s : TrainSourcesOf(opt)) {
    if (s.format == DataFormat::kChat) return true;
  }
  for (const EvalSetOptions& s : EvalSetsOf(opt)) {
    if (s.format == DataFormat::kChat) return true;
  }
  return false;
}

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


// Mean loss over all target tokens of `rows` (rows split round-robin across ranks).
EvalResult Evaluate(LlamaModel& model, ParamEngine& engine, const LoadedData& data,
                    int64_t micro_batch, const at::Device& device) {
  at::NoGradGuard no_grad;
  struct EvalMode {  // no dropout while evaluating, restored however this returns
    LlamaModel& m;
    bool was;
    ~EvalMode() { m.set_training(was); }
  } mode{model, model.training()};
  model.set_training(false);
  double loss_sum = 0;
  int64_t count = 0;
  std::vector<int64_t> mine;
  for (int64_t i = engine.data_parallel_rank(); i < data.rows.size(); i += engine.data_parallel_size()) {
    mine.push_back(i);
  }
  // Every rank runs as many forward passes as the rank with the most rows (rank 0): with
  // sharded parameters each pass is a series of collectives, so a rank that ran fewer
  // would leave the others waiting in one. A pass past a rank's own rows runs the data's
  // row 0 and is not counted.
  const int64_t world = engine.data_parallel_size();
  const int64_t most_rows = (static_cast<int64_t>(data.rows.size()) + world - 1) / world;
  const int64_t passes = (most_rows + micro_batch - 1) / micro_batch;
  for (int64_t p = 0; p < passes; ++p) {
    const size_t begin = static_cast<size_t>(p * micro_batch);
    const bool counted = begin < mine.size();
    const std::vector<int64_t> idx =
        counted ? std::vector<int64_t>(mine.begin() + begin,
                                       mine.begin() + std::min(mine.size(), begin + static_cast<size_t>(micro_batch)))
                : std::vector<int64_t>{0};
    absl::StatusOr<Batch> b_or = data.rows.MakeBatch(idx, data.pad_id, data.vocab_size);
    if (!b_or.ok()) throw std::runtime_error(std::string(b_or.status().message()));
    ModelInput in = MakeModelInput(*b_or, device);
    const double loss = model.LossSum(engine, in).item<double>();
    if (!counted || in.num_targets == 0) continue;
    loss_sum += loss;
    count += in.num_targets;
  }
  EvalResult r;
  loss_sum = engine.AllReduceSum(loss_sum);
  r.tokens = static_cast<int64_t>(engine.AllReduceSum(static_cast<double>(count)));
  r.loss = r.tokens > 0 ? loss_sum / static_cast<double>(r.tokens) : 0.0;
  r.perplexity = std::exp(r.loss);
  return r;
}



// Before anything is read or written: every path the job names stays inside the roots
// with links resolved, and the export directory is new, empty or this job's own.
absl::Status CheckJobPaths(const TrainOptions& opt, bool rank0) {
  if (!opt.path_roots.empty()) {
    std::vector<std::pair<std::string, std::string>> fields = {
        {"model.path", opt.model_path},
        {"model.tokenizer", opt.tokenizer_path},
        {"data.train_path", opt.train_path},
        {"data.eval_path", opt.eval_path}};
    for (size_t i = 0; i < opt.train_sources.size(); ++i) {
      fields.push_back({absl::StrCat("data.train[", i, "].path"), opt.train_sources[i].path});
    }
    for (size_t i = 0; i < opt.eval_sets.size(); ++i) {
      fields.push_back({absl::StrCat("data.eval[", i, "].path"), opt.eval_sets[i].path});
    }
    fields.insert(fields.end(), {{"checkpoint.dir", opt.checkpoint_dir},
                                 {"checkpoint.resume", opt.resume},
                                 {"output.export_dir", opt.export_dir},
                                 {"peft.adapter_path", opt.lora.adapter_path},
                                 {"eval.samples.prompts", opt.samples.prompts_path}});
    for (const auto& [field, value] : fields) {
      if (value.empty() || (value == "latest" && field == "checkpoint.resume")) continue;
      LF_RETURN_IF_ERROR(worker::CheckPathInRoots(field, value, opt.path_roots));
    }
  }
  if (rank0 && !opt.export_dir.empty()) {
    LF_RETURN_IF_ERROR(worker::CheckExportDir(opt.export_dir, opt.job_id));
    // The export is written after the last step: a directory the job cannot make is
    // found now, before any step is spent.
    LF_RETURN_IF_ERROR(worker::CheckExportDirWritable(opt.export_dir));
  }
  return absl::OkStatus();
}


absl::Status RunTraining(const TrainOptions& opt, const DistEnv& env) {
  const int64_t runtime_rss = CurrentRssBytes();  // before training allocates anything
  return CatchTorch("training", [&]() -> absl::Status {
    Trainer trainer(opt, env, runtime_rss);
    return trainer.Run();
  });
}

absl::StatusOr<EvalResult> RunEval(const EvalOptions& opt) {
  EvalResult result;
  absl::Status s = CatchTorch("eval", [&]() -> absl::Status {
    LF_ASSIGN_OR_RETURN(at::Device device, ResolveDevice(opt.device, 0));
    LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(opt.model_dir));
    LlamaConfig config = hf->config();
    const std::vector<UnitLayout> layout = MakeLayout(config);
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        MaybeLoadTokenizer(opt.format, opt.tokenizer_path, opt.model_dir, &config));
    int64_t seq_len = opt.seq_len > 0 ? opt.seq_len : config.max_position_embeddings;
    if (seq_len > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("--seq-len ", seq_len, " exceeds max_position_embeddings ",
                                                     config.max_position_embeddings));
    }
    LF_RETURN_IF_ERROR(CheckSequenceLength(config, seq_len));
    if (opt.micro_batch <= 0) return absl::InvalidArgumentError("--micro-batch must be > 0");
    LF_ASSIGN_OR_RETURN(std::optional<ChatTemplate> chat_template,
                        MaybeResolveChatTemplate(opt.format, opt.chat_template, tokenizer.get()));
    const ChatDataOptions chat{chat_template ? &*chat_template : nullptr, opt.train_on};
    LF_ASSIGN_OR_RETURN(LoadedData data,
                        LoadRows(opt.data_path, opt.format, tokenizer.get(), config, opt.batching,
                                 seq_len, DefaultTokenCacheDir(), 0, true,
                                 /*progress_events=*/false, chat));
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
                       uint64_t max_shard_bytes, const std::string& gguf_dtype) {
  return CatchTorch("export", [&]() -> absl::Status {
    std::error_code same_ec;
    if (fs::weakly_canonical(checkpoint_dir, same_ec) == fs::weakly_canonical(out_dir, same_ec)) {
      return absl::InvalidArgumentError("--out must differ from --checkpoint");
    }
    ExportOptions eo;
    eo.dtype = dtype;
    eo.max_shard_bytes = max_shard_bytes;
    if (!gguf_dtype.empty()) {
      LF_ASSIGN_OR_RETURN(eo.before_commit, GgufExportStep(gguf_dtype, fs::path(out_dir).filename().string()));
    }
    // The tokenizer travels with the weights, whichever kind the directory holds.
    for (const char* name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                             "special_tokens_map.json", "chat_template.jinja"}) {
      absl::StatusOr<std::string> bytes = ReadModelFile((fs::path(checkpoint_dir) / name).string(), kMaxTokenizerFileBytes);
      if (bytes.ok()) {
        eo.extra_files[name] = *std::move(bytes);
      } else if (!absl::IsNotFound(bytes.status())) {
        return bytes.status();
      }
    }
    // A sharded training checkpoint: consolidated one unit at a time.
    if (IsShardedCheckpoint(checkpoint_dir)) return ExportShardedCheckpoint(checkpoint_dir, out_dir, eo);
    LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(checkpoint_dir));
    const std::vector<UnitLayout> layout = MakeLayout(hf->config());
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
    return ExportHfDir(hf->config(), layout, fetch, out_dir, eo);
  });
}

}  // namespace llamafleet::trainer
