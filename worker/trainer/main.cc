// llamafleet-train: the trainer process a worker starts per rank.
//
//   llamafleet-train train --spec JOB.yaml [--set key=value ...]
//   llamafleet-train eval --model DIR --data FILE [--batching padding|packing] [--seq-len N]
//   llamafleet-train export --checkpoint DIR --out DIR [--dtype bf16] [--max-shard-size-mb N]
//                           [--gguf f16|bf16|q8_0]
//   llamafleet-train tokenize --data FILE [--format F] [--model DIR | --tokenizer PATH]
//   llamafleet-train preview --spec JOB.yaml [-n 3]
//   llamafleet-train generate --model DIR [--adapter DIR] (--prompt TEXT | --prompts FILE)
//                             [--chat] [--max-new-tokens N] [--temperature T] [--top-p P]
//                             [--top-k K] [--seed S] [--stop STR ...]
//
// stdout carries JSON lines only (metrics, events, the eval result; see
// worker/trainer_events.h); human logs go to stderr. `train` always ends with an "exit"
// event (its status code and message), which the worker relays as the rank's exit record.
// Any error ends the process with one line on stderr, an "exit" event with the error's code
// on stdout and exit status 1 (2 for usage errors).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "data_preview.h"
#include "generate_command.h"
#include "nlohmann/json.hpp"
#include "progress_reporter.h"
#include "train.h"
#include "util.h"
#include "worker/trainer_events.h"

#ifdef LLAMAFLEET_HAVE_JOBSPEC
#include "jobspec/eval_samples.h"
#include "jobspec/job_kind.h"
#include "jobspec/jobspec.h"
#endif

namespace lt = llamafleet::trainer;
using nlohmann::json;

