#include "data_preview.h"

#include <fcntl.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/safe_open.h"
#include "util.h"

namespace llamafleet::trainer {

absl::StatusOr<std::string> PreviewRecords(const std::string& path, const DataLoadOptions& opt,
                                           int64_t n) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(AT_FDCWD, path, path, LastLink::kFollow);
  if (!fd.ok()) return fd.status();
  std::ifstream in(FdPath(fd->get()));
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open data file"));
  std::string out, line;
  int64_t lineno = 0, shown = 0;
  while (shown < n && std::getline(in, line)) {
    ++lineno;
    if (IsBlankLine(line)) continue;
    ++shown;
    absl::StatusOr<std::vector<Sequence>> seqs = ParseRecordSequences(path, lineno, line, opt);
    if (!seqs.ok()) {
      absl::StrAppend(&out, seqs.status().message(), "\n\n");
      continue;
    }
    // A preference pair shows its chosen row, then its rejected row.
    for (const Sequence& q : *seqs) {
      const Sequence* s = &q;
      if (seqs->size() > 1 && s != &seqs->front()) absl::StrAppend(&out, "\n");
      int64_t with_loss = 0;
      for (uint8_t t : s->target) with_loss += t != 0;
      absl::StrAppend(&out, path, ":", lineno, ": ", s->tokens.size(), " tokens, ", with_loss,
                      " with loss\n");
      // Runs of tokens with the same target decode together (a character may span tokens).
      for (size_t b = 0; b < s->tokens.size();) {
        size_t e = b;
        while (e < s->tokens.size() && s->target[e] == s->target[b]) ++e;
        std::string text =
            opt.tokenizer != nullptr
                ? opt.tokenizer->Decode(absl::MakeConstSpan(s->tokens).subspan(b, e - b))
                : "";
        if (opt.tokenizer == nullptr) {
          for (size_t t = b; t < e; ++t) absl::StrAppend(&text, t > b ? " " : "", s->tokens[t]);
        }
        absl::StrAppend(&out, s->target[b] ? "[[" : "", text, s->target[b] ? "]]" : "");
        b = e;
      }
    }
    absl::StrAppend(&out, "\n\n");
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return out;
}

}  // namespace llamafleet::trainer
