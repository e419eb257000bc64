// sharded_rank: one rank of a small, fully deterministic training run, for the sharding
// tests and benchmark. Started once per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
// (absent: one process). It trains a tiny Llama (config below) on a fixed synthetic
// global batch with either the single-process LocalEngine (--engine local: the
// reference) or the ShardedEngine, exactly the way the trainer's loop drives an engine:
//
//   targets = AllReduceSum(local targets); ZeroGrad();
//   per micro-step: SetGradientSync(last micro); (LossSum * scale / targets).backward();
//   ReduceGradients(); ClipGradNorm(clip); Step(lr)
//
// and writes <out>/rank-R.json (losses, grad norms, persistent bytes, peak RSS,
// tokens/s) and, from rank 0, the final full weights as <out>/weights (an HF directory,
// fp32). Checkpoints: --checkpoint-dir D --checkpoint-every N saves sharded checkpoints;
// --resume DIR continues from one (any world size or strategy). --die-at-step K makes rank
// --die-rank SIGKILL itself in the middle of step K (after the forward, before backward).
#include <ATen/CPUGeneratorImpl.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "CLI/CLI.hpp"
#include "collectives.h"
#include "engine.h"
#include "hf_io.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "checkpoint_writer.h"
#include "sharded_checkpoint.h"
#include "sharded_engine.h"
#include "tensor_parallel.h"
#include "train.h"
#include "util.h"

namespace lt = llamafleet::trainer;
using nlohmann::json;