namespace {

int Fail(const absl::Status& status) {
  lt::StopProgressReporter();  // the exit record is the last line
  std::string msg(status.message());
  std::fprintf(stderr, "llamafleet-train: error: %s\n", msg.c_str());
  lt::EmitJsonLine(llamafleet::trainer_events::ToLine(llamafleet::trainer_events::Exit::From(status)));
  return 1;
}

absl::StatusOr<lt::DataFormat> ParseFormat(const std::string& s) {
  if (s == "text") return lt::DataFormat::kText;
  if (s == "prompt_completion") return lt::DataFormat::kPromptCompletion;
  if (s == "tokens") return lt::DataFormat::kTokens;
  if (s == "chat") return lt::DataFormat::kChat;
  return absl::InvalidArgumentError(
      absl::StrCat("--format \"", s, "\": expected text, prompt_completion, tokens or chat"));
}

absl::StatusOr<lt::TrainOn> ParseTrainOn(const std::string& s) {
  if (s == "assistant") return lt::TrainOn::kAssistant;
  if (s == "last_assistant") return lt::TrainOn::kLastAssistant;
  if (s == "all") return lt::TrainOn::kAll;
  return absl::InvalidArgumentError(
      absl::StrCat("--train-on \"", s, "\": expected assistant, last_assistant or all"));
}

absl::StatusOr<lt::BatchingMode> ParseBatching(const std::string& s) {
  if (s == "packing") return lt::BatchingMode::kPacking;
  if (s == "padding") return lt::BatchingMode::kPadding;
  return absl::InvalidArgumentError(absl::StrCat("--batching \"", s, "\": expected padding or packing"));
}

// The tokenizer and chat template the trainer would take for `o`'s data (none for tokens).
absl::Status PreviewData(const lt::TrainOptions& o, int64_t n) {
  lt::DataLoadOptions load;
  load.format = o.format;
  load.train_on = o.train_on;
  std::unique_ptr<lt::Tokenizer> tok;
  std::optional<lt::ChatTemplate> chat;
  if (o.format != lt::DataFormat::kTokens) {
    const std::string path = o.tokenizer_path.empty() ? o.model_path : o.tokenizer_path;
    if (path.empty()) {
      return absl::InvalidArgumentError(
          "model.tokenizer is required with a preset unless data.format is TOKENS");
    }
    LF_ASSIGN_OR_RETURN(tok, lt::LoadTokenizer(path));
    load.tokenizer = tok.get();
    load.bos_id = tok->bos_id();
    load.eos_id = tok->eos_id();
  }
  if (o.format == lt::DataFormat::kChat) {
    const std::string dir = std::filesystem::path(tok->path()).parent_path().string();
    LF_ASSIGN_OR_RETURN(chat, lt::ResolveChatTemplate(o.chat_template, dir.empty() ? "." : dir));
    load.chat_template = &*chat;
  }
  for (const std::string& path : {o.train_path, o.eval_path}) {
    if (path.empty()) continue;
    LF_ASSIGN_OR_RETURN(const std::string text, lt::PreviewRecords(path, load, n));
    std::fputs(text.c_str(), stdout);
  }
  return absl::OkStatus();
}

#ifdef LLAMAFLEET_HAVE_JOBSPEC
// The fsdp block: precisions, sharding strategy, activation checkpointing, prefetch.
void ApplyFsdpSpec(const llamafleet::v1::FsdpSpec& fsdp, lt::TrainOptions* out) {
  namespace v1 = llamafleet::v1;
  lt::TrainOptions& o = *out;
  auto precision = [](v1::Precision p, const char* fallback) -> std::string {
    switch (p) {
      case v1::FP32: return "fp32";
      case v1::BF16: return "bf16";
      case v1::FP16: return "fp16";  // dynamic loss scaling in the engine
      default: return fallback;
    }
  };
  o.compute_dtype = precision(fsdp.mixed_precision(), "bf16");
  o.reduce_dtype = precision(fsdp.reduce_precision(), "fp32");
  switch (fsdp.sharding()) {
    case v1::SHARD_GRAD_OP: o.sharding = "SHARD_GRAD_OP"; break;
    case v1::HYBRID_SHARD: o.sharding = "HYBRID_SHARD"; break;
    case v1::NO_SHARD: o.sharding = "NO_SHARD"; break;
    default: o.sharding = "FULL_SHARD"; break;
  }
  o.hybrid_group_size = fsdp.hybrid_shard_group_size();
  switch (llamafleet::ActivationCheckpointingOf(fsdp)) {
    case v1::AC_NONE:
      o.activation_checkpointing = lt::ActivationCheckpointing::kNone;
      break;
    case v1::AC_SELECTIVE:
      o.activation_checkpointing = lt::ActivationCheckpointing::kSelective;
      break;
    default:
      o.activation_checkpointing = lt::ActivationCheckpointing::kFull;
      break;
  }
  o.max_inflight_all_gathers = fsdp.max_inflight_all_gathers();
}

absl::StatusOr<lt::TrainOptions> OptionsFromSpecFile(const std::string& path,
                                                     const std::vector<std::string>& sets) {
  LF_ASSIGN_OR_RETURN(std::string text, lt::ReadFileToString(path));
  auto docs = llamafleet::ParseJobDocuments(text);
  if (!docs.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", docs.status().message()));
  if (docs->size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds ", docs->size(), " job documents; the trainer takes exactly one"));
  }
  llamafleet::v1::JobSpec spec = (*docs)[0].spec;
  for (const std::string& s : sets) {
    absl::Status st = llamafleet::ApplySetOverride(&spec, s);
    if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("--set ", s, ": ", st.message()));
  }
  llamafleet::ApplyDefaults(&spec);
  if (absl::Status st = llamafleet::ValidateJobSpec(spec); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.message()));
  }
  namespace v1 = llamafleet::v1;
  lt::TrainOptions o;
  const auto& t = spec.training();
  o.model_path = spec.model().path();
  o.preset = spec.model().preset();
  o.tokenizer_path = spec.model().tokenizer();
  o.train_path = spec.data().train_path();
  o.eval_path = spec.data().eval_path();
  o.evaluate_only = llamafleet::IsEvaluateJob(spec);
  o.format = static_cast<lt::DataFormat>(spec.data().format());
  o.chat_template = spec.data().chat_template();
  if (spec.data().train_on() != v1::TRAIN_ON_UNSPECIFIED) {
    o.train_on = static_cast<lt::TrainOn>(spec.data().train_on());
  }
  // The lists as written (a one-source list too: Sampler then, as for train_path).
  for (const v1::DataSource& s : spec.data().train()) {
    o.train_sources.push_back({s.path(), static_cast<lt::DataFormat>(s.format()), s.weight()});
  }
  for (const v1::EvalSet& s : spec.data().eval()) {
    o.eval_sets.push_back({s.name(), s.path(), static_cast<lt::DataFormat>(s.format())});
  }
  o.batching = t.batching() == v1::PADDING ? lt::BatchingMode::kPadding : lt::BatchingMode::kPacking;
  o.epochs = t.has_epochs() ? t.epochs() : 0;
  o.max_steps = t.max_steps();
  o.micro_batch = t.micro_batch_size();
  o.grad_accum = t.grad_accum();
  o.global_batch = t.has_global_batch_size() ? t.global_batch_size() : 0;
  o.seq_len = t.seq_len();
  o.lr = t.lr();
  if (t.betas_size() == 2) {
    o.beta1 = t.betas(0);
    o.beta2 = t.betas(1);
  }
  o.eps = t.eps();
  o.weight_decay = t.weight_decay();
  o.schedule.kind = static_cast<lt::LrScheduleKind>(t.lr_schedule().type());
  if (t.lr_schedule().has_gamma()) o.schedule.gamma = t.lr_schedule().gamma();
  o.schedule.warmup_steps = t.lr_schedule().warmup_steps();
  o.schedule.min_lr_ratio = t.lr_schedule().min_lr_ratio();
  o.grad_clip = t.grad_clip();
  o.seed = t.seed();
  o.log_every = t.log_every();
  o.eval_every = t.eval_every_steps();
  o.early_stopping_patience = t.early_stopping().patience();
  o.early_stopping_min_delta = t.early_stopping().min_delta();
  o.dpo = t.objective() == "dpo";
  if (t.dpo().has_beta()) o.dpo_beta = t.dpo().beta();
  o.dpo_label_smoothing = t.dpo().label_smoothing();
  o.export_best = spec.output().export_() == v1::BEST;
  if (llamafleet::HasEvalSamples(spec)) {
    const v1::SamplesSpec& s = spec.eval().samples();
    o.samples.prompts_path = s.prompts();
    o.samples.from_eval = s.from_eval();
    o.samples.max_new_tokens =
        s.has_max_new_tokens() ? s.max_new_tokens() : llamafleet::kDefaultSampleNewTokens;
    o.samples.temperature = s.temperature();
    o.samples.score.assign(s.score().begin(), s.score().end());
  }
  ApplyFsdpSpec(spec.fsdp(), &o);
  o.tensor_parallel = llamafleet::TensorParallelOf(spec);  // 1 when the spec has no parallelism block
  o.checkpoint_dir = spec.checkpoint().dir();
  o.checkpoint_every = spec.checkpoint().every_steps();
  o.checkpoint_async = !spec.checkpoint().has_async() || spec.checkpoint().async();
  o.resume = spec.checkpoint().resume();
  o.export_dir = spec.output().export_dir();
  switch (spec.output().export_dtype()) {
    case v1::FP32: o.export_dtype = lt::StDtype::kF32; break;
    case v1::FP16: o.export_dtype = lt::StDtype::kF16; break;
    default: o.export_dtype = lt::StDtype::kBF16; break;
  }
  o.max_shard_bytes = static_cast<uint64_t>(spec.output().max_shard_size_mb()) << 20;
  o.merge = spec.output().merge();
  if (spec.output().has_gguf()) {
    o.gguf_dtype = absl::AsciiStrToLower(v1::GgufSpec::Type_Name(spec.output().gguf().dtype()));
  }
  const auto& peft = spec.peft();
  if (peft.method() == "lora" || peft.method() == "qlora") {
    // Unset fields stay "unset" here (0 / -1 / empty) when an adapter supplies them.
    o.lora.r = peft.has_r() ? peft.r() : 0;
    o.lora.alpha = peft.has_alpha() ? peft.alpha() : 0;
    o.lora.dropout = peft.has_dropout() ? peft.dropout() : -1;
    o.lora.target_modules.assign(peft.target_modules().begin(), peft.target_modules().end());
    o.lora.adapter_path = peft.adapter_path();
    o.lora.base_model_name = o.model_path.empty() ? o.preset : o.model_path;
    o.lora.enabled = true;
    o.lora.nf4_base = peft.method() == "qlora";
  }
  return o;
}
#endif

