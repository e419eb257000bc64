// step_time_estimate: prints the step-time estimate (jobspec/step_time_estimate.h) of one
// shape on given hardware as one JSON line, for tests/bench/step_time_bench.py, which
// sets the CPU's measured GEMM rate, memory and loopback bandwidths in place of a GPU's.
//
//   step_time_estimate key=value...   (keys: below; unknown keys and bad numbers exit 2)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "jobspec/step_time_estimate.h"

using namespace llamafleet::sched;

int main(int argc, char** argv) {
  std::map<std::string, double> v = {
      {"hidden", 256},         {"ffn", 688},         {"layers", 4},       {"heads", 8},
      {"kv_heads", 4},         {"vocab", 4096},      {"world", 1},        {"tp", 1},
      {"micro_batch", 1},      {"seq_len", 256},     {"grad_accum", 1},   {"checkpointing", 0},
      {"lora_r", 0},           {"compute_bytes", 4}, {"reduce_bytes", 4}, {"strategy", 0},
      {"fused_attention", 0},  {"peak_flops", 1e11}, {"sustained", 1},    {"attention_flops", 0},
      {"memory_bw", 1e10},     {"link_bw", 1e9},     {"latency", 1e-4},   {"devices_per_node", 64},
      {"optimizer_bytes", 88},
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    char* end = nullptr;
    if (eq == std::string::npos || !v.count(a.substr(0, eq))) {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
    const double x = std::strtod(a.c_str() + eq + 1, &end);
    if (end == a.c_str() + eq + 1 || *end != '\0') {
      std::fprintf(stderr, "%s: not a number\n", argv[i]);
      return 2;
    }
    v[a.substr(0, eq)] = x;
  }
  MemoryInputs j;
  j.model.hidden = static_cast<int64_t>(v["hidden"]);
  j.model.intermediate = static_cast<int64_t>(v["ffn"]);
  j.model.layers = static_cast<int64_t>(v["layers"]);
  j.model.heads = static_cast<int64_t>(v["heads"]);
  j.model.kv_heads = static_cast<int64_t>(v["kv_heads"]);
  j.model.vocab = static_cast<int64_t>(v["vocab"]);
  j.world_size = static_cast<int>(v["world"]);
  j.tensor_parallel = static_cast<int>(v["tp"]);
  j.micro_batch = static_cast<int64_t>(v["micro_batch"]);
  j.seq_len = static_cast<int64_t>(v["seq_len"]);
  j.grad_accum = static_cast<int64_t>(v["grad_accum"]);
  j.activation_checkpointing = v["checkpointing"] != 0 ? Checkpointing::kFull : Checkpointing::kNone;
  j.lora_r = static_cast<int64_t>(v["lora_r"]);
  j.lora_modules = LoraModuleBit("q_proj") | LoraModuleBit("v_proj");
  j.compute_bytes = static_cast<int>(v["compute_bytes"]);
  j.reduce_bytes = static_cast<int>(v["reduce_bytes"]);
  j.strategy = static_cast<Strategy>(static_cast<int>(v["strategy"]));
  j.fused_attention = v["fused_attention"] != 0;
  j.gpu = false;
  Hardware hw;
  hw.gpu = "CPU";
  // The peak is the GEMM rate the caller measured in the compute dtype: undo the fp32 halving.
  hw.peak_flops = v["peak_flops"] * (j.compute_bytes == 4 ? 2 : 1);
  hw.sustained_fraction = v["sustained"];
  // attention_flops: the measured rate of attention's batched products (0: the GEMM rate).
  hw.attention_sustained_fraction =
      v["attention_flops"] > 0 ? v["attention_flops"] / v["peak_flops"] * v["sustained"] : 0;
  hw.memory_bytes_per_s = v["memory_bw"];
  hw.intra_node_bytes_per_s = hw.inter_node_bytes_per_s = v["link_bw"];
  hw.collective_latency_s = v["latency"];
  hw.devices_per_node = static_cast<int>(v["devices_per_node"]);
  hw.optimizer_bytes_per_parameter = v["optimizer_bytes"];
  const StepTimeEstimate e = EstimateStepTime(StepTimeInputsOf(j), hw);
  std::printf(
      "{\"step_s\": %.6g, \"compute_s\": %.6g, \"exposed_communication_s\": %.6g, "
      "\"communication_s\": %.6g, "
      "\"optimizer_s\": %.6g, \"gemm_flops\": %.6g, \"elementwise_bytes\": %.6g, "
      "\"gathered_bytes\": %.6g, "
      "\"reduced_bytes\": %.6g, \"tokens_per_s\": %.6g, \"mfu\": %.4f}\n",
      e.step_s, e.compute_s, e.exposed_communication_s, e.communication_s, e.optimizer_s,
      e.gemm_flops, e.elementwise_bytes, e.gathered_bytes, e.reduced_bytes, e.tokens_per_s, e.mfu);
  return 0;
}
