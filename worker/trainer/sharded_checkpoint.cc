#include "sharded_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model_file.h"
#include "tensor_parallel.h"
#include "train_parts.h"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kShardKinds[3] = {"param", "exp_avg", "exp_avg_sq"};

std::string ShardFileName(int index, int count) {
  return absl::StrFormat("shard-%05d-of-%05d.safetensors", index, count);
}
std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.json", rank); }

namespace {

constexpr const char* kFormat = kShardedCheckpointFormat;
constexpr const char* const* kKinds = kShardKinds;

}  // namespace

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot open directory"));
  ::fsync(fd);
  ::close(fd);
  return absl::OkStatus();
}

namespace {
int64_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}
}  // namespace

std::string CpuRngStateHex() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(state.data_ptr<uint8_t>()), static_cast<size_t>(state.numel())));
}

namespace {

void SetRngStateHex(const std::string& hex) {
  if (hex.empty() || hex.size() % 2) return;
  at::Tensor state = at::empty({static_cast<int64_t>(hex.size() / 2)}, at::kByte);
  uint8_t* p = state.data_ptr<uint8_t>();
  for (size_t i = 0; i < hex.size() / 2; ++i) p[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Complete checkpoints under root: (step, path), oldest first.
std::vector<std::pair<int64_t, std::string>> ListComplete(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step;
    if (name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &step) &&
        fs::exists(entry.path() / "manifest.json", ec)) {
      out.emplace_back(step, entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}


}  // namespace

namespace {
std::atomic<bool> g_preempt{false};
extern "C" void OnSigterm(int) { g_preempt.store(true); }
}  // namespace

void InstallPreemptionHandler() {
  struct sigaction sa {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
}

bool PreemptionRequested() { return g_preempt.load(); }

absl::StatusOr<std::string> Sha256File(const std::string& path) { return FileChecksum(path, "sha256"); }

ShardedCheckpoint::~ShardedCheckpoint() = default;

absl::StatusOr<std::unique_ptr<ShardedCheckpoint>> ShardedCheckpoint::Open(const std::string& dir,
                                                                           bool verify_hashes) {
  std::unique_ptr<ShardedCheckpoint> c(new ShardedCheckpoint());
  c->dir_ = dir;
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  std::error_code ec;
  if (!fs::exists(mpath, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no manifest.json (an incomplete checkpoint, or not a "
                                            "sharded checkpoint)"));
  }
  LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(mpath, kMaxListingFileBytes));
  LF_ASSIGN_OR_RETURN(c->manifest_, ParseCheckpointManifest(text, mpath));
  for (const CheckpointManifest::File& f : c->manifest_.files) {
    const std::string path = (fs::path(dir) / f.name).string();
    const int64_t actual = FileSize(path);
    if (actual < 0) return absl::DataLossError(absl::StrCat(path, ": listed in the manifest but missing"));
    if (actual != f.bytes) {
      return absl::DataLossError(absl::StrCat(path, ": ", actual, " bytes, the manifest says ", f.bytes,
                                              " (truncated or damaged checkpoint)"));
    }
    if (verify_hashes) LF_RETURN_IF_ERROR(CheckFileChecksum(path, f));
    c->files_[f.name] = f;
  }
  for (const CheckpointManifest::Unit& u : c->manifest_.units) c->unit_padded_.push_back(u.padded);
  LF_ASSIGN_OR_RETURN(c->config_, LoadConfigFile((fs::path(dir) / "config.json").string()));
  c->shards_.resize(static_cast<size_t>(c->shard_group_size()) * c->tensor_parallel());
  return c;
}

TrainerProgress ShardedCheckpoint::progress() const {
  TrainerProgress p;
  p.step = manifest_.step;
  p.epoch = manifest_.epoch;
  p.loss = manifest_.loss;
  p.seed = manifest_.seed;
  p.tokens_seen = manifest_.tokens_seen;
  p.rows_seen = manifest_.rows_seen;
  p.global_batch = manifest_.global_batch;
  p.eval_loss = manifest_.eval_loss;
  p.best_eval_loss = manifest_.best_eval_loss;
  p.best_eval_step = manifest_.best_eval_step;
  p.evals_without_improvement = manifest_.evals_without_improvement;
  return p;
}

absl::Status ShardedCheckpoint::CheckLayout(const std::vector<UnitLayout>& full) const {
  const std::vector<CheckpointManifest::Unit>& units = manifest_.units;
  const std::vector<UnitLayout> layout = TensorParallelLayout(full, tensor_parallel());
  if (units.size() != layout.size()) {
    return absl::FailedPreconditionError(absl::StrCat(dir_, ": checkpoint has ", units.size(),
                                                      " units, the model has ", layout.size()));
  }
  // A checkpoint holds the trainable tensors only (with LoRA: the adapters).
  for (size_t u = 0; u < layout.size(); ++u) {
    const int64_t saved = units[u].numel;
    if (units[u].name != layout[u].name || saved != layout[u].trainable_numel()) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir_, ": unit ", u, " (", layout[u].name, ") does not match the checkpoint's shape (", saved,
          " trainable elements saved, this run trains ", layout[u].trainable_numel(),
          "). The checkpoint's model: hidden_size ", config_.hidden_size, ", intermediate_size ",
          config_.intermediate_size, ", ", config_.num_hidden_layers, " layers, ", config_.num_attention_heads,
          " heads (", config_.num_key_value_heads, " key/value), vocab_size ", config_.vocab_size,
          ". A run resumes only with the same model (a tiny preset takes its tokenizer's vocabulary) and, "
          "with LoRA, the same peft.r and peft.target_modules"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const SafetensorsFile*> ShardedCheckpoint::Shard(int index) {
  if (index < 0 || index >= static_cast<int>(shards_.size())) {
    return absl::OutOfRangeError(absl::StrCat(dir_, ": no shard ", index));
  }
  if (!shards_[index]) {
    const std::string name = ShardFileName(index, static_cast<int>(shards_.size()));
    auto it = files_.find(name);
    if (it == files_.end()) return absl::DataLossError(absl::StrCat(dir_, ": manifest lists no ", name));
    const std::string path = (fs::path(dir_) / name).string();
    LF_RETURN_IF_ERROR(CheckFileChecksum(path, it->second));
    LF_ASSIGN_OR_RETURN(shards_[index], SafetensorsFile::Open(path));
  }
  return shards_[index].get();
}

absl::Status ShardedCheckpoint::ReadRange(int tp_rank, int unit, const std::string& kind, int64_t begin,
                                          int64_t end, at::Tensor out) {
  if (unit < 0 || unit >= static_cast<int>(unit_padded_.size())) {
    return absl::OutOfRangeError(absl::StrCat(dir_, ": no unit ", unit));
  }
  if (tp_rank < 0 || tp_rank >= tensor_parallel()) {
    return absl::OutOfRangeError(absl::StrCat(dir_, ": no tensor-parallel rank ", tp_rank));
  }
  const int n = shard_group_size();
  const int64_t shard = unit_padded_[unit] / n;
  for (int i = static_cast<int>(begin / shard); i < n && i * shard < end; ++i) {
    const int64_t lo = std::max(begin, i * shard), hi = std::min(end, (i + 1) * shard);
    if (lo >= hi) continue;
    LF_ASSIGN_OR_RETURN(const SafetensorsFile* f, Shard(tp_rank * n + i));
    const std::string name = absl::StrCat(unit, ".", kind);
    const StTensorInfo* info = f->Find(name);
    if (!info || info->dtype != StDtype::kF32 || info->numel() != shard) {
      return absl::DataLossError(absl::StrCat(f->path(), ": tensor ", name, " missing or of the wrong shape"));
    }
    const float* data = reinterpret_cast<const float*>(f->Data(*info));
    at::Tensor src = at::from_blob(const_cast<float*>(data) + (lo - i * shard), {hi - lo}, at::kFloat);
    out.narrow(0, lo - begin, hi - lo).copy_(src);
  }
  return absl::OkStatus();
}

namespace {
TpShardSource KindSource(ShardedCheckpoint* c, std::string kind) {
  return [c, kind = std::move(kind)](int tp_rank, int unit, int64_t begin, int64_t end, at::Tensor out) {
    return c->ReadRange(tp_rank, unit, kind, begin, end, out);
  };
}
}  // namespace

ShardSource ShardedCheckpoint::ParamSource(const std::vector<UnitLayout>& full, int t, int tp_rank) {
  return RetileSource(full, /*frozen=*/false, tensor_parallel(), KindSource(this, "param"), t, tp_rank);
}

// Copies `kind`'s slices this rank's shards cover into the engine tensors `dst(unit)`.
absl::Status ShardedCheckpoint::FillEngine(ShardedEngine& engine, const std::vector<UnitLayout>& full,
                                           const char* kind, const std::function<at::Tensor(int)>& dst) {
  const ShardSource source = RetileSource(full, /*frozen=*/false, tensor_parallel(), KindSource(this, kind),
                                          engine.tp_size(), engine.tp_rank());
  for (size_t u = 0; u < engine.layout().size(); ++u) {
    const int unit = static_cast<int>(u);
    const ShardSpan& sp = engine.span(unit);
    const int64_t end = std::min(sp.begin + sp.shard, sp.numel);
    at::Tensor tmp = at::zeros({sp.shard}, at::kFloat);
    if (end > sp.begin) LF_RETURN_IF_ERROR(source(unit, sp.begin, end, tmp.narrow(0, 0, end - sp.begin)));
    at::NoGradGuard no_grad;
    dst(unit).copy_(tmp);
  }
  return absl::OkStatus();
}

absl::Status ShardedCheckpoint::RestoreParams(ShardedEngine& engine, const std::vector<UnitLayout>& full) {
  return CatchTorch("restoring parameters", [&]() -> absl::Status {
    LF_RETURN_IF_ERROR(CheckLayout(full));
    return FillEngine(engine, full, "param", [&](int unit) { return engine.master(unit); });
  });
}

absl::Status ShardedCheckpoint::RestoreEngine(ShardedEngine& engine, const std::vector<UnitLayout>& full) {
  return CatchTorch("restoring optimizer state", [&]() -> absl::Status {
    LF_RETURN_IF_ERROR(CheckLayout(full));
    LF_RETURN_IF_ERROR(FillEngine(engine, full, "exp_avg", [&](int unit) { return engine.exp_avg(unit); }));
    LF_RETURN_IF_ERROR(FillEngine(engine, full, "exp_avg_sq", [&](int unit) { return engine.exp_avg_sq(unit); }));
    engine.set_optimizer_steps(manifest_.optimizer_steps);
    const double scale = manifest_.loss_scale;
    if (engine.options().compute_dtype == at::kHalf && scale > 0) engine.set_loss_scale(scale);
    const std::string rank_file = (fs::path(dir_) / RankFileName(engine.rank())).string();
    if (files_.count(RankFileName(engine.rank()))) {
      LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(rank_file, kMaxConfigFileBytes));
      const json state = ParseBoundedJson(text).value_or(json());
      auto rng = state.is_object() ? state.find("rng_cpu") : state.end();
      if (rng != state.end() && rng->is_string()) SetRngStateHex(rng->get<std::string>());
    }
    return absl::OkStatus();
  });
}

bool IsShardedCheckpoint(const std::string& dir) {
  auto text = ReadModelFile((fs::path(dir) / "manifest.json").string(), kMaxListingFileBytes);
  if (!text.ok()) return false;
  const json m = ParseBoundedJson(*text).value_or(json());
  auto format = m.is_object() ? m.find("format") : m.end();
  return format != m.end() && *format == kFormat;
}

absl::Status VerifyCheckpoint(const std::string& dir, const std::string& manifest_sha256, int part, int parts) {
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  if (!manifest_sha256.empty()) {
    auto got = Sha256File(mpath);
    if (!got.ok()) {
      return absl::NotFoundError(absl::StrCat(dir, ": cannot read manifest.json: ", got.status().message()));
    }
    if (*got != manifest_sha256) {
      return absl::DataLossError(absl::StrCat(mpath, ": sha256 ", *got, " is not the recorded ", manifest_sha256,
                                              " (replaced or damaged checkpoint)"));
    }
  }
  // Existence and sizes of every file, and a well-formed manifest.
  LF_ASSIGN_OR_RETURN(std::unique_ptr<ShardedCheckpoint> c, ShardedCheckpoint::Open(dir));
  const std::vector<CheckpointManifest::File>& files = c->parsed_manifest().files;
  for (size_t i = 0; i < files.size(); ++i) {
    if (parts > 1 && static_cast<int>(i % parts) != part) continue;
    const std::string path = (fs::path(dir) / files[i].name).string();
    LF_RETURN_IF_ERROR(CheckFileChecksum(path, files[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& root) {
  auto complete = ListComplete(root);
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    auto c = ShardedCheckpoint::Open(it->second);
    if (c.ok()) return it->second;
    LogWarning(absl::StrCat("skipping checkpoint ", it->second, ": ", c.status().message()));
  }
  return absl::NotFoundError(absl::StrCat(root, ": no complete checkpoint"));
}

absl::Status ExportShardedCheckpoint(const std::string& dir, const std::string& out_dir,
                                     const ExportOptions& options) {
  LF_ASSIGN_OR_RETURN(std::unique_ptr<ShardedCheckpoint> ckpt, ShardedCheckpoint::Open(dir));
  const std::vector<UnitLayout> layout = MakeLayout(ckpt->config());
  LF_RETURN_IF_ERROR(ckpt->CheckLayout(layout));
  return CatchTorch("export", [&]() -> absl::Status {
    // One unit at a time: its numel elements, split into its tensors.
    const ShardSource source = ckpt->ParamSource(layout);
    auto fetch = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> {
      at::Tensor flat = at::empty({layout[u].numel()}, at::kFloat);
      LF_RETURN_IF_ERROR(source(u, 0, layout[u].numel(), flat));
      std::vector<at::Tensor> out;
      int64_t off = 0;
      for (const auto& shape : layout[u].shapes) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        out.push_back(flat.narrow(0, off, n).view(shape));
        off += n;
      }
      return out;
    };
    return ExportHfDir(ckpt->config(), layout, fetch, out_dir, options);
  });
}

}  // namespace llamafleet::trainer