// Every subcommand's flags, as parsed.
struct Flags {
  std::string spec_path, device = "auto", resume, resume_candidates, token_cache_dir;
  std::string token_cache_max_size;
  std::vector<std::string> sets, path_roots;
  double peak_tflops = 0;
  int collective_timeout_s = 120;
  std::string model_dir, data_path, batching = "padding", format = "text", tokenizer;
  std::string chat_template, train_on = "assistant";
  int64_t seq_len = 0, micro_batch = 4;
  std::string checkpoint, out_dir, dtype = "bf16", gguf;
  int64_t max_shard_mb = 5120;
  int64_t preview_n = 3;
  lt::GenerateCommandOptions generate;
  bool no_cache = false;
};

CLI::App* AddTrainCommand(CLI::App& app, Flags& f) {
  CLI::App* train = app.add_subcommand("train", "train from a JobSpec (YAML or JSON)");
  train->add_option("--spec", f.spec_path, "job spec file")->required();
  train->add_option("--set", f.sets, "override a spec field: key=value (repeatable)");
  train->add_option("--peak-tflops", f.peak_tflops, "peak TFLOP/s for MFU (default: device table)");
  train->add_option("--device", f.device, "auto, cpu or cuda");
  train->add_option("--resume", f.resume, "continue from this sharded checkpoint (overrides checkpoint.resume)");
  train->add_option("--path-root", f.path_roots,
                    "directory the job may use (repeatable; the worker passes the coordinator's roots)");
  train->add_option("--resume-candidates", f.resume_candidates,
                    "JSON file: the job's recorded checkpoints, newest first; resume from the newest that "
                    "verifies (overrides --resume)");
  train->add_option("--token-cache-dir", f.token_cache_dir,
                    "where tokenized datasets are kept and reused (default $LLAMAFLEET_TOKEN_CACHE_DIR, "
                    "else ~/.cache/llamafleet/tokens)");
  train->add_option("--token-cache-max-size", f.token_cache_max_size,
                    "bound on the token cache directory's entries, e.g. 500G (K, M, G, T); past it a "
                    "build removes the least recently used entries that no run is using (default: none)");
  train->add_option("--collective-timeout-s", f.collective_timeout_s,
                    "a collective or rendezvous longer than this ends the run (default 120)");
  return train;
}

