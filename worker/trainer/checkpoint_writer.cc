#include "checkpoint_writer.h"

#include <cmath>

#include <ATen/core/grad_mode.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint_manifest.h"
#include "common/crc32c.h"
#include "nlohmann/json.hpp"
#include "safetensors.h"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Store values: "ok <json>" or "error <message>".
std::string Ok(const json& j) { return "ok " + j.dump(); }
std::string Error(const absl::Status& s) { return absl::StrCat("error ", s.message()); }

absl::StatusOr<json> Parse(const std::string& value, const std::string& what) {
  if (value.rfind("ok ", 0) == 0) {
    try {
      return json::parse(value.substr(3));
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(what, ": malformed: ", e.what()));
    }
  }
  return absl::DataLossError(absl::StrCat(what, ": ", value.rfind("error ", 0) == 0 ? value.substr(6) : value));
}

// A manifest's entry for a file of `bytes` with CRC-32C `crc`.
json FileEntry(const std::string& name, int64_t bytes, uint32_t crc) {
  return json{{"name", name}, {"bytes", bytes}, {"crc32c", Crc32cHex(crc)}};
}

// Writes `path` with `data`, fsynced; its manifest entry.
absl::StatusOr<json> WriteDurable(const std::string& dir, const std::string& name, const std::string& data) {
  LF_RETURN_IF_ERROR(WriteStringToFile((fs::path(dir) / name).string(), data));
  return FileEntry(name, static_cast<int64_t>(data.size()), Crc32c(data));
}

// Writes the staged shard file from its image without copying it, checksummed piece by
// piece as it goes, and fsyncs it; its manifest entry.
absl::StatusOr<json> WriteShardImage(const std::string& path, const std::string& name, const char* image,
                                     size_t bytes) {
  constexpr size_t kPiece = size_t{8} << 20;  // a multiple of the alignment: only the last piece has a tail
  LF_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileWriter> file, DirectFileWriter::Create(path));
  uint32_t crc = 0;
  file->set_on_bytes([&crc](const void* p, size_t n) { crc = Crc32cExtend(crc, p, n); });
  for (size_t at = 0; at < bytes; at += kPiece) {
    LF_RETURN_IF_ERROR(file->AppendInPlace(image + at, std::min(kPiece, bytes - at)));
  }
  LF_RETURN_IF_ERROR(file->Finish());
  return FileEntry(name, static_cast<int64_t>(bytes), crc);
}

// This rank's files in `partial`: its shard (replica 0 only) and its state.
absl::StatusOr<json> WriteRankFiles(const CheckpointSnapshot& s, const std::string& partial) {
  json files = json::array();
  if (s.writes_shard) {
    const std::string name = ShardFileName(s.tp_rank * s.shard_size + s.shard_rank, s.tp_size * s.shard_size);
    LF_ASSIGN_OR_RETURN(json entry, WriteShardImage((fs::path(partial) / name).string(), name,
                                                    s.shard_image->data(), s.shard_image_bytes));
    files.push_back(std::move(entry));
  }
  const json state = {{"rank", s.rank},
                      {"step", s.progress.step},
                      {"epoch", s.progress.epoch},
                      {"seed", s.progress.seed},
                      {"tokens_seen", s.progress.tokens_seen},
                      {"rng_cpu", s.rng_cpu}};
  LF_ASSIGN_OR_RETURN(json state_file, WriteDurable(partial, RankFileName(s.rank), state.dump(2)));
  files.push_back(state_file);
  return files;
}

