#include "hf_io.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

at::ScalarType ToTorchDtype(StDtype d) {
  switch (d) {
    case StDtype::kF16: return at::kHalf;
    case StDtype::kBF16: return at::kBFloat16;
    case StDtype::kF64: return at::kDouble;
    case StDtype::kI64: return at::kLong;
    case StDtype::kI32: return at::kInt;
    case StDtype::kU8: return at::kByte;
    case StDtype::kI8: return at::kChar;
    case StDtype::kI16: return at::kShort;
    case StDtype::kBool: return at::kBool;
    default: return at::kFloat;
  }
}

namespace {
std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
bool IsFloatDtype(StDtype d) {
  return d == StDtype::kF32 || d == StDtype::kF16 || d == StDtype::kBF16;
}
}  // namespace

absl::StatusOr<std::unique_ptr<HfModelDir>> HfModelDir::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": model directory does not exist"));
  }
  std::unique_ptr<HfModelDir> m(new HfModelDir());
  m->dir_ = dir;
  LF_ASSIGN_OR_RETURN(m->config_, LoadConfigFile((fs::path(dir) / "config.json").string()));

  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::map<std::string, std::string> weight_map;  // tensor -> file (sharded only)
  std::vector<std::string> file_names;
  if (fs::exists(index_path, ec)) {
    LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(index_path.string(), kMaxListingFileBytes));
    LF_ASSIGN_OR_RETURN(weight_map, ParseSafetensorsIndex(text, index_path.string()));
    std::set<std::string> files;
    for (const auto& [tensor, file] : weight_map) files.insert(file);
    file_names.assign(files.begin(), files.end());
  } else if (fs::exists(single_path, ec)) {
    file_names.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no model.safetensors or model.safetensors.index.json (no weights to load)"));
  }

  for (const std::string& name : file_names) {
    const std::string path = (fs::path(dir) / name).string();
    LF_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
    for (const auto& [tname, info] : f->tensors()) {
      auto [it, inserted] = m->tensors_.emplace(tname, Located{f.get(), &info});
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", tname, "\" appears in both ",
                                                       it->second.file->path(), " and ", path));
      }
    }
    m->files_.push_back(std::move(f));
  }
  for (const auto& [tname, file] : weight_map) {
    auto it = m->tensors_.find(tname);
    if (it == m->tensors_.end() || fs::path(it->second.file->path()).filename() != file) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": tensor \"", tname,
                                                     "\" is mapped to ", file, " but is not in it"));
    }
  }

  // Every tensor the config implies, with its shape; nothing unexpected.
  std::map<std::string, std::vector<int64_t>> expected;
  for (const UnitLayout& unit : MakeLayout(m->config_)) {
    for (size_t i = 0; i < unit.param_names.size(); ++i) expected[unit.param_names[i]] = unit.shapes[i];
  }
  for (auto it = m->tensors_.begin(); it != m->tensors_.end();) {
    const std::string& tname = it->first;
    if (absl::EndsWith(tname, "rotary_emb.inv_freq") ||
        (m->config_.tie_word_embeddings && tname == "lm_head.weight")) {
      it = m->tensors_.erase(it);
      continue;
    }
    if (!expected.count(tname)) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file->path(), ": unexpected tensor \"", tname, "\" (not part of ",
                       ArchitectureName(m->config_.family), " with this config)"));
    }
    ++it;
  }
  for (const auto& [tname, shape] : expected) {
    auto it = m->tensors_.find(tname);
    if (it == m->tensors_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": missing tensor \"", tname, "\""));
    }
    const StTensorInfo& info = *it->second.info;
    if (info.shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file->path(), ": tensor \"", tname, "\" has shape ",
                       ShapeString(info.shape), " but config.json implies ", ShapeString(shape)));
    }
    if (!IsFloatDtype(info.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file->path(), ": tensor \"", tname, "\" has dtype ",
                       StDtypeName(info.dtype), " (expected F32, F16 or BF16)"));
    }
  }
  return m;
}

absl::StatusOr<HfModelDir::Located> HfModelDir::Locate(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": no tensor \"", name, "\""));
  }
  return it->second;
}

absl::StatusOr<at::Tensor> HfModelDir::Read(const std::string& name, at::ScalarType dtype) const {
  LF_ASSIGN_OR_RETURN(Located loc, Locate(name));
  at::Tensor view = at::from_blob(const_cast<uint8_t*>(loc.file->Data(*loc.info)), loc.info->shape,
                                  ToTorchDtype(loc.info->dtype));
  return view.to(dtype, /*non_blocking=*/false, /*copy=*/true);
}

absl::StatusOr<at::Tensor> HfModelDir::ReadFlatSlice(const std::string& name, int64_t begin,
                                                     int64_t end, at::ScalarType dtype) const {
  LF_ASSIGN_OR_RETURN(Located loc, Locate(name));
  if (begin < 0 || end < begin || end > loc.info->numel()) {
    return absl::OutOfRangeError(absl::StrCat("slice [", begin, ", ", end, ") of tensor \"", name,
                                              "\" with ", loc.info->numel(), " elements"));
  }
  const size_t esize = StDtypeSize(loc.info->dtype);
  at::Tensor view = at::from_blob(const_cast<uint8_t*>(loc.file->Data(*loc.info)) + begin * esize,
                                  {end - begin}, ToTorchDtype(loc.info->dtype));
  return view.to(dtype, /*non_blocking=*/false, /*copy=*/true);
}