// The chat flags `eval` and `tokenize` share.
void AddChatFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--chat-template", f.chat_template,
                  "chat: model (default), llama2, llama3, chatml or mistral");
  cmd->add_option("--train-on", f.train_on, "chat: assistant (default), last_assistant or all");
}

CLI::App* AddEvalCommand(CLI::App& app, Flags& f) {
  CLI::App* eval = app.add_subcommand("eval", "evaluate an HF-format model on a JSONL file");
  eval->add_option("--model", f.model_dir, "HF-format model directory")->required();
  eval->add_option("--data", f.data_path, "JSONL data file")->required();
  eval->add_option("--batching", f.batching, "padding or packing");
  eval->add_option("--seq-len", f.seq_len, "row length (default max_position_embeddings)");
  eval->add_option("--format", f.format, "text, prompt_completion, tokens or chat");
  AddChatFlags(eval, f);
  eval->add_option("--tokenizer", f.tokenizer,
                   "tokenizer file or directory (default: the model directory's)");
  eval->add_option("--micro-batch", f.micro_batch, "rows per forward pass");
  eval->add_option("--device", f.device, "auto, cpu or cuda");
  return eval;
}

CLI::App* AddExportCommand(CLI::App& app, Flags& f) {
  CLI::App* exp = app.add_subcommand("export", "write an HF-format directory from a checkpoint");
  exp->add_option("--checkpoint", f.checkpoint, "checkpoint or HF-format directory")->required();
  exp->add_option("--out", f.out_dir, "output directory (replaced atomically)")->required();
  exp->add_option("--dtype", f.dtype, "fp32, fp16 or bf16");
  exp->add_option("--max-shard-size-mb", f.max_shard_mb, "largest safetensors shard, MiB");
  exp->add_option("--gguf", f.gguf, "also <out>/model.gguf and an Ollama Modelfile: f16, bf16 or q8_0");
  return exp;
}

