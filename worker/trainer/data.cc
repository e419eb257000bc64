#include "data.h"

#include <fcntl.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "bad_lines.h"
#include "chat_encoding.h"
#include "chat_record.h"
#include "common/safe_open.h"
#include "micro_batch_slice.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "preference_record.h"
#include "util.h"

namespace llamafleet::trainer {

using nlohmann::json;

namespace {

// A preference pair as two sequences, chosen then rejected: the prompt's tokens, then the
// answer's, which alone are targets. Text: [BOS] enc(prompt) enc(answer) [EOS] (the EOS a
// target too, as prompt_completion's); messages: rendered by the chat template, the
// answer's assistant turn the targets (TrainOn::kLastAssistant); ids: as given.
absl::StatusOr<std::vector<Sequence>> EncodePreference(const nlohmann::json& j,
                                                       const DataLoadOptions& opt) {
  LF_ASSIGN_OR_RETURN(const PreferenceRecord r, ParsePreferenceRecord(j));
  std::vector<Sequence> out(2);
  switch (r.kind) {
    case PreferenceRecord::Kind::kTokens: {
      const std::vector<int32_t>* answers[2] = {&r.chosen_ids, &r.rejected_ids};
      for (int k = 0; k < 2; ++k) {
        out[k].tokens = r.prompt_ids;
        out[k].tokens.insert(out[k].tokens.end(), answers[k]->begin(), answers[k]->end());
        out[k].target.assign(r.prompt_ids.size(), 0);
        out[k].target.resize(out[k].tokens.size(), 1);
      }
      break;
    }
    case PreferenceRecord::Kind::kText: {
      if (opt.tokenizer == nullptr)
        return absl::InvalidArgumentError("text pairs need a tokenizer (model.tokenizer)");
      auto p = opt.tokenizer->Encode(r.prompt);
      if (!p.ok())
        return absl::InvalidArgumentError(absl::StrCat("field \"prompt\": ", p.status().message()));
      const std::string* answers[2] = {&r.chosen, &r.rejected};
      const char* names[2] = {"chosen", "rejected"};
      for (int k = 0; k < 2; ++k) {
        auto a = opt.tokenizer->Encode(*answers[k]);
        if (!a.ok())
          return absl::InvalidArgumentError(
              absl::StrCat("field \"", names[k], "\": ", a.status().message()));
        Sequence& s = out[k];
        if (opt.bos_id >= 0) s.tokens.push_back(static_cast<int32_t>(opt.bos_id));
        s.tokens.insert(s.tokens.end(), p->begin(), p->end());
        s.target.assign(s.tokens.size(), 0);
        s.tokens.insert(s.tokens.end(), a->begin(), a->end());
        s.tokens.push_back(static_cast<int32_t>(opt.eos_id));
        s.target.resize(s.tokens.size(), 1);
      }
      break;
    }
    case PreferenceRecord::Kind::kMessages: {
      if (opt.tokenizer == nullptr || opt.chat_template == nullptr) {
        return absl::InvalidArgumentError(
            "messages need a tokenizer and a chat template (model.tokenizer, data.chat_template)");
      }
      const ChatMessage* answers[2] = {&r.chosen_message, &r.rejected_message};
      for (int k = 0; k < 2; ++k) {
        std::vector<ChatMessage> msgs = r.prompt_messages;
        msgs.push_back(*answers[k]);
        LF_ASSIGN_OR_RETURN(RenderedChat chat, RenderChat(*opt.chat_template, msgs));
        LF_ASSIGN_OR_RETURN(out[k], EncodeChat(chat, *opt.tokenizer, TrainOn::kLastAssistant));
      }
      break;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Sequence> ParseRecord(const std::string& path, int64_t lineno, absl::string_view line,
                                     const DataLoadOptions& opt) {
  if (opt.format == DataFormat::kPreference) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", lineno, ": a preference record is two sequences"));
  }
  LF_ASSIGN_OR_RETURN(std::vector<Sequence> seqs, ParseRecordSequences(path, lineno, line, opt));
  return std::move(seqs[0]);
}

absl::StatusOr<std::vector<Sequence>> ParseRecordSequences(const std::string& path, int64_t lineno,
                                                           absl::string_view line,
                                                           const DataLoadOptions& opt) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", lineno, ": ", why));
  };
  // A record needs two levels ({"input_ids": [...]}); nesting is bounded before the DOM is
  // built, which keeps it a bounded multiple of the line (the DOM of an unbounded "[[[[..."
  // is 85x).
  if (JsonNestsDeeperThan(line, kMaxModelJsonDepth)) {
    return bad(absl::StrCat("nested deeper than ", kMaxModelJsonDepth, " levels"));
  }
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  Sequence s;
  auto get_string = [&](const char* key, std::string* value) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end()) return bad(absl::StrCat("missing field \"", key, "\""));
    if (!it->is_string()) return bad(absl::StrCat("field \"", key, "\" must be a string"));
    *value = it->get<std::string>();
    return absl::OkStatus();
  };
  switch (opt.format) {
    case DataFormat::kText: {
      std::string text;
      LF_RETURN_IF_ERROR(get_string("text", &text));
      auto ids = opt.tokenizer->Encode(text);
      if (!ids.ok()) return bad(absl::StrCat("field \"text\": ", ids.status().message()));
      if (opt.bos_id >= 0) s.tokens.push_back(static_cast<int32_t>(opt.bos_id));
      s.tokens.insert(s.tokens.end(), ids->begin(), ids->end());
      s.tokens.push_back(static_cast<int32_t>(opt.eos_id));
      s.target.assign(s.tokens.size(), 1);
      break;
    }
    case DataFormat::kPromptCompletion: {
      std::string prompt, completion;
      LF_RETURN_IF_ERROR(get_string("prompt", &prompt));
      LF_RETURN_IF_ERROR(get_string("completion", &completion));
      auto p = opt.tokenizer->Encode(prompt);
      if (!p.ok()) return bad(absl::StrCat("field \"prompt\": ", p.status().message()));
      auto c = opt.tokenizer->Encode(completion);
      if (!c.ok()) return bad(absl::StrCat("field \"completion\": ", c.status().message()));
      if (opt.bos_id >= 0) s.tokens.push_back(static_cast<int32_t>(opt.bos_id));
      s.tokens.insert(s.tokens.end(), p->begin(), p->end());
      s.target.assign(s.tokens.size(), 0);
      s.tokens.insert(s.tokens.end(), c->begin(), c->end());
      s.tokens.push_back(static_cast<int32_t>(opt.eos_id));
      s.target.resize(s.tokens.size(), 1);
      break;
    }
    case DataFormat::kChat: {
      absl::StatusOr<std::vector<ChatMessage>> msgs = ParseChatRecord(j);
      if (!msgs.ok()) return bad(msgs.status().message());
      absl::StatusOr<RenderedChat> chat = RenderChat(*opt.chat_template, *msgs);
      if (!chat.ok()) return bad(chat.status().message());
      absl::StatusOr<Sequence> seq = EncodeChat(*chat, *opt.tokenizer, opt.train_on);
      if (!seq.ok()) return bad(seq.status().message());
      s = *std::move(seq);
      break;
    }
    case DataFormat::kTokens: {
      auto it = j.find("input_ids");
      if (it == j.end()) return bad("missing field \"input_ids\"");
      if (!it->is_array()) return bad("field \"input_ids\" must be an array of integers");
      for (const json& v : *it) {
        if (!v.is_number_integer()) return bad("field \"input_ids\" must be an array of integers");
        int64_t id = v.get<int64_t>();
        if (id < 0 || id > INT32_MAX) return bad(absl::StrCat("token id ", id, " out of range"));
        s.tokens.push_back(static_cast<int32_t>(id));
      }
      s.target.assign(s.tokens.size(), 1);
      break;
    }
    case DataFormat::kPreference:
      break;
  }
  std::vector<Sequence> seqs;
  if (opt.format == DataFormat::kPreference) {
    absl::StatusOr<std::vector<Sequence>> pair = EncodePreference(j, opt);
    if (!pair.ok()) return bad(pair.status().message());
    seqs = *std::move(pair);
  } else {
    seqs.push_back(std::move(s));
  }
  for (const Sequence& q : seqs) {
    if (q.tokens.empty()) return bad("empty record (no tokens)");
    if (opt.max_positions > 0 && static_cast<int64_t>(q.tokens.size()) > opt.max_positions) {
      return bad(absl::StrCat("record has ", q.tokens.size(),
                              " tokens, longer than max_position_embeddings ", opt.max_positions));
    }
    if (opt.vocab_size > 0) {
      for (int32_t id : q.tokens) {
        if (id >= opt.vocab_size) {
          return bad(absl::StrCat("token id ", id, " is outside the vocabulary (vocab_size ",
                                  opt.vocab_size, ")"));
        }
      }
    }
  }
  return seqs;
}

