// A rendered conversation (chat_template.h) as token ids and a loss mask. No Torch.
#pragma once

#include "absl/status/statusor.h"
#include "chat_template.h"
#include "data.h"
#include "tokenizer.h"

namespace llamafleet::trainer {

// Tokenizes `chat` as Hugging Face tokenizes apply_chat_template's text: inside the
// template's own text (chat.literal) each of tokenizer.template_tokens() becomes its single
// id, leftmost and longest first; the text between them is encoded in one piece (message
// content included, so tokens form across the template/content boundary as they do in
// HF). Message content never turns into special tokens. No BOS or EOS is added: the
// template writes them.
//
// target[t] is 1 when token t's bytes overlap a loss span of `train_on` (kAssistant: every
// assistant span, kLastAssistant: the last one, kAll: every token). Token bytes come from
// decoding each id alone where tokenizer.exact_pieces(); a SentencePiece model instead
// encodes the text between special tokens in pieces cut at the spans' edges (its ids can
// then differ from HF's at those edges).
//
// INVALID_ARGUMENT when encoding fails (text that is not UTF-8) or when no token carries
// loss (e.g. every assistant content is empty under a template that writes no end-of-turn
// token).
absl::StatusOr<Sequence> EncodeChat(const RenderedChat& chat, const Tokenizer& tokenizer,
                                    TrainOn train_on);

}  // namespace llamafleet::trainer