// tokenize (for tests and debugging): the records as the trainer sees them.
CLI::App* AddTokenizeCommand(CLI::App& app, Flags& f) {
  CLI::App* tok = app.add_subcommand("tokenize", "print each JSONL record's tokens and loss mask");
  tok->add_option("--tokenizer", f.tokenizer, "tokenizer file or directory");
  tok->add_option("--model", f.model_dir,
                  "model directory: its tokenizer and chat template (instead of --tokenizer)");
  tok->add_option("--data", f.data_path, "JSONL data file")->required();
  tok->add_option("--format", f.format, "text, prompt_completion, tokens or chat");
  AddChatFlags(tok, f);
  return tok;
}

// preview: a job's first records as the trainer will see them.
CLI::App* AddPreviewCommand(CLI::App& app, Flags& f) {
  CLI::App* prev = app.add_subcommand(
      "preview",
      "print a job spec's first records rendered, the tokens with loss between [[ and ]]");
  prev->add_option("--spec", f.spec_path, "job spec file")->required();
  prev->add_option("--set", f.sets, "override a spec field: key=value (repeatable)");
  prev->add_option("-n", f.preview_n, "records per data file (default 3)");
  return prev;
}

// generate: text from a model (generate_command.h).
CLI::App* AddGenerateCommand(CLI::App& app, Flags& f) {
  lt::GenerateCommandOptions& g = f.generate;
  lt::GenerationOptions& o = g.generation;
  CLI::App* gen = app.add_subcommand("generate", "generate text from an HF-format model, as JSON lines");
  gen->add_option("--model", g.model_dir, "HF-format model directory")->required();
  gen->add_option("--adapter", g.adapter_dir, "PEFT LoRA adapter directory, merged into the model");
  gen->add_option("--tokenizer", g.tokenizer, "tokenizer file or directory (default: the model's)");
  gen->add_option("--prompt", g.prompt, "one prompt");
  gen->add_option("--prompts", g.prompts_file,
                  "JSONL file: {\"prompt\": text}, {\"messages\": [...]} or {\"tokens\": [ids]} per line");
  gen->add_flag("--chat", g.chat, "prompts through the model's chat template, with its generation prompt");
  gen->add_option("--chat-template", g.chat_template,
                  "with --chat: model (default), llama2, llama3, chatml or mistral");
  gen->add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate per prompt at most (default 128)");
  gen->add_option("--temperature", o.temperature, "0 (default): greedy");
  gen->add_option("--top-k", o.top_k, "sample from the k most likely tokens (0, default: all)");
  gen->add_option("--top-p", o.top_p, "nucleus sampling: smallest set reaching p (default 1)");
  gen->add_option("--seed", o.seed, "sampling seed (default 0)");
  gen->add_option("--stop", o.stop, "stop a prompt's text at this string (repeatable)");
  gen->add_option("--batch-size", g.batch_size, "prompts per batch (default 8)");
  gen->add_flag("--no-cache", f.no_cache, "recompute the whole sequence every step (to measure the cache)");
  gen->add_option("--device", g.device, "auto, cpu or cuda");
  return gen;
}

