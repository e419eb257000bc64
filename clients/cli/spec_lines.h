#ifndef LLAMAFLEET_CLIENTS_CLI_SPEC_LINES_H_
#define LLAMAFLEET_CLIENTS_CLI_SPEC_LINES_H_

// One-line summaries of a job's spec and of the coordinator's estimates for it, as
// `submit --dry-run` prints them ("# memory estimate: ...") and `describe` shows them.
// Pure functions of their inputs.

#include <string>

#include "clients/cli/usage_output.h"  // Device
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::cli {

// "23.4 GiB per GPU on 16 ranks (peak early in backward): parameters 1.6 GiB, ...; host
// memory for checkpoint staging 4.7 GiB" ("per rank" when `device` is kCpu).
std::string MemoryEstimateLine(const v1::MemoryEstimate& e, Device device = Device::kGpu);
// "1.52 s per step on p5.48xlarge (H100 80GB): 64700 tokens/s, MFU 43.1% (...); GPU-hours and cost"
std::string StepTimeLine(const v1::StepTimeEstimate& e);
// "LoRA r 16 on q_proj, v_proj: 65.5M trainable of 68.98B parameters (0.095%)", or "full: ...".
std::string FinetuningLine(const v1::Job& job);
// "tensor parallel 8 x data parallel 4 (32 ranks)" for the spec's nominal world; "" without
// tensor parallelism (parallelism.tensor_parallel unset or 1).
std::string ParallelismLine(const v1::JobSpec& spec);
// "2 sources: /d/chat.jsonl 75%, /d/code.jsonl 25%; eval sets chat, code (...)": the share of
// rows each data.train source gets and the data.eval sets; "" for a spec using neither list.
std::string DataLine(const v1::JobSpec& spec);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_SPEC_LINES_H_