bool IsBlankLine(absl::string_view line) { return line.find_first_not_of(" \t\r\n") == absl::string_view::npos; }

absl::StatusOr<std::vector<Sequence>> LoadJsonl(const std::string& path,
                                                const DataLoadOptions& opt) {
  // A regular file only (a FIFO would block the open), read through the descriptor checked.
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(AT_FDCWD, path, path, LastLink::kFollow);
  if (fd.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open data file"));
  }
  if (!fd.ok()) return fd.status();
  std::ifstream in(FdPath(fd->get()));
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open data file"));
  if (opt.format != DataFormat::kTokens && opt.format != DataFormat::kPreference &&
      opt.tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a tokenizer is required for text, prompt_completion and chat data"));
  }
  if (opt.format == DataFormat::kChat && opt.chat_template == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": chat data needs a chat template"));
  }
  std::vector<Sequence> out;
  BadLines bad(path);
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (IsBlankLine(line)) continue;
    absl::StatusOr<std::vector<Sequence>> s = ParseRecordSequences(path, lineno, line, opt);
    if (!s.ok()) {
      bad.Add(lineno, s.status());
    } else if (bad.empty()) {
      for (Sequence& q : *s) out.push_back(std::move(q));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  LF_RETURN_IF_ERROR(bad.ToStatus());
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": dataset is empty"));
  return out;
}

