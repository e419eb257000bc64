// The first records of a data file as the trainer will see them, for a person to read
// (llamafleet-train preview). No Torch.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data.h"

namespace llamafleet::trainer {

// The first `n` non-blank records of the JSONL file at `path`, read as LoadJsonl reads
// them (ParseRecord with `options`), as text: per record a line "PATH:LINE: T tokens, L
// with loss", then the tokens decoded (special tokens as their text), every run of tokens
// that carries loss between "[[" and "]]", and a blank line. A bad record is shown as its
// "PATH:LINE: why" instead; it does not stop the preview. NOT_FOUND / FAILED_PRECONDITION
// when the file cannot be opened as a regular file.
absl::StatusOr<std::string> PreviewRecords(const std::string& path, const DataLoadOptions& options,
                                           int64_t n);

}  // namespace llamafleet::trainer