#ifdef LLAMAFLEET_HAVE_JOBSPEC
// The spec's options with what the command line and the worker's environment add.
absl::StatusOr<lt::TrainOptions> TrainOptionsFromFlags(const Flags& f) {
  LF_ASSIGN_OR_RETURN(lt::TrainOptions opts, OptionsFromSpecFile(f.spec_path, f.sets));
  opts.device = f.device;
  opts.peak_tflops = f.peak_tflops;
  if (!f.resume.empty()) opts.resume = f.resume;
  if (!f.resume_candidates.empty()) {
    LF_ASSIGN_OR_RETURN(std::string text, lt::ReadFileToString(f.resume_candidates));
    auto parsed = llamafleet::trainer_events::ParseCandidates(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume-candidates ", f.resume_candidates, ": ", parsed.status().message()));
    }
    opts.resume_candidates = std::move(*parsed);
  }
  opts.collective_timeout_s = f.collective_timeout_s;
  opts.token_cache_dir = f.token_cache_dir;
  if (!f.token_cache_max_size.empty()) {
    const std::optional<uint64_t> bytes = llamafleet::ParseByteSize(f.token_cache_max_size);
    if (!bytes) {
      return absl::InvalidArgumentError(absl::StrCat("--token-cache-max-size \"", f.token_cache_max_size,
                                                     "\": expected bytes or a number with K, M, G or T"));
    }
    opts.token_cache_max_bytes = *bytes;
  }
  opts.path_roots = f.path_roots;
  if (const char* job = std::getenv("LLAMAFLEET_JOB_ID")) opts.job_id = job;
  if (const char* attempt = std::getenv("LLAMAFLEET_ATTEMPT")) {
    if (!absl::SimpleAtoi(attempt, &opts.attempt) || opts.attempt < 0) opts.attempt = 0;
  }
  if (const char* env = std::getenv("LLAMAFLEET_PEAK_TFLOPS"); env && opts.peak_tflops <= 0) {
    opts.peak_tflops = std::atof(env);
  }
  return opts;
}
#endif

int RunTrainCommand(const Flags& f) {
#ifdef LLAMAFLEET_HAVE_JOBSPEC
  auto opts = TrainOptionsFromFlags(f);
  if (!opts.ok()) return Fail(opts.status());
  auto env = lt::DistEnvFromEnvironment();
  if (!env.ok()) return Fail(env.status());
  // A worker's ranks report their progress (hang detection); a run on its own does not.
  if (std::getenv("LLAMAFLEET_PROGRESS_EVENTS") != nullptr) lt::StartProgressReporter();
  absl::Status s = lt::RunTraining(*opts, *env);
  lt::StopProgressReporter();
  if (!s.ok()) return Fail(s);
  lt::EmitJsonLine(llamafleet::trainer_events::ToLine(llamafleet::trainer_events::Exit::From(s)));
  return 0;
#else
  (void)f;
  return Fail(absl::UnimplementedError("built without the job-spec library"));
#endif
}

int RunEvalCommand(const Flags& f) {
  auto format = ParseFormat(f.format);
  if (!format.ok()) return Fail(format.status());
  auto b = ParseBatching(f.batching);
  if (!b.ok()) return Fail(b.status());
  auto on = ParseTrainOn(f.train_on);
  if (!on.ok()) return Fail(on.status());
  lt::EvalOptions o;
  o.model_dir = f.model_dir;
  o.data_path = f.data_path;
  o.tokenizer_path = f.tokenizer;
  o.format = *format;
  o.chat_template = f.chat_template;
  o.train_on = *on;
  o.batching = *b;
  o.seq_len = f.seq_len;
  o.micro_batch = f.micro_batch;
  o.device = f.device;
  auto r = lt::RunEval(o);
  if (!r.ok()) return Fail(r.status());
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"loss\": %.9g, \"tokens\": %lld, \"perplexity\": %.9g}", r->loss,
                static_cast<long long>(r->tokens), r->perplexity);
  lt::EmitJsonLine(buf);
  return 0;
}