// Rank 0, once every rank's files are durable: config.json, the manifest (last), and the
// rename into place.
absl::StatusOr<SavedCheckpoint> Complete(const CheckpointSnapshot& s, const std::string& root,
                                         const std::string& shown_root, const std::string& partial, json files) {
  LF_ASSIGN_OR_RETURN(json config, WriteDurable(partial, "config.json", ConfigToJson(s.config, "float32")));
  files.push_back(config);
  int64_t total = 0;
  for (const json& f : files) total += f.at("bytes").get<int64_t>();
  json units = json::array();
  for (size_t u = 0; u < s.unit_names.size(); ++u) {
    units.push_back({{"name", s.unit_names[u]}, {"numel", s.unit_numel[u]}, {"padded", s.unit_padded[u]}});
  }
  json manifest = {{"format", kShardedCheckpointFormat},
                         {"step", s.progress.step},
                         {"epoch", s.progress.epoch},
                         {"loss", s.progress.loss},
                         {"seed", s.progress.seed},
                         {"tokens_seen", s.progress.tokens_seen},
                         {"rows_seen", s.progress.rows_seen},
                         {"global_batch", s.progress.global_batch},
                         {"world_size", s.world_size},
                         {"strategy", s.strategy},
                         {"shard_group_size", s.shard_size},
                         {"tensor_parallel", s.tp_size},
                         {"optimizer_steps", s.optimizer_steps},
                         {"loss_scale", s.loss_scale},
                         {"units", units},
                         {"files", files}};
  // Evaluation and early stopping: written only once there is something to say.
  if (std::isfinite(s.progress.eval_loss)) manifest["eval_loss"] = s.progress.eval_loss;
  if (std::isfinite(s.progress.best_eval_loss)) {
    manifest["best_eval_loss"] = s.progress.best_eval_loss;
    manifest["best_eval_step"] = s.progress.best_eval_step;
    manifest["evals_without_improvement"] = s.progress.evals_without_improvement;
  }
  const std::string text = manifest.dump(2);
  const std::string tmp = (fs::path(partial) / "manifest.json.tmp").string();
  LF_RETURN_IF_ERROR(WriteStringToFile(tmp, text));
  std::error_code ec;
  fs::rename(tmp, fs::path(partial) / "manifest.json", ec);
  if (ec) return absl::DataLossError(absl::StrCat(partial, ": cannot rename the manifest: ", ec.message()));
  LF_RETURN_IF_ERROR(FsyncDir(partial));
  // Into place. A complete step-N from an earlier attempt is replaced.
  const std::string final_dir = (fs::path(root) / absl::StrCat("step-", s.progress.step)).string();
  if (fs::exists(final_dir, ec)) {
    const std::string aside = absl::StrCat(final_dir, ".old-", ::getpid());
    fs::rename(final_dir, aside, ec);
    fs::remove_all(aside, ec);
  }
  fs::rename(partial, final_dir, ec);
  if (ec) return absl::DataLossError(absl::StrCat(final_dir, ": cannot rename into place: ", ec.message()));
  LF_RETURN_IF_ERROR(FsyncDir(root));
  SavedCheckpoint saved;
  saved.step = s.progress.step;
  saved.loss = s.progress.loss;
  saved.eval_loss = s.progress.eval_loss;
  saved.path = (fs::path(shown_root.empty() ? root : shown_root) / absl::StrCat("step-", s.progress.step)).string();
  LF_ASSIGN_OR_RETURN(saved.manifest_sha256, Sha256File((fs::path(final_dir) / "manifest.json").string()));
  saved.bytes = total + static_cast<int64_t>(text.size());
  return saved;
}

}  // namespace

absl::StatusOr<CheckpointSnapshot> TakeSnapshot(ShardedEngine& engine, const LlamaConfig& config,
                                                const TrainerProgress& progress,
                                                std::shared_ptr<PageAlignedBuffer> staging) {
  at::NoGradGuard no_grad;
  CheckpointSnapshot s;
  s.progress = progress;
  s.config = config;
  s.rank = engine.rank();
  s.world_size = engine.world_size();
  s.shard_rank = engine.shard_rank();
  s.shard_size = engine.shard_size();
  s.tp_rank = engine.tp_rank();
  s.tp_size = engine.tp_size();
  s.writes_shard = engine.replica_rank() == 0;
  s.strategy = ShardingStrategyName(engine.options().strategy);
  s.optimizer_steps = engine.optimizer_steps();
  s.loss_scale = engine.loss_scale();
  std::vector<SafetensorsWriter::Entry> entries;
  for (size_t u = 0; u < engine.layout().size(); ++u) {
    const int unit = static_cast<int>(u);
    s.unit_names.push_back(engine.layout()[u].name);
    s.unit_numel.push_back(engine.span(unit).numel);
    s.unit_padded.push_back(engine.span(unit).padded);
    s.unit_shard.push_back(engine.span(unit).shard);
    for (int k = 0; k < 3; ++k) entries.push_back({absl::StrCat(u, ".", kShardKinds[k]), StDtype::kF32, {s.unit_shard[u]}});
  }
  s.rng_cpu = CpuRngStateHex();
  if (!s.writes_shard) return s;
  uint64_t data_bytes = 0;
  LF_ASSIGN_OR_RETURN(const std::string prefix, SafetensorsWriter::Prefix(entries, {{"format", "pt"}}, &data_bytes));
  s.shard_image_bytes = prefix.size() + data_bytes;
  LF_RETURN_IF_ERROR(staging->Reserve(s.shard_image_bytes));
  char* out = staging->data();
  std::memcpy(out, prefix.data(), prefix.size());
  out += prefix.size();
  for (size_t u = 0; u < engine.layout().size(); ++u) {
    const int unit = static_cast<int>(u);
    for (const at::Tensor& t : {engine.master(unit), engine.exp_avg(unit), engine.exp_avg_sq(unit)}) {
      // A copy, never a view: training goes on updating the engine's tensors.
      at::Tensor slot = at::from_blob(out, {s.unit_shard[u]}, at::TensorOptions().dtype(at::kFloat));
      slot.copy_(t.detach().reshape({-1}));
      out += s.unit_shard[u] * static_cast<int64_t>(sizeof(float));
    }
  }
  s.shard_image = std::move(staging);
  return s;
}

