// tiktoken-format BPE ranks (Meta's Llama 3 tokenizer.model): one "base64(token bytes) rank"
// per line, ranks 0..N-1. Encoded as Meta's llama3 tokenizer.py does: Llama 3's pattern,
// then BPE by token rank, a piece that is a token taken whole. The 256 special tokens
// follow the ranks (ids N..N+255: <|begin_of_text|> is BOS, <|end_of_text|> EOS;
// <|end_of_text|>, <|eom_id|> and <|eot_id|> stop generation). Their strings inside text
// are text.
#pragma once

#include <memory>
#include <string>

#include "tokenizer.h"

namespace llamafleet::trainer {

// Llama 3's pre-tokenizer pattern (also tiktoken's cl100k_base's).
inline constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Whether `bytes` starts as a tiktoken ranks file does (a base64 token, a space, digits).
bool LooksLikeTiktoken(const std::string& bytes);

// `bytes` is the ranks file at `path`. INVALID_ARGUMENT naming path:line for malformed
// base64, a bad or repeated rank, a repeated token, or ranks that are not 0..N-1.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTiktokenTokenizer(const std::string& path,
                                                                 const std::string& bytes);

}  // namespace llamafleet::trainer
