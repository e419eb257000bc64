// Training data: JSONL records -> token sequences with loss masks -> rows (packed or
// padded) -> micro-batches chosen by a deterministic, seeded, resumable sampler.
// No Torch here: batches are flat int vectors the model turns into tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat_template.h"
#include "tokenizer.h"

namespace llamafleet::trainer {

// Same values as llamafleet.v1.DataFormat / Batching.
enum class DataFormat { kText = 1, kPromptCompletion = 2, kTokens = 3, kChat = 4, kPreference = 5 };
enum class BatchingMode { kPacking = 1, kPadding = 2 };

inline absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  return Tokenizer::Load(path);
}

// One token sequence. target[t] == 1 when token t is a loss target (predicted from the
// tokens before it); 0 for prompt tokens and padding. tokens.size() == target.size().
// A packed row (PackSequences) also lists its documents: `documents` holds their lengths
// in order (summing to tokens.size()); empty means the whole sequence is one document.
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> target;
  std::vector<int32_t> documents = {};
};

struct DataLoadOptions {
  DataFormat format = DataFormat::kText;  // record format of every line
  const Tokenizer* tokenizer = nullptr;   // required unless format == kTokens
  int64_t bos_id = 1;                     // prepended to text / prompt_completion records; -1: none
  int64_t eos_id = 2;                     // appended to text / prompt_completion records
  int64_t vocab_size = 0;                 // every id must be < vocab_size (0 = unchecked)
  int64_t max_positions = 0;              // a record longer than this is an error (0 = no limit)
  const ChatTemplate* chat_template = nullptr;  // required when format == kChat
  TrainOn train_on = TrainOn::kAssistant;       // kChat: which tokens carry loss
};

// What chat records need beyond DataLoadOptions' defaults (a train run's data options).
struct ChatDataOptions {
  const ChatTemplate* chat_template = nullptr;
  TrainOn train_on = TrainOn::kAssistant;
};

// Reads a JSONL file, one record per non-blank line:
//   text:              {"text": s}  -> [BOS] enc(s) [EOS], every token a target;
//   prompt_completion: {"prompt": p, "completion": c} -> [BOS] enc(p) enc(c) [EOS], where
//                      BOS and the prompt tokens are masked (prompt and completion are
//                      encoded separately so the boundary is exact);
//   tokens:            {"input_ids": [...]} used exactly as given, all targets;
//   chat:              a conversation (chat_record.h's layouts) rendered by chat_template
//                      and tokenized by chat_encoding.h: the template writes BOS and
//                      end-of-turn tokens (bos_id and eos_id are not used), train_on says
//                      which tokens are targets.
// Errors name the file and line; every bad line is read and the error lists them up to a
// bound (bad_lines.h), so one run shows all a file's mistakes. An empty file is an error,
// and so is anything but a regular file (a FIFO is refused, never waited for:
// common/safe_open.h).
absl::StatusOr<std::vector<Sequence>> LoadJsonl(const std::string& path,
                                                const DataLoadOptions& options);

// One non-blank line (`lineno` 1-based, for errors) of a JSONL file as LoadJsonl reads it.
// Thread-safe (the tokenizer's Encode is).
absl::StatusOr<Sequence> ParseRecord(const std::string& path, int64_t lineno, absl::string_view line,
                                     const DataLoadOptions& options);
// The same as the sequences the line holds: one for every format but kPreference, two
// (chosen, then rejected: preference_record.h's pair, each row its prompt and answer with
// the answer's tokens alone as targets) for a preference record. ParseRecord refuses a
// preference record; LoadJsonl and the token cache keep a pair's rows adjacent, row 2p
// chosen and 2p + 1 rejected.
absl::StatusOr<std::vector<Sequence>> ParseRecordSequences(const std::string& path, int64_t lineno,
                                                           absl::string_view line,
                                                           const DataLoadOptions& options);
bool IsBlankLine(absl::string_view line);

