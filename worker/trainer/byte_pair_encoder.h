// Byte-level BPE over a vocabulary of byte strings: the merging both tokenizer.json's BPE
// model and tiktoken use, with a per-thread cache of the pieces already encoded.
//
// Merging is by rank, lowest first and leftmost among equals, until no adjacent pair has
// a rank. Two rules give the rank of a pair:
//   kMergeList   tokenizer.json: the pair's index in `merges` (AddMerge order)
//   kTokenRank   tiktoken: the rank (= id) of the two tokens' concatenated bytes
// With `whole_piece_first` (tiktoken always; tokenizer.json's ignore_merges), a piece
// that is itself a token is that token without merging. Merging uses a heap, so a piece of
// n bytes costs O(n log n) whatever the vocabulary.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llamafleet::trainer {

class BytePairEncoder {
 public:
  enum class Rule { kMergeList, kTokenRank };
  BytePairEncoder(Rule rule, bool whole_piece_first);
  BytePairEncoder(const BytePairEncoder&) = delete;
  BytePairEncoder& operator=(const BytePairEncoder&) = delete;

  // Building (one thread, before Finish). AddToken: INVALID_ARGUMENT when the id is negative or
  // already used, or the bytes are empty or already a token. AddMerge (kMergeList): the
  // next rank merges `left` and `right` (ids) into the token of their concatenated bytes;
  // INVALID_ARGUMENT when an id is unknown or the concatenation is not a token.
  absl::Status AddToken(std::string bytes, int32_t id);
  absl::Status AddMerge(int32_t left, int32_t right);
  // The id of `bytes`, or -1.
  int32_t Find(absl::string_view bytes) const;
  // Ends building. `unk_id` stands for a byte that is not a token (-1: such bytes are
  // dropped, as Hugging Face's BPE does without unk_token).
  void Finish(int32_t unk_id);

  // Appends the ids of `piece` (nonempty) to `out`. Thread-safe after Finish.
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;
  // The bytes of token `id`, or nullptr.
  const std::string* TokenBytes(int32_t id) const;
  // One past the largest id added (0 when none).
  int32_t id_limit() const { return static_cast<int32_t>(bytes_of_id_.size()); }
  size_t size() const { return ids_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  // The rank and resulting id of merging the adjacent spans [a, a+la) and [a+la, a+la+lb)
  // of `piece` holding tokens `left` and `right`; false when they do not merge.
  bool PairRank(std::string_view piece, uint32_t a, uint32_t la, uint32_t lb, int32_t left,
                int32_t right, Merge* m) const;
  void MergePiece(std::string_view piece, std::vector<int32_t>* out) const;

  const Rule rule_;
  const bool whole_piece_first_;
  uint64_t serial_;  // names this encoder in the per-thread cache
  int32_t byte_id_[256];
  std::deque<std::string> storage_;                    // every token's bytes, never moved
  std::vector<const std::string*> bytes_of_id_;        // id -> bytes (nullptr: no such id)
  std::unordered_map<std::string_view, int32_t> ids_;  // bytes -> id, viewing storage_
  std::unordered_map<uint64_t, Merge> merges_;         // (left << 32 | right) -> merge
};

}  // namespace llamafleet::trainer
