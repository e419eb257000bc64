// trainer_gpu_bench: training throughput of the sharded trainer on one device.
//
//   trainer_gpu_bench --preset llama2-7b --seq-len 4096 --dtype bf16 --strategy FULL_SHARD
//                     --activation-checkpointing --device cuda [--steps 6 --warmup 2]
//                     [--lora-rank 16]
//
// Random init (seeded, each rank only its shard), random tokens, AdamW; prints one JSON
// line: tokens/s, achieved TFLOP/s, MFU against --peak-tflops (default from the device
// name: H100/H200 989, A100 312 dense bf16), peak device memory, seconds per step.
// flops/token = 6 * (params excluding the embedding) + 6 * layers * heads * 2 * head_dim * seq
// (torchtitan / PaLM appendix B); with --lora-rank R (PEFT's LoRA on q_proj and v_proj,
// alpha 2R, the base frozen) the frozen weights count 4 instead of 6 and the adapters 6, as
// the trainer counts them. Runs on the CPU too (with --preset tiny), which is how
// CI keeps it compiling and working; tests/gpu/run.sh runs the 7B shape on a GPU.
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>

#include "CLI/CLI.hpp"
#include "collectives.h"
#include "config.h"
#include "lora.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "sharded_engine.h"
#include "train.h"
#include "util.h"

namespace lt = llamafleet::trainer;

