#include "model_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/dir_fd.h"

namespace llamafleet::trainer {

absl::StatusOr<std::string> ReadModelFile(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: a FIFO put where a file belongs is refused below instead of waited on.
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open for reading: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  auto too_large = [&](uint64_t bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", FormatBytes(static_cast<int64_t>(bytes)), ", more than the ",
                     FormatBytes(static_cast<int64_t>(max_bytes)), " such a file may hold"));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return too_large(static_cast<uint64_t>(st.st_size));
  }
  // At most one byte past the bound: a file that grew since the fstat is refused the same.
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got > max_bytes) return too_large(got);
    if (got == text.size() && text.size() <= max_bytes) {
      text.resize(std::min<uint64_t>(max_bytes + 1, text.size() * 2));
    }
  }
  text.resize(got);
  return text;
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
