// HF-format model directories: config.json + model.safetensors, or sharded
// model-0000i-of-0000n.safetensors with model.safetensors.index.json.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config.h"
#include "model.h"
#include "safetensors.h"

namespace llamafleet::trainer {

// An opened, fully validated HF directory. Open() checks config.json, the index (when
// sharded), every safetensors header, and that every tensor the config implies is present
// exactly once with the implied shape and a float dtype (F32, F16, BF16). A stale
// `rotary_emb.inv_freq` is ignored (and `lm_head.weight` when the embeddings are tied);
// any other extra tensor is an error. Files stay memory-mapped; nothing is copied until
// Read*() is called, so a rank copies only what it needs.
class HfModelDir {
 public:
  // Errors name the directory/file and the tensor.
  static absl::StatusOr<std::unique_ptr<HfModelDir>> Open(const std::string& dir);

  const LlamaConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }

  // The whole tensor converted to `dtype`, on the CPU.
  absl::StatusOr<at::Tensor> Read(const std::string& name, at::ScalarType dtype = at::kFloat) const;
  // Elements [begin, end) of the tensor flattened in C order, converted to `dtype`.
  absl::StatusOr<at::Tensor> ReadFlatSlice(const std::string& name, int64_t begin, int64_t end,
                                           at::ScalarType dtype = at::kFloat) const;
  // Every unit of `layout`, fp32 (for the single-process engine).
  absl::StatusOr<std::vector<std::vector<at::Tensor>>> ReadAll(
      const std::vector<UnitLayout>& layout) const;

 private:
  struct Located {
    const SafetensorsFile* file;
    const StTensorInfo* info;
  };
  absl::StatusOr<Located> Locate(const std::string& name) const;

  std::string dir_;
  LlamaConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;
};

struct ExportOptions {
  StDtype dtype = StDtype::kBF16;          // F32, F16 or BF16
  uint64_t max_shard_bytes = 5120ull << 20;  // a shard holds at most this much tensor data
                                             // (a single larger tensor gets its own shard)
  std::string tokenizer_path;              // copied as tokenizer.model when non-empty
  std::map<std::string, std::string> extra_files;  // name -> contents, written alongside
  // Job id recorded in the directory's marker file: only an earlier export of the same
  // owner may be replaced ("" = a manual export; see StagedDir).
  std::string owner;
  // The task's path roots: the export's parent is opened beneath them without following
  // links (StagedDir). Empty for a manual export.
  std::vector<std::string> path_roots;
  // Stem of the weight files ("adapter_model" for a PEFT adapter) and whether the
  // model's config.json is written.
  std::string weights_name = "model";
  bool write_config = true;
  // Called with the staged directory once every file above is in it, before it is renamed
  // into place (the GGUF export writes model.gguf there); an error abandons the export.
  std::function<absl::Status(const std::string& staged_dir)> before_commit;
};

// Writes an HF-format directory to `out_dir` through a staged temporary directory that is
// renamed into place at the end (an earlier export of the same owner is replaced, any
// other existing directory refused with FAILED_PRECONDITION; on error nothing is
// left behind). `fetch_unit(u)` returns unit u's full parameters (any float dtype, CPU);
// it is called once per unit, in order, so only one unit is held at a time. One shard is
// written as model.safetensors; more as model-0000i-of-0000n.safetensors plus
// model.safetensors.index.json, with {"format": "pt"} metadata as transformers expects.
absl::Status ExportHfDir(const LlamaConfig& config, const std::vector<UnitLayout>& layout,
                         const std::function<absl::StatusOr<std::vector<at::Tensor>>(int)>& fetch_unit,
                         const std::string& out_dir, const ExportOptions& options);

at::ScalarType ToTorchDtype(StDtype dtype);

}  // namespace llamafleet::trainer
