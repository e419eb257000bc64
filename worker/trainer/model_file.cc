#include "model_file.h"

#include <fcntl.h>

#include "absl/strings/str_cat.h"
#include "common/safe_open.h"

namespace llamafleet::trainer {

absl::StatusOr<std::string> ReadModelFile(const std::string& path, uint64_t max_bytes) {
  return ReadRegularFile(AT_FDCWD, path, static_cast<size_t>(max_bytes), path, LastLink::kFollow);
}

bool JsonNestsDeeperThan(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text, int max_depth) {
  if (JsonNestsDeeperThan(text, max_depth)) {
    return absl::InvalidArgumentError(absl::StrCat("nested deeper than ", max_depth, " levels"));
  }
  nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return j;
}

}  // namespace llamafleet::trainer
