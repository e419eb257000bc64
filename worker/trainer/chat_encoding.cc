#include "chat_encoding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

struct Special {
  size_t begin, end;
  int32_t id;
};

// The template tokens inside chat.literal, in text order.
std::vector<Special> FindSpecials(const RenderedChat& chat, const Tokenizer& tok) {
  std::vector<Special> out;
  const auto& tokens = tok.template_tokens();
  for (const auto& [lb, le] : chat.literal) {
    const absl::string_view lit = absl::string_view(chat.text).substr(lb, le - lb);
    for (size_t i = 0; i < lit.size();) {
      bool found = false;
      for (const auto& [s, id] : tokens) {  // longest first
        if (!s.empty() && lit.substr(i, s.size()) == s) {
          out.push_back({lb + i, lb + i + s.size(), id});
          i += s.size();
          found = true;
          break;
        }
      }
      if (!found) ++i;
    }
  }
  return out;
}

// Appends the tokens of chat.text[begin, end) with the byte range each covers.
absl::Status EncodeRun(const RenderedChat& chat, size_t begin, size_t end, const Tokenizer& tok,
                       const std::vector<std::pair<size_t, size_t>>& spans,
                       std::vector<int32_t>* ids, std::vector<std::pair<size_t, size_t>>* ranges) {
  const absl::string_view text(chat.text);
  std::vector<size_t> cuts = {begin};
  if (!tok.exact_pieces()) {
    for (const auto& [b, e] : spans) {
      for (size_t c : {b, e}) {
        if (c > begin && c < end) cuts.push_back(c);
      }
    }
    std::sort(cuts.begin(), cuts.end());
  }
  cuts.push_back(end);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    if (cuts[k] == cuts[k + 1]) continue;
    LF_ASSIGN_OR_RETURN(std::vector<int32_t> run,
                        tok.Encode(text.substr(cuts[k], cuts[k + 1] - cuts[k])));
    size_t at = cuts[k];
    for (size_t t = 0; t < run.size(); ++t) {
      size_t len = tok.exact_pieces() ? tok.Decode({run[t]}).size() : 0;
      if (!tok.exact_pieces()) {
        // The whole piece is one range: every token of it overlaps what its piece overlaps.
        ranges->emplace_back(cuts[k], cuts[k + 1]);
      } else {
        ranges->emplace_back(at, std::min(at + len, cuts[k + 1]));
      }
      at += len;
      ids->push_back(run[t]);
    }
    if (tok.exact_pieces() && at != cuts[k + 1]) {
      return absl::InternalError(absl::StrCat("tokens of a chat text cover ", at - cuts[k],
                                              " bytes, not ", cuts[k + 1] - cuts[k]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Sequence> EncodeChat(const RenderedChat& chat, const Tokenizer& tok,
                                    TrainOn train_on) {
  std::vector<std::pair<size_t, size_t>> spans = chat.assistant;
  if (train_on == TrainOn::kLastAssistant && !spans.empty())
    spans.erase(spans.begin(), spans.end() - 1);
  std::vector<int32_t> ids;
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t at = 0;
  for (const Special& s : FindSpecials(chat, tok)) {
    LF_RETURN_IF_ERROR(EncodeRun(chat, at, s.begin, tok, spans, &ids, &ranges));
    ids.push_back(s.id);
    ranges.emplace_back(s.begin, s.end);
    at = s.end;
  }
  LF_RETURN_IF_ERROR(EncodeRun(chat, at, chat.text.size(), tok, spans, &ids, &ranges));
  Sequence seq;
  seq.tokens = std::move(ids);
  seq.target.assign(seq.tokens.size(), train_on == TrainOn::kAll ? 1 : 0);
  bool any = train_on == TrainOn::kAll && !seq.tokens.empty();
  if (train_on != TrainOn::kAll) {
    for (size_t t = 0; t < ranges.size(); ++t) {
      for (const auto& [b, e] : spans) {
        if (ranges[t].first < e && b < ranges[t].second) {
          seq.target[t] = 1;
          any = true;
          break;
        }
      }
    }
  }
  if (!any)
    return absl::InvalidArgumentError(
        "no token carries loss (the assistant turns render to nothing)");
  return seq;
}

}  // namespace llamafleet::trainer
