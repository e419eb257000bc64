#include "bad_lines.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

void BadLines::Add(int64_t lineno, const absl::Status& error) {
  ++total_;
  if (shown_.size() >= kShown) return;
  absl::string_view why = error.message();
  const std::string prefix = absl::StrCat(path_, ":", lineno, ": ");
  if (absl::StartsWith(why, prefix)) why.remove_prefix(prefix.size());
  shown_.push_back(Line{lineno, error.code(), std::string(why)});
}

void BadLines::Append(const BadLines& later, int64_t line_offset) {
  for (const Line& l : later.shown_) {
    if (shown_.size() >= kShown) break;
    shown_.push_back(Line{l.lineno + line_offset, l.code, l.why});
  }
  total_ += later.total_;
}

absl::Status BadLines::ToStatus() const {
  if (total_ == 0) return absl::OkStatus();
  const Line& first = shown_.front();
  if (total_ == 1)
    return absl::Status(first.code, absl::StrCat(path_, ":", first.lineno, ": ", first.why));
  std::string msg = absl::StrCat(path_, ": ", total_, " bad lines:");
  for (const Line& l : shown_) absl::StrAppend(&msg, "\n  ", path_, ":", l.lineno, ": ", l.why);
  if (total_ > static_cast<int64_t>(shown_.size())) {
    absl::StrAppend(&msg, "\n  ... and ", total_ - static_cast<int64_t>(shown_.size()), " more");
  }
  return absl::Status(first.code, msg);
}

}  // namespace llamafleet::trainer
