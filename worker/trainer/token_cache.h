// Datasets tokenized once into a memory-mapped token file, and the training rows over it.
//
// A JSONL dataset (data.h's formats) is turned once into a binary file keyed by the
// content of everything that decides its tokens: the data file's bytes, the bytes the
// tokenizer was loaded from (Tokenizer::sha256), the format, BOS/EOS ids, the vocabulary
// size and the length limit. Every later attempt and job with the same key maps it instead
// of tokenizing again, and each rank reads only the rows its sampler hands it (the pages it
// touches), so start-up and host memory no longer grow with the dataset.
//
// An entry holds the tokens of exactly the content its key names, even when the data file
// belongs to someone else who rewrites or replaces it meanwhile: the file is opened once
// (without following a link in its last component, a regular file checked on the
// descriptor), its key is computed through that descriptor (or remembered for its
// device, inode, size and times), and a build hashes every byte it tokenizes, as it
// tokenizes it, and stores nothing when that digest is not the key (ABORTED: the file
// changed).
//
// File <dir>/<key>.tokens, little-endian:
//   0   char[8]  "LFTOKv1\n"
//   8   u64      S  sequences (one per non-blank JSONL line; two, chosen then rejected, per
//                     preference pair)
//   16  u64      T  tokens in all
//   24  u64      64 (header bytes)
//   32  char[32] sha256 of everything after the header (checked when the file is built)
//   64  u64      offsets[S + 1]  sequence s is tokens [offsets[s], offsets[s+1])
//       i32      tokens[T]
//       u8       target[T]       1: a loss target (data.h's Sequence::target)
// Opening checks the header, the file size and that the offsets are monotonic from 0 to T;
// token ids are checked against the vocabulary when a batch is made.
//
// Building: one process per entry holds <key>.lock (flock), writes
// <key>.tokens.tmp-<host>-<pid>, fsyncs it and renames it into place; others wait on the
// lock and then map the result. The lock's holder removes the temporaries of the entry
// that this host's killed builders left (another host's it leaves alone).
// Using: a process holds <key>.use shared (flock) for as long as it maps the entry.
// Bounding (max_bytes): after a build, the builder removes the least recently used
// entries (oldest modification time; a hit touches its entry) until the entries fit,
// passing over any whose use lock is held: an entry in use is never removed, so no
// mapping loses its file, even where several hosts share the directory. The small lock
// files stay.
// The JSONL is split at line boundaries across threads (SentencePiece encoding is
// thread-safe); malformed lines fail the build with `file:line: why` for each, up to a
// bound, as LoadJsonl does.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dir_fd.h"
#include "data.h"

namespace llamafleet::trainer {

struct TokenCacheOptions;
struct TokenCacheResult;

class TokenFile {
 public:
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t sequence_begin(int64_t s) const { return static_cast<int64_t>(offsets_[s]); }
  int64_t sequence_end(int64_t s) const { return static_cast<int64_t>(offsets_[s + 1]); }
  const int32_t* tokens() const { return tokens_; }
  const uint8_t* target() const { return target_; }

 private:
  friend absl::StatusOr<TokenCacheResult> OpenTokenCache(const std::string&, const TokenCacheOptions&);
  TokenFile() = default;
  std::string path_;
  UniqueFd use_fd_;  // the entry's use lock, held shared while mapped (OpenTokenCache's files)
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t num_sequences_ = 0, num_tokens_ = 0;
  const uint64_t* offsets_ = nullptr;
  const int32_t* tokens_ = nullptr;
  const uint8_t* target_ = nullptr;
};

struct TokenCacheOptions {
  std::string dir;         // where entries live (created 0700 if missing)
  DataLoadOptions load;    // how records become tokens (part of the key)
  int threads = 0;         // build threads; 0 = the cores this process may run on
  uint64_t max_bytes = 0;  // bound on the entries' bytes in `dir`, applied after a build; 0 = none
  // A build reads (hashes, tokenizes) the data file in blocks of about this many bytes, whole
  // lines: what it holds of the file at once, beside the tokens.
  size_t read_block_bytes = size_t{64} << 20;
  // Called about every 2 s during a build with bytes of JSONL done and in all, and once
  // with done == total when every line is read (not after a malformed line).
  std::function<void(int64_t done, int64_t total)> progress;
  // For tests: called when the entry's key is known and this process is about to build
  // the entry, before the data is read for it.
  std::function<void()> before_build_for_test;
};

struct TokenCacheResult {
  std::unique_ptr<TokenFile> file;
  bool hit = false;         // an existing entry was mapped (built by nobody here)
  // Of a hit: the entry was not there when this process first looked; another process
  // built it meanwhile (this one waited on the entry's lock).
  bool built_meanwhile = false;
  double build_seconds = 0; // 0 on a hit
  int evicted = 0;          // least recently used entries removed to stay within max_bytes
  uint64_t evicted_bytes = 0;
  uint64_t kept_bytes = 0;  // the entries left after a bounded build (over the bound: all in use)
};

// The entry for `data_path`, built first when there is none. NOT_FOUND when the file
// cannot be opened, FAILED_PRECONDITION when it is a link or not a regular file, ABORTED
// when it changed while it was tokenized (nothing stored), INVALID_ARGUMENT for a bad
// record (`file:line: why`).
absl::StatusOr<TokenCacheResult> OpenTokenCache(const std::string& data_path, const TokenCacheOptions& options);

// Training rows over a token file, in the semantics of data.h: packing puts the sequences
// into rows of at most seq_len by next fit, each a document (PackSequences' rows, in the
// same order, with their documents: each row is a contiguous range of the token stream
// whose documents start at its first token and at every sequence start inside it);
// padding makes each sequence a row (CheckPaddingRows' rule and error). The file itself
// holds sequences only, so packing at any seq_len reads the same entry.
class TokenRows {
 public:
  static absl::StatusOr<TokenRows> Create(std::shared_ptr<const TokenFile> file,
                                          BatchingMode batching, int64_t seq_len,
                                          const std::string& source);
  int64_t size() const { return rows_; }
  // Rows `indices` as one batch (MakeBatch's layout, padding and documents);
  // INVALID_ARGUMENT when a token id is >= vocab_size (a damaged cache file).
  absl::StatusOr<Batch> MakeBatch(const std::vector<int64_t>& indices, int32_t pad_id,
                                  int64_t vocab_size) const;

 private:
  // Row `row`'s tokens [first, second) in the file, and (packing) its documents' lengths.
  std::pair<int64_t, int64_t> Span(int64_t row) const;
  std::vector<int32_t> Documents(int64_t begin, int64_t end) const;

  std::shared_ptr<const TokenFile> file_;
  BatchingMode batching_ = BatchingMode::kPacking;
  int64_t seq_len_ = 0;
  int64_t rows_ = 0;
  std::vector<int64_t> row_begin_;  // packing: row r is tokens [row_begin_[r], row_begin_[r + 1])
};

// The default cache directory of a trainer run on its own: $LLAMAFLEET_TOKEN_CACHE_DIR,
// else $XDG_CACHE_HOME/llamafleet/tokens, else $HOME/.cache/llamafleet/tokens.
std::string DefaultTokenCacheDir();

}  // namespace llamafleet::trainer
