// A data file's bad lines, gathered so that one error names them all up to a bound:
// each with `file:line: what is wrong`, then how many more there were. A file with
// several mistakes is fixed in one pass instead of one run per line. No Torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace llamafleet::trainer {

class BadLines {
 public:
  // Lines listed in the error; the rest are counted.
  static constexpr size_t kShown = 20;

  BadLines() = default;
  explicit BadLines(std::string path) : path_(std::move(path)) {}

  // Line `lineno` (1-based) is bad: `error` is ParseRecord's status, whose message starts
  // with "path:lineno: ".
  void Add(int64_t lineno, const absl::Status& error);
  // Appends `later`, whose lines all come after this one's, numbering them `line_offset`
  // further on (a tokenizing thread counts from its chunk's start).
  void Append(const BadLines& later, int64_t line_offset);

  bool empty() const { return total_ == 0; }
  int64_t total() const { return total_; }

  // OK when no line was bad. Otherwise the first bad line's code with, for one line,
  // ParseRecord's message as it was; for several, "path: N bad lines:" and one
  // "\n  path:line: why" per shown line, then "\n  ... and M more" past kShown.
  absl::Status ToStatus() const;

 private:
  struct Line {
    int64_t lineno = 0;
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
    std::string why;  // the message without its "path:lineno: " prefix
  };
  std::string path_;
  std::vector<Line> shown_;  // at most kShown, in file order
  int64_t total_ = 0;
};

}  // namespace llamafleet::trainer
