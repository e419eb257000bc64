// What the training loop (trainer.h), evaluation and export share (train.cc): resolving
// devices and dtypes, loading data through the token cache, evaluating, checking paths.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "config.h"
#include "data.h"
#include "engine.h"
#include "model.h"
#include "token_cache.h"
#include "tokenizer.h"
#include "train.h"

namespace llamafleet::trainer {

// Torch reports errors as exceptions; they become a Status here, once.
template <typename F>
absl::Status CatchTorch(const char* what, F&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// "auto" | "cpu" | "cuda" (LOCAL_RANK picks the GPU).
absl::StatusOr<at::Device> ResolveDevice(const std::string& name, int local_rank);
// "fp32" | "bf16" | "fp16".
absl::StatusOr<at::ScalarType> ResolveComputeDtype(const std::string& name);
int64_t CurrentRssBytes();  // resident now
int64_t PeakRssBytes();     // ru_maxrss

// A dataset's rows (through the token cache) and how batches of it are made.
struct LoadedData {
  TokenRows rows;
  int32_t pad_id = 0;
  int64_t vocab_size = 0;
  bool cache_hit = false;  // mapped a token file built before this run (nothing tokenized for it)
};
// The rows of a JSONL file, tokenized once into `cache_dir` and then memory-mapped.
// `log_progress`: this process logs whether it found the entry; either flag: a build this
// process does logs its progress, and with `progress_events` also prints each report as a
// `tokenizing` event line (a train run's ranks: whichever builds, its worker relays them).
// Whether a build's progress goes out as event lines too: a worker's ranks
// (LLAMAFLEET_PROGRESS_EVENTS=1, which the worker sets), so that a run on its own keeps
// "started" as the first line it prints.
bool ProgressEventsWanted();
absl::StatusOr<LoadedData> LoadRows(const std::string& path, DataFormat format,
                                    const Tokenizer* tokenizer, const LlamaConfig& config,
                                    BatchingMode batching, int64_t seq_len,
                                    const std::string& cache_dir, uint64_t cache_max_bytes,
                                    bool log_progress, bool progress_events = false,
                                    const ChatDataOptions& chat = {});
// The chat template data.chat_template names for CHAT data (the model's own: the one
// beside `tokenizer`); nullopt for the other formats.
absl::StatusOr<std::optional<ChatTemplate>> MaybeResolveChatTemplate(DataFormat format,
                                                                     const std::string& setting,
                                                                     const Tokenizer* tokenizer);
// The tokenizer a format needs (none for token data): `explicit_path`, else
// <model_dir>/tokenizer.model; refused when it has more pieces than config->vocab_size.
// A vocab_size of 0 becomes the tokenizer's (PresetTakesTokenizerVocab).
absl::StatusOr<std::unique_ptr<Tokenizer>> MaybeLoadTokenizer(DataFormat format, const std::string& explicit_path,
                                                              const std::string& model_dir, LlamaConfig* config);
// Mean loss over all target tokens of `data` (rows split round-robin across ranks).
EvalResult Evaluate(LlamaModel& model, ParamEngine& engine, const LoadedData& data, int64_t micro_batch,
                    const at::Device& device);
// Every path the job names stays inside the roots with links resolved, and (rank 0) the
// export directory is new, empty or this job's own.
absl::Status CheckJobPaths(const TrainOptions& opt, bool rank0);

}  // namespace llamafleet::trainer
