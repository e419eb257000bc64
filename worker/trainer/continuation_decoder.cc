#include "continuation_decoder.h"

namespace llamafleet::trainer {

ContinuationDecoder::ContinuationDecoder(const Tokenizer& tokenizer,
                                         absl::Span<const int32_t> prompt)
    : tokenizer_(tokenizer) {
  if (tokenizer.exact_pieces()) return;
  size_t from = 0;
  for (size_t i = prompt.size(); i > 0; --i) {
    if (!tokenizer.Decode(prompt.subspan(i - 1, 1)).empty()) {
      from = i - 1;
      break;
    }
  }
  context_.assign(prompt.begin() + from, prompt.end());
  context_text_ = tokenizer.Decode(context_);
}

std::string ContinuationDecoder::Decode(absl::Span<const int32_t> generated) const {
  if (context_.empty()) return tokenizer_.Decode(generated);
  std::vector<int32_t> ids = context_;
  ids.insert(ids.end(), generated.begin(), generated.end());
  std::string text = tokenizer_.Decode(ids);
  // The context's text is a prefix of the whole (it ends on a token, and a prompt encoded
  // from text ends on a whole character); were it not, the generated ids alone decide.
  if (text.compare(0, context_text_.size(), context_text_) != 0) {
    return tokenizer_.Decode(generated);
  }
  return text.substr(context_text_.size());
}

}  // namespace llamafleet::trainer
