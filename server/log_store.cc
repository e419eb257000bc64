#include "server/log_store.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace llamafleet {

LogStore::~LogStore() {
  for (auto& [path, file] : files_) {
    if (file.f != nullptr) fclose(file.f);
  }
}

void LogStore::Append(const std::string& task_id, int rank, const std::vector<std::string>& lines,
                      int64_t dropped) {
  std::vector<std::string> parts = absl::StrSplit(task_id, '-');
  int64_t job = 0, attempt = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &job) || !absl::SimpleAtoi(parts[1], &attempt) ||
      rank < 0) {
    return;
  }
  const std::string dir = absl::StrCat(dir_, "/", job, "/attempt-", attempt);
  const std::string path = absl::StrCat(dir, "/rank-", rank, ".log");
  std::lock_guard<std::mutex> lock(mu_);
  File& file = files_[path];
  if (file.f == nullptr) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    file.f = fopen(path.c_str(), "a");
    if (file.f == nullptr) return;
    file.bytes = std::filesystem::file_size(path, ec);
  }
  auto write_line = [&](const std::string& line) {
    if (file.capped) return;
    if (file.bytes + static_cast<int64_t>(line.size()) + 1 > max_bytes_) {
      const std::string marker = "[llamafleet: log size limit reached; further lines dropped]\n";
      fwrite(marker.data(), 1, marker.size(), file.f);
      file.capped = true;
      return;
    }
    fwrite(line.data(), 1, line.size(), file.f);
    fputc('\n', file.f);
    file.bytes += static_cast<int64_t>(line.size()) + 1;
  };
  if (dropped > 0) {
    write_line(absl::StrCat("[llamafleet: ", dropped,
                            " lines dropped by the worker: its relay buffer was full]"));
  }
  for (const std::string& line : lines) write_line(line);
  fflush(file.f);
}

absl::Status LogStore::RemoveJob(int64_t job_id) {
  const std::string job_dir = absl::StrCat(dir_, "/", job_id);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = files_.lower_bound(job_dir + "/"); it != files_.end() &&
                                                    absl::StartsWith(it->first, job_dir + "/");) {
    if (it->second.f != nullptr) fclose(it->second.f);
    it = files_.erase(it);
  }
  std::error_code ec;
  std::filesystem::remove_all(job_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove logs ", job_dir, ": ", ec.message()));
  return absl::OkStatus();
}

std::vector<LogStore::Source> LogStore::Sources(int64_t job_id, int attempt) const {
  std::vector<Source> out;
  const std::string job_dir = absl::StrCat(dir_, "/", job_id);
  std::error_code ec;
  if (attempt <= 0) {
    for (const auto& entry : std::filesystem::directory_iterator(job_dir, ec)) {
      int a = 0;
      absl::string_view name = entry.path().filename().native();
      if (absl::ConsumePrefix(&name, "attempt-") && absl::SimpleAtoi(name, &a)) {
        attempt = std::max(attempt, a);
      }
    }
  }
  if (attempt <= 0) return out;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat(job_dir, "/attempt-", attempt), ec)) {
    absl::string_view name = entry.path().filename().native();
    int r = 0;
    if (absl::ConsumePrefix(&name, "rank-") && absl::ConsumeSuffix(&name, ".log") &&
        absl::SimpleAtoi(name, &r)) {
      out.push_back({attempt, r, entry.path().string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const Source& a, const Source& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace llamafleet
