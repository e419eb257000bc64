#include "generation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "continuation_decoder.h"
#include "engine.h"
#include "kv_cache.h"
#include "model.h"
#include "util.h"

namespace llamafleet::trainer {

absl::Status ValidateGenerationOptions(const GenerationOptions& o) {
  if (o.max_new_tokens < 1 || o.max_new_tokens > kMaxNewTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-new-tokens ", o.max_new_tokens, ": expected 1 to ", kMaxNewTokens));
  }
  if (!(o.temperature >= 0) || o.temperature > 1e6) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", o.temperature, ": expected >= 0 (0: greedy)"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-k ", o.top_k, ": expected >= 0 (0: every token)"));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--top-p ", o.top_p, ": expected (0, 1]"));
  }
  if (o.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stop: ", o.stop.size(), " strings, at most ", kMaxStopStrings));
  }
  for (const std::string& s : o.stop) {
    if (s.empty() || s.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--stop \"", s.substr(0, 40), "\": expected 1 to ", kMaxStopStringBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

at::Tensor PickNextTokens(const at::Tensor& logits, const GenerationOptions& o,
                          at::Generator& generator) {
  at::Tensor x = logits.to(at::kCPU, at::kFloat);
  if (o.temperature <= 0) return x.argmax(-1);
  const float inf = std::numeric_limits<float>::infinity();
  x = x / o.temperature;
  const int64_t V = x.size(-1);
  if (o.top_k > 0 && o.top_k < V) {
    const at::Tensor kth = std::get<0>(x.topk(o.top_k, -1)).select(-1, o.top_k - 1).unsqueeze(-1);
    x = x.masked_fill(x.lt(kth), -inf);
  }
  if (o.top_p < 1) {
    auto [sorted, order] = x.sort(-1, /*descending=*/true);
    const at::Tensor probs = at::softmax(sorted, -1);
    // A token goes when the more likely ones already reach p (the first never does).
    const at::Tensor before = probs.cumsum(-1) - probs;
    sorted = sorted.masked_fill(before.ge(o.top_p), -inf);
    x = at::full_like(x, -inf).scatter(-1, order, sorted);
  }
  return at::multinomial(at::softmax(x, -1), 1, /*replacement=*/false, generator).squeeze(1);
}

size_t CompleteUtf8Prefix(const std::string& text) {
  const size_t n = text.size();
  // The last lead byte within the last 4 bytes: the sequence it starts is either whole or
  // the incomplete tail.
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t want = c < 0x80             ? 1
                        : (c & 0xE0) == 0xC0 ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return back < want ? n - back : n;
  }
  return n;
}

struct Generator::Row {
  int64_t prompt_len = 0;
  std::vector<int32_t> ids, text_ids;          // generated; text_ids without an ending EOS
  std::string emitted;                         // text streamed so far
  std::string reason;                          // empty while running
  std::string text;                            // the final text
  std::optional<ContinuationDecoder> decoder;  // with a tokenizer
};

Generator::Generator(LlamaModel& model, ParamEngine& engine, const Tokenizer* tokenizer,
                     at::Device device, GenerationOptions options)
    : model_(model),
      engine_(engine),
      tokenizer_(tokenizer),
      device_(device),
      options_(std::move(options)),
      rng_(at::detail::createCPUGenerator(options_.seed)) {}

namespace {
// Where the first stop string starts in `text`, or npos.
size_t FindStop(const std::string& text, const std::vector<std::string>& stops) {
  size_t at = std::string::npos;
  for (const std::string& s : stops) at = std::min(at, text.find(s));
  return at;
}
// Bytes at the end of `text` that begin some stop string (and may grow into it).
size_t StopPrefixTail(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t k = std::min(text.size(), s.size() - 1); k > hold; --k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}
}  // namespace

void Generator::Accept(Row& row, int64_t index, int32_t id, const TokenCallback& on_token) const {
  row.ids.push_back(id);
  const bool eos =
      std::find(options_.eos_ids.begin(), options_.eos_ids.end(), id) != options_.eos_ids.end();
  if (!eos) row.text_ids.push_back(id);
  const std::string full = row.decoder ? row.decoder->Decode(row.text_ids) : std::string();
  std::string visible = full.substr(0, CompleteUtf8Prefix(full));
  const size_t stop_at = FindStop(visible, options_.stop);
  if (eos) {
    row.reason = "eos";
  } else if (stop_at != std::string::npos) {
    row.reason = "stop";
    visible.resize(stop_at);
  } else if (static_cast<int64_t>(row.ids.size()) >= options_.max_new_tokens) {
    row.reason = "length";
    visible = full;
  }
  if (!row.reason.empty()) {
    row.text = visible;
  } else {
    visible.resize(visible.size() - StopPrefixTail(visible, options_.stop));
  }
  // The decoded text only grows at its end (what was streamed stays its prefix); if a
  // tokenizer ever rewrote earlier text, nothing more is streamed for the row.
  std::string piece;
  if (visible.size() > row.emitted.size() &&
      visible.compare(0, row.emitted.size(), row.emitted) == 0) {
    piece = visible.substr(row.emitted.size());
    row.emitted = visible;
  }
  if (on_token) on_token(index, id, piece);
}

absl::StatusOr<std::vector<GeneratedRow>> Generator::Generate(
    const std::vector<std::vector<int32_t>>& prompts, const TokenCallback& on_token,
    int64_t first_index) {
  LF_RETURN_IF_ERROR(ValidateGenerationOptions(options_));
  if (tokenizer_ == nullptr && !options_.stop.empty()) {
    return absl::InvalidArgumentError("--stop needs a tokenizer");
  }
  const LlamaConfig& config = model_.config();
  const int64_t B = static_cast<int64_t>(prompts.size());
  if (B == 0) return std::vector<GeneratedRow>{};
  int64_t longest = 0;
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = static_cast<int64_t>(prompts[r].size());
    const std::string name = absl::StrCat("prompt ", first_index + r);
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat(name, " has no tokens"));
    if (n + options_.max_new_tokens > config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", n, " prompt tokens + --max-new-tokens ", options_.max_new_tokens,
          " exceed the model's max_position_embeddings ", config.max_position_embeddings));
    }
    for (int32_t id : prompts[r]) {
      if (id < 0 || id >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": token id ", id, " is outside the vocabulary of ", config.vocab_size));
      }
    }
    longest = std::max(longest, n);
  }
  // Left-padded rows: slot s of row r holds prompt token s - pad[r] (position s - pad[r]);
  // generated tokens follow every row at slots >= longest.
  const int64_t capacity = longest + options_.max_new_tokens;
  std::vector<int64_t> tokens(B * capacity, 0), positions(B * capacity, 0);
  std::vector<uint8_t> valid(B * capacity, 1);
  std::vector<Row> rows(B);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = static_cast<int64_t>(prompts[r].size()), pad = longest - n;
    rows[r].prompt_len = n;
    if (tokenizer_) rows[r].decoder.emplace(*tokenizer_, prompts[r]);
    for (int64_t s = 0; s < capacity; ++s) {
      positions[r * capacity + s] = std::max<int64_t>(0, s - pad);
      if (s < pad) valid[r * capacity + s] = 0;
      if (s >= pad && s < longest) tokens[r * capacity + s] = prompts[r][s - pad];
    }
  }
  const at::Tensor all_tokens = at::tensor(tokens, at::kLong).view({B, capacity});
  const at::Tensor all_positions = at::tensor(positions, at::kLong).view({B, capacity}).to(device_);
  const at::Tensor all_valid =
      at::tensor(std::vector<int64_t>(valid.begin(), valid.end()), at::kLong)
          .view({B, capacity})
          .to(device_, at::kBool);
  at::NoGradGuard no_grad;
  KvCache cache = KvCache::Make(config, B, capacity, device_, model_.compute_dtype());
  cache.valid.copy_(all_valid);
  // Runs slots [from, to): with the cache, the new ones; without, all of them again.
  auto run = [&](int64_t from, int64_t to) {
    if (!options_.use_cache) {
      cache.length = 0;
      from = 0;
    }
    const at::Tensor t = all_tokens.narrow(1, from, to - from).to(device_);
    return model_.ForwardCached(engine_, t, all_positions.narrow(1, from, to - from), cache);
  };
  at::Tensor logits = run(0, longest);
  int64_t running = B;
  for (int64_t step = 0; running > 0; ++step) {
    if (observer_) observer_(logits);
    const at::Tensor next = PickNextTokens(logits, options_, rng_);
    const int64_t* next_ids = next.data_ptr<int64_t>();
    const int64_t slot = longest + step;
    for (int64_t r = 0; r < B; ++r) {
      all_tokens[r][slot] = next_ids[r];
      if (!rows[r].reason.empty()) continue;
      Accept(rows[r], r, static_cast<int32_t>(next_ids[r]), on_token);
      if (!rows[r].reason.empty()) --running;
    }
    if (running == 0) break;
    logits = run(slot, slot + 1);
  }
  std::vector<GeneratedRow> out(B);
  for (int64_t r = 0; r < B; ++r) {
    out[r].text = std::move(rows[r].text);
    out[r].ids = std::move(rows[r].ids);
    out[r].stop_reason = std::move(rows[r].reason);
  }
  return out;
}

}  // namespace llamafleet::trainer
