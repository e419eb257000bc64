#include "byte_pair_encoder.h"

#include <atomic>
#include <queue>

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

namespace {

// Pieces longer than this are merged every time (rare: long runs of one class).
constexpr size_t kMaxCachedPieceBytes = 64;
// The cache is emptied when it holds this many pieces.
constexpr size_t kMaxCachedPieces = size_t{1} << 17;

struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};

PieceCache& ThreadCache() {
  thread_local PieceCache cache;
  return cache;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

BytePairEncoder::BytePairEncoder(Rule rule, bool whole_piece_first)
    : rule_(rule), whole_piece_first_(whole_piece_first), serial_(next_serial.fetch_add(1)) {
  for (int32_t& id : byte_id_) id = -1;
}

absl::Status BytePairEncoder::AddToken(std::string bytes, int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("negative token id ", id));
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat("token ", id, " is empty"));
  if (static_cast<size_t>(id) < bytes_of_id_.size() && bytes_of_id_[id] != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is given twice"));
  }
  if (ids_.count(bytes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens ", ids_.find(bytes)->second, " and ", id, " have the same bytes"));
  }
  if (static_cast<size_t>(id) >= bytes_of_id_.size())
    bytes_of_id_.resize(static_cast<size_t>(id) + 1, nullptr);
  storage_.push_back(std::move(bytes));
  bytes_of_id_[id] = &storage_.back();
  ids_.emplace(storage_.back(), id);
  return absl::OkStatus();
}

absl::Status BytePairEncoder::AddMerge(int32_t left, int32_t right) {
  const std::string* a = TokenBytes(left);
  const std::string* b = TokenBytes(right);
  if (a == nullptr || b == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("merge of unknown token id ", a == nullptr ? left : right));
  }
  const int32_t merged = Find(*a + *b);
  if (merged < 0) return absl::InvalidArgumentError("the merged token is not in the vocabulary");
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  // A pair listed twice keeps its first (lowest) rank, as Hugging Face's loader does.
  merges_.emplace(key, Merge{static_cast<int32_t>(merges_.size()), merged});
  return absl::OkStatus();
}

int32_t BytePairEncoder::Find(absl::string_view bytes) const {
  auto it = ids_.find(std::string_view(bytes.data(), bytes.size()));
  return it == ids_.end() ? -1 : it->second;
}

void BytePairEncoder::Finish(int32_t unk_id) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const int32_t id = Find(absl::string_view(&c, 1));
    byte_id_[b] = id >= 0 ? id : unk_id;
  }
}

const std::string* BytePairEncoder::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_of_id_.size()) return nullptr;
  return bytes_of_id_[id];
}

bool BytePairEncoder::PairRank(std::string_view piece, uint32_t a, uint32_t la, uint32_t lb,
                               int32_t left, int32_t right, Merge* m) const {
  if (rule_ == Rule::kTokenRank) {
    const std::string_view merged = piece.substr(a, la + lb);
    const int32_t id = Find(absl::string_view(merged.data(), merged.size()));
    if (id < 0) return false;
    *m = Merge{id, id};
    return true;
  }
  auto it = merges_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
  if (it == merges_.end()) return false;
  *m = it->second;
  return true;
}

void BytePairEncoder::MergePiece(std::string_view piece, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    uint32_t start, len;  // len 0: merged into its left neighbour
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    const int32_t id = byte_id_[static_cast<unsigned char>(piece[i])];
    if (id < 0) continue;  // a byte that is no token, without unk: dropped
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{id, static_cast<uint32_t>(i), 1, n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
  }
  // Candidates ordered by (rank, position); stale ones are recognised by the span they
  // were made for no longer being two live neighbours.
  struct Candidate {
    int32_t rank, pos, right, id;
    uint32_t len;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = sym[l].next;
    if (r < 0) return;
    // By token rank only adjacent bytes merge: a dropped byte between them keeps them apart.
    if (rule_ == Rule::kTokenRank && sym[l].start + sym[l].len != sym[r].start) return;
    Merge m;
    if (PairRank(piece, sym[l].start, sym[l].len, sym[r].len, sym[l].id, sym[r].id, &m)) {
      heap.push(Candidate{m.rank, l, r, m.id, sym[l].len + sym[r].len});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.pos];
    if (l.len == 0 || l.next != c.right || l.len + sym[c.right].len != c.len) continue;
    Symbol& r = sym[c.right];
    l.id = c.id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (l.next >= 0) sym[l.next].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (const Symbol& s : sym) {
    if (s.len > 0) out->push_back(s.id);
  }
}

void BytePairEncoder::EncodePiece(absl::string_view view, std::vector<int32_t>* out) const {
  const std::string_view piece(view.data(), view.size());
  if (whole_piece_first_) {
    const int32_t id = Find(view);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    MergePiece(piece, out);
    return;
  }
  PieceCache& cache = ThreadCache();
  if (cache.owner != serial_) {
    cache.ids.clear();
    cache.owner = serial_;
  }
  auto it = cache.ids.find(std::string(piece));
  if (it == cache.ids.end()) {
    if (cache.ids.size() >= kMaxCachedPieces) cache.ids.clear();
    std::vector<int32_t> ids;
    MergePiece(piece, &ids);
    it = cache.ids.emplace(std::string(piece), std::move(ids)).first;
  }
  out->insert(out->end(), it->second.begin(), it->second.end());
}

}  // namespace llamafleet::trainer