// Packing with document masking: the sequences, in order, each kept whole as one document,
// go into rows of at most seq_len tokens by next fit: a sequence joins the open row when it
// fits in the room left, else the open row is closed (its padding, added by MakeBatch, is
// never a loss target) and the sequence starts the next. A sequence longer than seq_len is
// cut into pieces of seq_len from its start, each a row of its own and its own document;
// the last piece, shorter, starts a row as above. The last row is kept however short.
// Every token is in exactly one row, in order. The rows' documents never see each other
// (MakeBatch's positions; the model's block-diagonal causal attention).
std::vector<Sequence> PackSequences(const std::vector<Sequence>& sequences, int64_t seq_len);

// Padding mode: one sequence per row; a sequence longer than seq_len is an error naming
// its record number (1-based). Rows keep their own length; MakeBatch pads.
absl::Status CheckPaddingRows(const std::vector<Sequence>& sequences, int64_t seq_len,
                              const std::string& source);

// A micro-batch, row-major [rows, seq_len]. Rows shorter than the longest are
// right-padded with pad_id and target 0 (right padding under a causal mask never
// changes the real tokens' outputs).
//
// Documents: when some row holds more than one document, `position` gives every token its
// position within its document (0 at each document's first token; the padding after a
// row's documents counts as one more document) and a token attends only to the tokens of
// its own document up to itself: token t of a row sees t' iff t - position[t] <= t' <= t.
// The first token of every document is then not a target (nothing of its own precedes
// it), so each document's loss terms are those it has alone. `position` is empty when
// every row is one document: positions 0..seq_len-1 and plain causal attention.
struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> tokens;    // [rows * seq_len]
  std::vector<uint8_t> target;    // [rows * seq_len]
  std::vector<int32_t> position;  // [rows * seq_len], or empty (see above)
  int64_t real_tokens = 0;        // non-padding tokens
  // Loss terms: positions t >= 1 of each row with target[t] == 1 (token t predicted from
  // position t-1).
  int64_t NumTargets() const;
};
Batch MakeBatch(const std::vector<Sequence>& rows, const std::vector<int64_t>& indices,
                int32_t pad_id = 0);
// Sets the documents of a batch whose tokens and targets are filled: `documents[r]` holds
// the lengths of row r's documents in order (empty, or one entry: the row is one
// document). Fills `position` and clears the target of each document's first token when
// some row holds more than one document; leaves both alone otherwise (see Batch).
void SetDocuments(const std::vector<std::vector<int32_t>>& documents, Batch* batch);

// Chooses rows for every (epoch, step, micro-step, rank). Each epoch is a seeded
// permutation of all rows (its own splitmix/xorshift generator, so results do not depend
// on the C++ library); the last incomplete global batch of an epoch is dropped. A global
// batch of micro_batch * grad_accum * world rows is split into disjoint parts: rank r
// takes the r-th contiguous block, micro-step m the m-th slice of it. Stateless, so
// resuming at any (epoch, step) reproduces the same rows.
class Sampler {
 public:
  struct Options {
    int64_t num_rows = 0;          // rows in the dataset
    int64_t micro_batch = 1;       // rows per rank per micro-step
    int64_t grad_accum = 1;        // micro-steps per optimizer step
    int64_t world_size = 1;        // data-parallel ranks
    uint64_t seed = 42;            // data-order seed
    bool shuffle = true;           // false: rows in file order every epoch
  };
  // INVALID_ARGUMENT when the dataset holds fewer rows than one global batch.
  static absl::StatusOr<Sampler> Create(const Options& options);

  int64_t global_batch() const { return opt_.micro_batch * opt_.grad_accum * opt_.world_size; }
  int64_t steps_per_epoch() const { return opt_.num_rows / global_batch(); }
  // Row indices of `rank`'s micro-step `micro` in step `step` (0-based within the epoch).
  std::vector<int64_t> Rows(int64_t epoch, int64_t step, int64_t micro, int64_t rank) const;
  // The epoch's permutation of all rows.
  std::vector<int64_t> Permutation(int64_t epoch) const;

 private:
  explicit Sampler(const Options& o) : opt_(o) {}
  Options opt_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_perm_;
};

}  // namespace llamafleet::trainer