namespace {

struct Flags {
  std::string engine = "sharded";
  std::string strategy = "FULL_SHARD";
  std::string dtype = "fp32";
  std::string reduce_dtype = "fp32";
  int hybrid = 0;
  int tensor_parallel = 1;  // ranks per tensor-parallel group (consecutive ranks)
  int steps = 4;
  int micro_batch = 2;   // rows per rank per micro-step
  int grad_accum = 2;    // micro-steps per step
  int global_rows = 0;   // 0 = micro_batch * grad_accum * world
  int seq_len = 16;
  double lr = 1e-2;
  double weight_decay = 0.1;
  double clip = 1.0;
  bool tied = false;
  bool gqa = true;
  int hidden = 30, heads = 3, kv_heads = 1, ffn = 51, layers = 2, vocab = 101;
  uint64_t seed = 7;
  std::string out;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  std::string resume;
  int die_at_step = -1;
  int die_rank = 1;
  int die_in_checkpoint_write = -1;  // step whose background write --die-rank dies in
  bool sync_checkpoint = false;      // checkpoint.async: false
  int timeout_s = 120;
  int inflight = 2;
  int inflight_reduces = 2;
  int warmup = 0;
  bool checkpointing = false;  // activation checkpointing (recompute layers in backward)
  std::string checkpointing_mode;  // none | full | selective; overrides --activation-checkpointing
  bool trace = false;              // the engine's event log into rank-R.json ("trace")
  std::string device = "cpu";  // cpu | cuda (LOCAL_RANK picks the GPU; NCCL then)  // steps before the throughput clock starts
  std::string backend = "auto";  // auto | gloo | nccl (gloo with cuda: ranks may share a GPU)
};

lt::LlamaConfig MakeConfig(const Flags& f) {
  lt::LlamaConfig c;
  c.hidden_size = f.hidden;
  c.intermediate_size = f.ffn;
  c.num_hidden_layers = f.layers;
  c.num_attention_heads = f.heads;
  c.num_key_value_heads = f.gqa ? f.kv_heads : f.heads;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.vocab_size = f.vocab;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = f.tied;
  return c;
}

absl::StatusOr<at::ScalarType> Dtype(const std::string& s) {
  if (s == "fp32") return at::kFloat;
  if (s == "bf16") return at::kBFloat16;
  if (s == "fp16") return at::kHalf;
  return absl::InvalidArgumentError("dtype must be fp32, bf16 or fp16");
}

int64_t PeakRss() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

absl::Status Run(const Flags& f) {
  LF_ASSIGN_OR_RETURN(lt::DistEnv env, lt::DistEnvFromEnvironment());
  const lt::LlamaConfig config = MakeConfig(f);
  const std::vector<lt::UnitLayout> layout = lt::MakeLayout(config);
  LF_ASSIGN_OR_RETURN(at::ScalarType compute, Dtype(f.dtype));
  if (f.device == "cuda" && !at::hasCUDA()) return absl::FailedPreconditionError("--device cuda: no CUDA");
  const at::Device device = f.device == "cuda" ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
                                               : at::Device(at::kCPU);
  LF_ASSIGN_OR_RETURN(at::ScalarType reduce, Dtype(f.reduce_dtype));
  const lt::AdamWOptions adam{0.9, 0.999, 1e-8, f.weight_decay};

  std::unique_ptr<lt::DistContext> ctx;
  std::unique_ptr<lt::ParamEngine> engine_owner;
  lt::ShardedEngine* sharded = nullptr;
  std::unique_ptr<lt::ShardedCheckpoint> resume;
  if (!f.resume.empty()) {
    LF_ASSIGN_OR_RETURN(resume, lt::ShardedCheckpoint::Open(f.resume));
  }
  if (f.engine == "local") {
    if (env.world_size != 1) return absl::InvalidArgumentError("--engine local runs as one process");
    std::vector<std::vector<at::Tensor>> params;
    for (const auto& u : layout) params.push_back(lt::InitUnit(u, f.seed));
    engine_owner = std::make_unique<lt::LocalEngine>(layout, std::move(params), device, compute, adam);
  } else {
    lt::RendezvousOptions ro;
    ro.rank = env.rank;
    ro.world_size = env.world_size;
    ro.master_addr = env.master_addr;
    ro.master_port = env.master_port;
    ro.timeout = std::chrono::seconds(f.timeout_s);
    ro.device = device;
    ro.backend = f.backend;
    LF_ASSIGN_OR_RETURN(ctx, lt::DistContext::Create(ro));
    lt::ShardingOptions so;
    LF_ASSIGN_OR_RETURN(so.strategy, lt::ParseShardingStrategy(f.strategy));
    so.hybrid_group_size = f.hybrid;
    so.compute_dtype = compute;
    so.reduce_dtype = reduce;
    so.adamw = adam;
    so.max_inflight_all_gathers = f.inflight;
    so.max_inflight_reduces = f.inflight_reduces;
    so.device = device;
    so.tensor_parallel = f.tensor_parallel;
    so.record_trace = f.trace;
    LF_RETURN_IF_ERROR(lt::CheckTensorParallel(config, f.tensor_parallel, env.world_size));
    const int tp_rank = env.rank % f.tensor_parallel;
    lt::ShardSource source =
        resume ? resume->ParamSource(layout, f.tensor_parallel, tp_rank)
               : lt::RetileSource(layout, false, 1, lt::Untiled(lt::SeededShardSource(layout, f.seed)),
                                  f.tensor_parallel, tp_rank);
    if (resume) LF_RETURN_IF_ERROR(resume->CheckLayout(layout));
    LF_ASSIGN_OR_RETURN(auto e, lt::ShardedEngine::CreateWithContext(
                                    lt::TensorParallelLayout(layout, f.tensor_parallel), so, *ctx, source));
    if (resume) LF_RETURN_IF_ERROR(resume->RestoreEngine(*e, layout));
    sharded = e.get();
    engine_owner = std::move(e);
  }
  lt::ParamEngine& engine = *engine_owner;
  lt::LlamaModel model(config, device, compute);
  model.set_activation_checkpointing(f.checkpointing);
  if (!f.checkpointing_mode.empty()) {
    LF_ASSIGN_OR_RETURN(lt::ActivationCheckpointing mode,
                        lt::ParseActivationCheckpointing(f.checkpointing_mode));
    model.set_activation_checkpointing(mode);
  }
  if (sharded) model.set_tensor_parallel(sharded->tensor_parallel_comm());

  // The fixed global batch: rows of random tokens from a seeded generator, identical on
  // every rank; data-parallel rank r takes rows [r*R, (r+1)*R), micro-step m the m-th
  // slice of those.
  const int world = engine.data_parallel_size();
  const int rows = f.global_rows > 0 ? f.global_rows : f.micro_batch * f.grad_accum * world;
  if (rows % world != 0) return absl::InvalidArgumentError("global rows must divide by the world size");
  const int per_rank = rows / world;
  const int micro = f.engine == "local" ? f.micro_batch : f.micro_batch;
  const int micro_steps = (per_rank + micro - 1) / micro;
  auto batch_for_step = [&](int step) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(f.seed * 1000 + step);
    return at::randint(f.vocab, {rows, f.seq_len}, gen, at::kLong);
  };