namespace {

absl::StatusOr<SavedCheckpoint> WriteCheckpoint(const CheckpointSnapshot& s, int64_t sequence, KeyValueStore& kv,
                                                const CheckpointWriterOptions& options) {
  const std::string key = absl::StrCat("checkpoint/", sequence, "/");
  const bool rank0 = s.rank == 0;
  const std::string final_dir = (fs::path(options.root) / absl::StrCat("step-", s.progress.step)).string();
  const std::string partial = final_dir + ".partial";
  auto guarded = [](auto&& body) -> absl::Status {
    try {
      return body();
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
  };

  // 1. Rank 0 clears debris of an interrupted save of this step and creates the directory.
  if (rank0) {
    absl::Status prepared = guarded([&]() -> absl::Status {
      std::error_code ec;
      fs::create_directories(options.root, ec);
      fs::remove_all(partial, ec);
      if (!fs::create_directories(partial, ec)) {
        return absl::PermissionDeniedError(absl::StrCat(partial, ": cannot create: ", ec.message()));
      }
      return absl::OkStatus();
    });
    LF_RETURN_IF_ERROR(kv.Set(key + "ready", prepared.ok() ? Ok(json::object()) : Error(prepared)));
    if (!prepared.ok()) {
      (void)kv.Set(key + "done", Error(prepared));
      return prepared;
    }
  } else {
    LF_ASSIGN_OR_RETURN(std::string ready, kv.Get(key + "ready", options.timeout));
    LF_RETURN_IF_ERROR(Parse(ready, "checkpoint directory").status());
  }

  // 2. Every rank writes and publishes its files.
  json mine;
  absl::Status written = guarded([&]() -> absl::Status {
    LF_ASSIGN_OR_RETURN(mine, WriteRankFiles(s, partial));
    return absl::OkStatus();
  });
  if (written.ok() && options.after_files_written) options.after_files_written(s);
  LF_RETURN_IF_ERROR(kv.Set(absl::StrCat(key, "rank-", s.rank), written.ok() ? Ok(mine) : Error(written)));

  // 3. Rank 0 completes the checkpoint once every rank's files are durable; every rank
  // returns its outcome.
  if (!rank0) {
    LF_ASSIGN_OR_RETURN(std::string done, kv.Get(key + "done", options.timeout));
    LF_ASSIGN_OR_RETURN(json outcome, Parse(done, absl::StrCat("checkpoint step-", s.progress.step)));
    if (!written.ok()) return written;
    SavedCheckpoint saved;
    saved.step = s.progress.step;
    saved.loss = s.progress.loss;
    saved.eval_loss = s.progress.eval_loss;
    saved.path = outcome.value("path", "");
    saved.bytes = outcome.value("bytes", int64_t{0});
    saved.manifest_sha256 = outcome.value("manifest_sha256", "");
    return saved;
  }
  absl::StatusOr<SavedCheckpoint> saved = [&]() -> absl::StatusOr<SavedCheckpoint> {
    LF_RETURN_IF_ERROR(written);
    json files = json::array();
    for (int r = 0; r < s.world_size; ++r) {
      LF_ASSIGN_OR_RETURN(std::string value, kv.Get(absl::StrCat(key, "rank-", r), options.timeout));
      LF_ASSIGN_OR_RETURN(json theirs, Parse(value, absl::StrCat("rank ", r, "'s checkpoint files")));
      for (const json& f : theirs) files.push_back(f);
    }
    absl::StatusOr<SavedCheckpoint> out = absl::UnknownError("");
    absl::Status st = guarded([&]() -> absl::Status {
      out = Complete(s, options.root, options.shown_root, partial, std::move(files));
      return out.status();
    });
    if (!st.ok()) return st;
    return out;
  }();
  (void)kv.Set(key + "done", saved.ok() ? Ok(json{{"path", saved->path},
                                                    {"bytes", saved->bytes},
                                                    {"manifest_sha256", saved->manifest_sha256}})
                                          : Error(saved.status()));
  return saved;
}

}  // namespace

struct CheckpointWriter::Save {
  CheckpointSnapshot snapshot;
  std::atomic<bool> done{false};
  std::mutex mu;                // with `finished`: Wait wakes when `done` turns true
  std::condition_variable finished;
  absl::StatusOr<SavedCheckpoint> result{absl::UnknownError("not written")};
};

CheckpointWriter::CheckpointWriter(std::unique_ptr<KeyValueStore> kv, CheckpointWriterOptions options)
    : kv_(std::move(kv)), options_(std::move(options)) {}

CheckpointWriter::~CheckpointWriter() {
  if (!thread_.joinable()) return;
  if (save_->done.load()) {
    thread_.join();
  } else {
    thread_.detach();  // it owns what it uses (the save, the store, the options)
  }
}

absl::Status CheckpointWriter::Start(ShardedEngine& engine, const LlamaConfig& config,
                                     const TrainerProgress& progress, std::optional<SavedCheckpoint>* finished) {
  absl::StatusOr<std::optional<SavedCheckpoint>> previous = Wait(engine);
  if (!previous.ok()) return previous.status();
  if (finished != nullptr) *finished = *previous;
  // The staging buffer is free: the save that used it is finished. A writer thread that
  // was abandoned (the destructor) keeps its own reference, never this one's.
  LF_ASSIGN_OR_RETURN(CheckpointSnapshot snapshot, TakeSnapshot(engine, config, progress, staging_));
  save_ = std::make_shared<Save>();
  save_->snapshot = std::move(snapshot);
  unwaited_ = true;
  thread_ = std::thread([save = save_, kv = kv_, options = options_, sequence = sequence_++] {
    // The write takes only CPU the ranks leave: at the lowest priority it never delays a
    // rank's step (and with it every rank's next collective). Advice: ignored if refused.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    const auto t0 = std::chrono::steady_clock::now();
    save->result = WriteCheckpoint(save->snapshot, sequence, *kv, options);
    if (save->result.ok()) {
      save->result->write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    {
      std::lock_guard<std::mutex> lock(save->mu);
      save->done.store(true);
    }
    save->finished.notify_all();
  });
  if (!options_.async) {
    LF_ASSIGN_OR_RETURN(std::optional<SavedCheckpoint> mine, Wait(engine));
    if (finished != nullptr && !finished->has_value()) *finished = mine;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SavedCheckpoint>> CheckpointWriter::Poll() {
  if (!thread_.joinable() || !save_->done.load()) return std::optional<SavedCheckpoint>();
  return Collect();
}

absl::StatusOr<std::optional<SavedCheckpoint>> CheckpointWriter::Wait(ShardedEngine& engine) {
  // Every rank started the same saves, so every rank sees the same `unwaited_` and runs
  // the same rounds; the last round (nobody running) is also a barrier, after which no
  // rank's writer still needs the store that rank 0 hosts.
  if (unwaited_) {
    unwaited_ = false;
    for (;;) {
      const bool running = thread_.joinable() && !save_->done.load();
      if (!engine.AnyRank(running)) break;
      // A rank whose writer is done goes straight into the next round and waits there
      // for the others; one still writing joins it when it is done, or after 20 ms.
      if (running) {
        std::unique_lock<std::mutex> lock(save_->mu);
        save_->finished.wait_for(lock, std::chrono::milliseconds(20), [&] { return save_->done.load(); });
      }
    }
  }
  return Collect();
}

absl::StatusOr<std::optional<SavedCheckpoint>> CheckpointWriter::Collect() {
  if (!thread_.joinable()) return std::optional<SavedCheckpoint>();
  thread_.join();
  if (!save_->result.ok()) return save_->result.status();
  return std::optional<SavedCheckpoint>(*save_->result);
}

}  // namespace llamafleet::trainer