std::vector<Sequence> PackSequences(const std::vector<Sequence>& sequences, int64_t seq_len) {
  std::vector<Sequence> rows;
  Sequence open;
  auto close = [&] {
    if (!open.tokens.empty()) rows.push_back(std::move(open));
    open = Sequence();
  };
  auto append = [&](const Sequence& s, size_t begin, size_t end) {
    open.tokens.insert(open.tokens.end(), s.tokens.begin() + begin, s.tokens.begin() + end);
    open.target.insert(open.target.end(), s.target.begin() + begin, s.target.begin() + end);
    open.documents.push_back(static_cast<int32_t>(end - begin));
  };
  const size_t cap = static_cast<size_t>(seq_len);
  for (const Sequence& s : sequences) {
    const size_t n = s.tokens.size();
    if (n > cap - open.tokens.size()) close();
    size_t i = 0;
    for (; n - i > cap; i += cap) {  // pieces of a sequence longer than seq_len
      append(s, i, i + cap);
      close();
    }
    if (i < n) append(s, i, n);
    if (open.tokens.size() == cap) close();
  }
  close();
  return rows;
}

absl::Status CheckPaddingRows(const std::vector<Sequence>& sequences, int64_t seq_len,
                              const std::string& source) {
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (static_cast<int64_t>(sequences[i].tokens.size()) > seq_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": record ", i + 1, " has ", sequences[i].tokens.size(),
                       " tokens, longer than seq_len ", seq_len, " (padding batching)"));
    }
  }
  return absl::OkStatus();
}