absl::StatusOr<std::vector<std::vector<at::Tensor>>> HfModelDir::ReadAll(
    const std::vector<UnitLayout>& layout) const {
  std::vector<std::vector<at::Tensor>> out;
  for (const UnitLayout& unit : layout) {
    std::vector<at::Tensor> tensors;
    for (const std::string& name : unit.param_names) {
      LF_ASSIGN_OR_RETURN(at::Tensor t, Read(name));
      tensors.push_back(std::move(t));
    }
    out.push_back(std::move(tensors));
  }
  return out;
}

absl::Status ExportHfDir(const LlamaConfig& config, const std::vector<UnitLayout>& layout,
                         const std::function<absl::StatusOr<std::vector<at::Tensor>>(int)>& fetch_unit,
                         const std::string& out_dir, const ExportOptions& options) {
  if (!IsFloatDtype(options.dtype)) {
    return absl::InvalidArgumentError("export dtype must be F32, F16 or BF16");
  }
  if (options.max_shard_bytes == 0) return absl::InvalidArgumentError("max shard size must be > 0");
  LF_ASSIGN_OR_RETURN(StagedDir staged, StagedDir::Create(out_dir, options.owner, options.path_roots));

  // Plan shards in layout order: (unit, index) per tensor.
  struct Item {
    int unit;
    size_t index;
    uint64_t bytes;
  };
  std::vector<std::vector<Item>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = 0; i < layout[u].param_names.size(); ++i) {
      uint64_t bytes = StDtypeSize(options.dtype);
      for (int64_t d : layout[u].shapes[i]) bytes *= static_cast<uint64_t>(d);
      if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
        shards.emplace_back();
        shard_bytes = 0;
      }
      shards.back().push_back({static_cast<int>(u), i, bytes});
      shard_bytes += bytes;
      total_bytes += bytes;
    }
  }
  const size_t n = shards.size();
  const std::string& stem = options.weights_name;
  auto shard_name = [n, &stem](size_t s) {
    if (n == 1) return stem + ".safetensors";
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", s + 1, n);
    return stem + buf;
  };

  json weight_map = json::object();
  int cached_unit = -1;
  std::vector<at::Tensor> cached;
  const at::ScalarType torch_dtype = ToTorchDtype(options.dtype);
  for (size_t s = 0; s < n; ++s) {
    std::vector<SafetensorsWriter::Entry> entries;
    for (const Item& item : shards[s]) {
      const std::string& name = layout[item.unit].param_names[item.index];
      entries.push_back({name, options.dtype, layout[item.unit].shapes[item.index]});
      weight_map[name] = shard_name(s);
    }
    const std::string path = (fs::path(staged.path()) / shard_name(s)).string();
    LF_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                        SafetensorsWriter::Open(path, entries, {{"format", "pt"}}));
    for (const Item& item : shards[s]) {
      if (item.unit != cached_unit) {
        cached.clear();
        LF_ASSIGN_OR_RETURN(cached, fetch_unit(item.unit));
        cached_unit = item.unit;
        if (cached.size() != layout[item.unit].param_names.size()) {
          return absl::InternalError(absl::StrCat("unit ", layout[item.unit].name, ": got ",
                                                  cached.size(), " tensors"));
        }
      }
      at::Tensor t = cached[item.index].detach().to(at::kCPU, torch_dtype).contiguous();
      if (t.sizes().vec() != layout[item.unit].shapes[item.index]) {
        return absl::InternalError(absl::StrCat("tensor \"", layout[item.unit].param_names[item.index],
                                                "\" has the wrong shape for export"));
      }
      LF_RETURN_IF_ERROR(writer->Append(t.data_ptr(), t.numel() * t.element_size()));
    }
    LF_RETURN_IF_ERROR(writer->Finish());
  }
  if (n > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    LF_RETURN_IF_ERROR(WriteStringToFile(
        (fs::path(staged.path()) / (stem + ".safetensors.index.json")).string(), index.dump(2) + "\n"));
  }
  const char* dtype_name = options.dtype == StDtype::kF32   ? "float32"
                           : options.dtype == StDtype::kF16 ? "float16"
                                                            : "bfloat16";
  if (options.write_config) {
    LF_RETURN_IF_ERROR(WriteStringToFile((fs::path(staged.path()) / "config.json").string(),
                                         ConfigToJson(config, dtype_name)));
  }
  for (const auto& [name, contents] : options.extra_files) {
    LF_RETURN_IF_ERROR(WriteStringToFile((fs::path(staged.path()) / name).string(), contents));
  }
  if (!options.tokenizer_path.empty()) {
    std::error_code ec;
    fs::copy_file(options.tokenizer_path, fs::path(staged.path()) / "tokenizer.model", ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.tokenizer_path, ": cannot copy tokenizer: ", ec.message()));
    }
  }
  if (options.before_commit) LF_RETURN_IF_ERROR(options.before_commit(staged.path()));
  return staged.Commit();
}

}  // namespace llamafleet::trainer