  // Checkpoints as the trainer writes them (checkpoint_writer.h); rank 0 prints each one
  // once it is complete.
  std::unique_ptr<lt::CheckpointWriter> writer;
  if (sharded && !f.checkpoint_dir.empty()) {
    LF_ASSIGN_OR_RETURN(std::unique_ptr<lt::KeyValueStore> kv, ctx->NewKeyValueStore("checkpoint-writer"));
    lt::CheckpointWriterOptions wo;
    wo.root = f.checkpoint_dir;
    wo.async = !f.sync_checkpoint;
    if (f.die_in_checkpoint_write > 0) {
      wo.after_files_written = [&f](const lt::CheckpointSnapshot& s) {
        if (s.progress.step == f.die_in_checkpoint_write && s.rank == f.die_rank) {
          std::fprintf(stderr, "sharded_rank: rank %d dying while writing checkpoint step-%d\n", s.rank,
                       f.die_in_checkpoint_write);
          std::fflush(stderr);
          raise(SIGKILL);
        }
      };
    }
    writer = std::make_unique<lt::CheckpointWriter>(std::move(kv), wo);
  }
  auto report_saved = [&](const absl::StatusOr<std::optional<lt::SavedCheckpoint>>& done) -> absl::Status {
    if (!done.ok()) return done.status();
    if (engine.rank() == 0 && done->has_value()) {
      const lt::SavedCheckpoint& saved = **done;
      std::printf("%s\n", json{{"event", "checkpoint_saved"}, {"path", saved.path}, {"step", saved.step},
                               {"bytes", saved.bytes}, {"manifest_sha256", saved.manifest_sha256},
                               {"loss", saved.loss}, {"write_seconds", saved.write_seconds}}.dump().c_str());
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };

  const int start = resume ? static_cast<int>(resume->step()) : 0;
  json report = {{"rank", engine.rank()}, {"world_size", world}, {"start_step", start}};
  std::vector<double> losses, norms;
  double tokens = 0;
  double checkpoint_blocked = 0;  // seconds the step loop waited for checkpoints
  auto t0 = std::chrono::steady_clock::now();
  for (int step = start; step < f.steps; ++step) {
    if (step == start + f.warmup && f.warmup > 0) {
      t0 = std::chrono::steady_clock::now();
      tokens = 0;
    }
    at::Tensor all = batch_for_step(step);
    at::Tensor mine = all.narrow(0, engine.data_parallel_rank() * per_rank, per_rank);
    std::vector<lt::ModelInput> inputs;
    int64_t local_targets = 0;
    for (int m = 0; m < micro_steps; ++m) {
      const int64_t b = m * micro, n = std::min<int64_t>(micro, per_rank - b);
      lt::Batch batch;
      batch.rows = n;
      batch.seq_len = f.seq_len;
      at::Tensor t = mine.narrow(0, b, n).contiguous();
      batch.tokens.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
      batch.target.assign(batch.tokens.size(), 1);
      batch.real_tokens = static_cast<int64_t>(batch.tokens.size());
      inputs.push_back(lt::MakeModelInput(batch, device));
      local_targets += inputs.back().num_targets;
    }
    const double denom = engine.AllReduceSum(static_cast<double>(local_targets));
    engine.ZeroGrad();
    double loss_sum = 0;
    for (int m = 0; m < micro_steps; ++m) {
      if (sharded) sharded->SetGradientSync(m == micro_steps - 1);
      at::Tensor l = model.LossSum(engine, inputs[m]);
      const double scale = sharded ? sharded->loss_scale() : 1.0;
      if (step == f.die_at_step && engine.rank() == f.die_rank) {
        std::fprintf(stderr, "sharded_rank: rank %d dying mid-step %d\n", engine.rank(), step);
        std::fflush(stderr);
        raise(SIGKILL);
      }
      (l * (scale / denom)).backward();
      loss_sum += l.item<double>();
    }
    LF_RETURN_IF_ERROR(engine.ReduceGradients());
    const double loss = engine.AllReduceSum(loss_sum) / denom;
    const double norm = engine.ClipGradNorm(f.clip);
    engine.Step(f.lr);
    losses.push_back(loss);
    norms.push_back(norm);
    tokens += static_cast<double>(rows) * f.seq_len;
    if (writer) LF_RETURN_IF_ERROR(report_saved(writer->Poll()));
    if (writer && f.checkpoint_every > 0 && (step + 1) % f.checkpoint_every == 0) {
      lt::TrainerProgress p;
      p.step = step + 1;
      p.loss = loss;
      p.seed = f.seed;
      const auto blocked_from = std::chrono::steady_clock::now();
      std::optional<lt::SavedCheckpoint> previous;
      LF_RETURN_IF_ERROR(writer->Start(*sharded, config, p, &previous));
      checkpoint_blocked += std::chrono::duration<double>(std::chrono::steady_clock::now() - blocked_from).count();
      LF_RETURN_IF_ERROR(report_saved(previous));
    }
  }
  if (writer) {
    const auto blocked_from = std::chrono::steady_clock::now();
    absl::StatusOr<std::optional<lt::SavedCheckpoint>> last = writer->Wait(*sharded);
    checkpoint_blocked += std::chrono::duration<double>(std::chrono::steady_clock::now() - blocked_from).count();
    LF_RETURN_IF_ERROR(report_saved(last));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report["losses"] = losses;
  report["grad_norms"] = norms;
  report["seconds"] = secs;
  report["checkpoint_blocked_seconds"] = checkpoint_blocked;
  report["tokens_per_s"] = secs > 0 ? tokens / secs : 0.0;
  report["peak_rss_bytes"] = PeakRss();
  if (sharded) {
    report["persistent_bytes"] = sharded->PersistentBytes();
    report["peak_reduce_bytes"] = sharded->peak_reduce_bytes();
    int64_t padding = 0;
    for (size_t u = 0; u < layout.size(); ++u) {
      padding += sharded->span(static_cast<int>(u)).padded - sharded->layout()[u].numel();
    }
    report["padding_elements"] = padding;
    if (f.trace) report["trace"] = sharded->trace();
  } else {
    report["persistent_bytes"] = static_cast<lt::LocalEngine&>(engine).PersistentBytes();
  }
  if (!f.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.out, ec);
    // FullUnit is a collective: every rank calls it; rank 0 writes.
    std::vector<std::vector<at::Tensor>> full;
    for (size_t u = 0; u < layout.size(); ++u) full.push_back(engine.FullUnit(static_cast<int>(u)));
    if (engine.rank() == 0) {
      lt::ExportOptions eo;
      eo.dtype = lt::StDtype::kF32;
      LF_RETURN_IF_ERROR(lt::ExportHfDir(
          config, layout, [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> { return full[u]; },
          (std::filesystem::path(f.out) / "weights").string(), eo));
    }
    LF_RETURN_IF_ERROR(lt::WriteStringToFile(
        (std::filesystem::path(f.out) / ("rank-" + std::to_string(engine.rank()) + ".json")).string(),
        report.dump(2)));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sharded_rank: one rank of a deterministic sharded training run (tests)"};
  Flags f;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags win
  app.add_option("--engine", f.engine);
  app.add_option("--strategy", f.strategy);
  app.add_option("--dtype", f.dtype);
  app.add_option("--reduce-dtype", f.reduce_dtype);
  app.add_option("--hybrid-group", f.hybrid);
  app.add_option("--tensor-parallel", f.tensor_parallel);
  app.add_option("--steps", f.steps);
  app.add_option("--micro-batch", f.micro_batch);
  app.add_option("--grad-accum", f.grad_accum);
  app.add_option("--global-rows", f.global_rows);
  app.add_option("--seq-len", f.seq_len);
  app.add_option("--lr", f.lr);
  app.add_option("--weight-decay", f.weight_decay);
  app.add_option("--clip", f.clip);
  app.add_flag("--tied", f.tied);
  app.add_option("--hidden", f.hidden);
  app.add_option("--heads", f.heads);
  app.add_option("--kv-heads", f.kv_heads);
  app.add_option("--ffn", f.ffn);
  app.add_option("--layers", f.layers);
  app.add_option("--vocab", f.vocab);
  app.add_option("--seed", f.seed);
  app.add_option("--inflight-reduces", f.inflight_reduces);
  app.add_option("--die-in-checkpoint-write", f.die_in_checkpoint_write);
  app.add_flag("--sync-checkpoint", f.sync_checkpoint);
  app.add_option("--out", f.out);
  app.add_option("--checkpoint-dir", f.checkpoint_dir);
  app.add_option("--checkpoint-every", f.checkpoint_every);
  app.add_option("--resume", f.resume);
  app.add_option("--die-at-step", f.die_at_step);
  app.add_option("--die-rank", f.die_rank);
  app.add_option("--timeout", f.timeout_s);
  app.add_option("--inflight", f.inflight);
  app.add_option("--warmup", f.warmup);
  app.add_option("--device", f.device);
  app.add_option("--backend", f.backend);
  app.add_flag("--activation-checkpointing", f.checkpointing);
  app.add_option("--activation-checkpointing-mode", f.checkpointing_mode);
  app.add_flag("--trace", f.trace);
  CLI11_PARSE(app, argc, argv);
  absl::Status s;
  try {
    s = Run(f);
  } catch (const c10::Error& e) {
    s = absl::InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    s = absl::InternalError(e.what());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "sharded_rank: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