int64_t Batch::NumTargets() const {
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 1; t < seq_len; ++t) n += target[r * seq_len + t];
  }
  return n;
}

Batch MakeBatch(const std::vector<Sequence>& rows, const std::vector<int64_t>& indices,
                int32_t pad_id) {
  Batch b;
  b.rows = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    b.seq_len = std::max<int64_t>(b.seq_len, static_cast<int64_t>(rows[i].tokens.size()));
  }
  b.tokens.assign(b.rows * b.seq_len, pad_id);
  b.target.assign(b.rows * b.seq_len, 0);
  std::vector<std::vector<int32_t>> documents;
  for (int64_t r = 0; r < b.rows; ++r) {
    const Sequence& s = rows[indices[r]];
    std::copy(s.tokens.begin(), s.tokens.end(), b.tokens.begin() + r * b.seq_len);
    std::copy(s.target.begin(), s.target.end(), b.target.begin() + r * b.seq_len);
    b.real_tokens += static_cast<int64_t>(s.tokens.size());
    documents.push_back(s.documents);
  }
  SetDocuments(documents, &b);
  return b;
}

void SetDocuments(const std::vector<std::vector<int32_t>>& documents, Batch* b) {
  const bool several = std::any_of(documents.begin(), documents.end(),
                                   [](const std::vector<int32_t>& d) { return d.size() > 1; });
  if (!several) return;
  b->position.assign(b->rows * b->seq_len, 0);
  for (int64_t r = 0; r < b->rows; ++r) {
    int32_t* pos = b->position.data() + r * b->seq_len;
    uint8_t* target = b->target.data() + r * b->seq_len;
    int64_t t = 0;
    for (int32_t len : documents[r]) {
      if (len <= 0 || t >= b->seq_len) continue;
      target[t] = 0;  // a document's first token: nothing of its own predicts it
      for (int32_t p = 0; p < len && t < b->seq_len; ++p) pos[t++] = p;
    }
    // The padding after the documents (or a row of one document) counts from 0 again.
    for (int32_t p = 0; t < b->seq_len; ++p) pos[t++] = p;
  }
}

absl::StatusOr<Sampler> Sampler::Create(const Options& o) {
  if (o.micro_batch <= 0 || o.grad_accum <= 0 || o.world_size <= 0) {
    return absl::InvalidArgumentError("micro_batch, grad_accum and world_size must be > 0");
  }
  const int64_t global = o.micro_batch * o.grad_accum * o.world_size;
  if (o.num_rows < global) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset has ", o.num_rows, " rows, fewer than one global batch of ", global,
        " (micro_batch_size ", o.micro_batch, " x grad_accum ", o.grad_accum, " x world size ",
        o.world_size, ")"));
  }
  return Sampler(o);
}

namespace {
// splitmix64: a fixed, portable generator (std::shuffle's algorithm is unspecified).
uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<int64_t> Sampler::Permutation(int64_t epoch) const {
  std::vector<int64_t> perm(opt_.num_rows);
  for (int64_t i = 0; i < opt_.num_rows; ++i) perm[i] = i;
  if (!opt_.shuffle) return perm;
  uint64_t state = opt_.seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = opt_.num_rows - 1; i > 0; --i) {
    // Unbiased index in [0, i] by rejection.
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
      r = SplitMix(state);
    } while (r >= limit);
    std::swap(perm[i], perm[r % bound]);
  }
  return perm;
}

std::vector<int64_t> Sampler::Rows(int64_t epoch, int64_t step, int64_t micro,
                                   int64_t rank) const {
  if (epoch != cached_epoch_) {
    cached_perm_ = Permutation(epoch);
    cached_epoch_ = epoch;
  }
  return MicroBatchSlice(cached_perm_, opt_, step, micro, rank);
}

}  // namespace llamafleet::trainer