namespace {

struct Flags {
  std::string preset = "llama2-7b";
  int layers = 0;  // override num_hidden_layers (0 = preset's)
  int seq_len = 4096;
  int micro_batch = 1;
  int steps = 6;
  int warmup = 2;
  std::string dtype = "bf16";
  std::string strategy = "FULL_SHARD";
  bool activation_checkpointing = false;  // --activation-checkpointing: full
  std::string checkpointing_mode;         // none | full | selective (overrides the flag)
  int lora_rank = 0;                      // 0: full finetuning
  std::string device = "cuda";
  double peak_tflops = 0;
};

absl::Status Run(const Flags& f) {
  LF_ASSIGN_OR_RETURN(lt::DistEnv env, lt::DistEnvFromEnvironment());
  LF_ASSIGN_OR_RETURN(lt::LlamaConfig config, lt::PresetConfig(f.preset));
  if (f.layers > 0) config.num_hidden_layers = f.layers;
  std::vector<lt::UnitLayout> layout = lt::MakeLayout(config);
  lt::LoraOptions lora;
  if (f.lora_rank > 0) {
    lora.enabled = true;
    lora.r = f.lora_rank;
    lora.alpha = 2.0 * f.lora_rank;
    LF_RETURN_IF_ERROR(lt::ValidateLora(lora));
    lt::ApplyLora(config, lora, layout);
  }
  if (f.device == "cuda" && !at::hasCUDA()) return absl::FailedPreconditionError("--device cuda: no CUDA");
  const at::Device device = f.device == "cuda" ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
                                               : at::Device(at::kCPU);
  const at::ScalarType dtype = f.dtype == "bf16" ? at::kBFloat16 : f.dtype == "fp16" ? at::kHalf : at::kFloat;

  lt::RendezvousOptions ro;
  ro.rank = env.rank;
  ro.world_size = env.world_size;
  ro.master_addr = env.master_addr;
  ro.master_port = env.master_port;
  ro.device = device;
  LF_ASSIGN_OR_RETURN(auto ctx, lt::DistContext::Create(ro));
  lt::ShardingOptions so;
  LF_ASSIGN_OR_RETURN(so.strategy, lt::ParseShardingStrategy(f.strategy));
  so.compute_dtype = dtype;
  so.device = device;
  LF_ASSIGN_OR_RETURN(
      auto engine, lt::ShardedEngine::CreateWithContext(
                       layout, so, *ctx, lt::SeededShardSource(layout, 42),
                       lora.enabled ? lt::SeededShardSource(layout, 42, true) : lt::ShardSource()));
  LF_ASSIGN_OR_RETURN(const lt::ActivationCheckpointing checkpointing,
                      lt::ParseActivationCheckpointing(!f.checkpointing_mode.empty() ? f.checkpointing_mode
                                                       : f.activation_checkpointing  ? "full"
                                                                                     : "none"));
  lt::LlamaModel model(config, device, dtype);
  model.set_activation_checkpointing(checkpointing);
  if (lora.enabled) model.set_lora(lora);

  // The coordinator's memory-fit estimate for this run (its grad_accum is 1), printed next to
  // the measured allocator peak; on a GPU the estimate's workspace adds 1 GiB for the CUDA
  // context and libraries, which the allocator peak does not see.
  lt::TrainOptions topt;
  topt.micro_batch = f.micro_batch;
  topt.activation_checkpointing = checkpointing;
  const llamafleet::sched::MemoryEstimate estimate =
      lt::EstimateForRun(config, topt, so, env.world_size, f.seq_len, 1, device, 0, lora);
  const int64_t flops_per_token =
      (lora.enabled ? 4 : 6) * config.NumNonEmbeddingParameters() + 6 * lt::AdapterParameters(layout) +
      6 * config.num_hidden_layers * config.num_attention_heads * 2 * config.head_dim() * f.seq_len;
  double peak = f.peak_tflops;
  const std::string name = lt::DeviceName(device);
  if (peak <= 0) peak = lt::PeakTflopsForDevice(name);

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  double tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int step = 0; step < f.steps; ++step) {
    if (step == f.warmup) {
      if (device.is_cuda()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();  // sync
      t0 = std::chrono::steady_clock::now();
      tokens = 0;
    }
    lt::Batch b;
    b.rows = f.micro_batch;
    b.seq_len = f.seq_len;
    at::Tensor t = at::randint(config.vocab_size, {f.micro_batch, f.seq_len}, gen, at::kLong);
    b.tokens.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    b.target.assign(b.tokens.size(), 1);
    b.real_tokens = t.numel();
    lt::ModelInput in = lt::MakeModelInput(b, device);
    const double denom = engine->AllReduceSum(static_cast<double>(in.num_targets));
    engine->ZeroGrad();
    at::Tensor l = model.LossSum(*engine, in);
    (l * (engine->loss_scale() / denom)).backward();
    LF_RETURN_IF_ERROR(engine->ReduceGradients());
    engine->ClipGradNorm(1.0);
    engine->Step(1e-5);
    loss = engine->AllReduceSum(l.item<double>()) / denom;  // .item() synchronizes the device
    tokens += static_cast<double>(f.micro_batch) * f.seq_len * engine->world_size();
    std::fprintf(stderr, "step %d loss %.4f\n", step + 1, loss);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tps = tokens / secs;
  const double tflops = tps * static_cast<double>(flops_per_token) / 1e12 / engine->world_size();
  nlohmann::json out = {{"bench", "trainer_gpu_bench"},
                        {"device", name},
                        {"preset", f.preset},
                        {"layers", config.num_hidden_layers},
                        {"parameters", config.NumParameters()},
                        {"seq_len", f.seq_len},
                        {"micro_batch", f.micro_batch},
                        {"dtype", f.dtype},
                        {"strategy", f.strategy},
                        {"activation_checkpointing", lt::ActivationCheckpointingName(checkpointing)},
                        {"lora_rank", f.lora_rank},
                        {"world_size", engine->world_size()},
                        {"measured_steps", f.steps - f.warmup},
                        {"seconds_per_step", secs / std::max(1, f.steps - f.warmup)},
                        {"tokens_per_s", tps},
                        {"tflops_per_device", tflops},
                        {"peak_tflops", peak},
                        {"peak_device_memory_bytes", lt::PeakDeviceMemoryBytes(device)},
                        {"memory_estimate_bytes", estimate.total},
                        {"memory_estimate_phase", estimate.peak_phase},
                        {"last_loss", loss}};
  out["mfu"] = peak > 0 ? nlohmann::json(tflops / peak) : nlohmann::json(nullptr);
  if (engine->rank() == 0) std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainer_gpu_bench: sharded training throughput (tokens/s, TFLOP/s, MFU)"};
  Flags f;
  app.add_option("--preset", f.preset);
  app.add_option("--layers", f.layers);
  app.add_option("--seq-len", f.seq_len);
  app.add_option("--micro-batch", f.micro_batch);
  app.add_option("--steps", f.steps);
  app.add_option("--warmup", f.warmup);
  app.add_option("--dtype", f.dtype);
  app.add_option("--strategy", f.strategy);
  app.add_flag("--activation-checkpointing", f.activation_checkpointing);
  app.add_option("--activation-checkpointing-mode", f.checkpointing_mode);
  app.add_option("--device", f.device);
  app.add_option("--peak-tflops", f.peak_tflops);
  app.add_option("--lora-rank", f.lora_rank, "LoRA adapters of this rank on q_proj, v_proj (0: full finetuning)");
  CLI11_PARSE(app, argc, argv);
  absl::Status s;
  try {
    s = Run(f);
  } catch (const c10::Error& e) {
    s = absl::InternalError(e.what_without_backtrace());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "trainer_gpu_bench: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