int RunExportCommand(const Flags& f) {
  auto d = lt::ParseExportDtype(f.dtype);
  if (!d.ok()) return Fail(d.status());
  if (f.max_shard_mb <= 0) return Fail(absl::InvalidArgumentError("--max-shard-size-mb must be > 0"));
  absl::Status s =
      lt::RunExport(f.checkpoint, f.out_dir, *d, static_cast<uint64_t>(f.max_shard_mb) << 20, f.gguf);
  return s.ok() ? 0 : Fail(s);
}

int RunGenerateCommand(Flags& f) {
  f.generate.generation.use_cache = !f.no_cache;
  absl::Status s = lt::RunGenerate(f.generate);
  return s.ok() ? 0 : Fail(s);
}

int RunPreviewCommand(const Flags& f) {
#ifdef LLAMAFLEET_HAVE_JOBSPEC
  auto opts = OptionsFromSpecFile(f.spec_path, f.sets);
  if (!opts.ok()) return Fail(opts.status());
  absl::Status s = PreviewData(*opts, f.preview_n);
  return s.ok() ? 0 : Fail(s);
#else
  (void)f;
  return Fail(absl::UnimplementedError("built without the job-spec library"));
#endif
}

int RunTokenizeCommand(const Flags& f) {
  auto format = ParseFormat(f.format);
  if (!format.ok()) return Fail(format.status());
  auto on = ParseTrainOn(f.train_on);
  if (!on.ok()) return Fail(on.status());
  std::unique_ptr<lt::Tokenizer> t;
  lt::DataLoadOptions o;
  o.format = *format;
  o.train_on = *on;
  const std::string tokenizer = f.tokenizer.empty() ? f.model_dir : f.tokenizer;
  if (!tokenizer.empty()) {
    auto loaded = lt::LoadTokenizer(tokenizer);
    if (!loaded.ok()) return Fail(loaded.status());
    t = std::move(*loaded);
    o.tokenizer = t.get();
    o.bos_id = t->bos_id();
    o.eos_id = t->eos_id();
  }
  std::optional<lt::ChatTemplate> chat;
  if (*format == lt::DataFormat::kChat) {
    if (t == nullptr)
      return Fail(absl::InvalidArgumentError("--format chat needs --model (or --tokenizer)"));
    const std::string dir =
        f.model_dir.empty() ? std::filesystem::path(t->path()).parent_path().string() : f.model_dir;
    auto resolved = lt::ResolveChatTemplate(f.chat_template, dir.empty() ? "." : dir);
    if (!resolved.ok()) return Fail(resolved.status());
    chat = *std::move(resolved);
    o.chat_template = &*chat;
  }
  auto seqs = lt::LoadJsonl(f.data_path, o);
  if (!seqs.ok()) return Fail(seqs.status());
  for (const lt::Sequence& s : *seqs) {
    lt::EmitJsonLine(json{{"tokens", s.tokens}, {"target", s.target}}.dump());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llamafleet-train: the LibTorch Llama-family trainer"};
  app.require_subcommand(1);
  Flags f;
  CLI::App* train = AddTrainCommand(app, f);
  CLI::App* eval = AddEvalCommand(app, f);
  CLI::App* exp = AddExportCommand(app, f);
  CLI::App* tok = AddTokenizeCommand(app, f);
  CLI::App* prev = AddPreviewCommand(app, f);
  CLI::App* gen = AddGenerateCommand(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*train) return RunTrainCommand(f);
  if (*eval) return RunEvalCommand(f);
  if (*exp) return RunExportCommand(f);
  if (*prev) return RunPreviewCommand(f);
  if (*tok) return RunTokenizeCommand(f);
  if (*gen) return RunGenerateCommand(f);
  return 2;
}
