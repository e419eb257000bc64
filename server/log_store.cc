#include "server/log_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/dir_fd.h"

namespace llamafleet {
namespace {

constexpr size_t kBlock = 64 * 1024;
// Trainer output is its job owner's business: the coordinator's alone on disk.
constexpr mode_t kDirMode = 0700;
constexpr mode_t kFileMode = 0600;

bool ParseTaskId(const std::string& task_id, int64_t* job, int64_t* attempt) {
  std::vector<std::string> parts = absl::StrSplit(task_id, '-');
  return parts.size() == 3 && absl::SimpleAtoi(parts[0], job) && absl::SimpleAtoi(parts[1], attempt) &&
         *job > 0 && *attempt > 0;
}

}  // namespace

LogStore::LogStore(std::string dir, int64_t max_file_bytes, int max_open_files)
    : dir_(std::move(dir)),
      max_bytes_(max_file_bytes),
      max_open_(std::max(1, max_open_files)),
      readers_(std::make_unique<SerialExecutor>("lf-log-read")),
      writer_(std::make_unique<SerialExecutor>("lf-log-write")) {
  // The top first, at once: whatever lies below is then closed to other users while the
  // writer thread tightens it entry by entry.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir_).parent_path(), ec);
  if (::mkdir(dir_.c_str(), kDirMode) != 0 && errno == EEXIST) {
    UniqueFd top(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (top.valid()) ::fchmod(top.get(), kDirMode);
  }
  writer_->Post([this] { TightenModes(); });
}

void LogStore::TightenModes() {
  std::error_code ec;
  // Links are neither followed nor changed: only directories and regular files.
  for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::file_status st = it->symlink_status(ec);
    if (ec) break;
    const bool dir = std::filesystem::is_directory(st);
    if (!dir && !std::filesystem::is_regular_file(st)) continue;
    UniqueFd fd(::open(it->path().c_str(),
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (dir ? O_DIRECTORY : 0)));
    if (fd.valid()) ::fchmod(fd.get(), dir ? kDirMode : kFileMode);
  }
}

LogStore::~LogStore() {
  writer_.reset();  // writes what was queued
  readers_.reset();
  for (auto& [path, file] : files_) {
    if (file.f != nullptr) fclose(file.f);
  }
}

void LogStore::Append(const std::string& task_id, int rank, const std::vector<std::string>& lines,
                      int64_t dropped) {
  int64_t job = 0, attempt = 0;
  if (!ParseTaskId(task_id, &job, &attempt) || rank < 0) return;
  Batch batch;
  batch.path = absl::StrCat(dir_, "/", job, "/attempt-", attempt, "/rank-", rank, ".log");
  batch.dropped = dropped;
  batch.lines.reserve(lines.size());
  for (const std::string& line : lines) {
    if (static_cast<int64_t>(line.size()) > kMaxLineBytes) {
      batch.lines.push_back(absl::StrCat(line.substr(0, kMaxLineBytes),
                                         " [llamafleet: line cut at ", kMaxLineBytes, " bytes]"));
    } else {
      batch.lines.push_back(line);
    }
    batch.bytes += static_cast<int64_t>(batch.lines.back().size()) + 1;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + batch.bytes > kMaxQueuedBytes) {
      // The disk is not keeping up: drop, and say so with the next batch that fits.
      dropped_[batch.path] += static_cast<int64_t>(batch.lines.size()) + dropped;
      return;
    }
    queued_bytes_ += batch.bytes;
    auto d = dropped_.find(batch.path);
    if (d != dropped_.end()) {
      batch.dropped += d->second;
      dropped_.erase(d);
    }
  }
  writer_->Post([this, batch = std::move(batch)] {
    WriteBatch(batch);
    std::lock_guard<std::mutex> lock(mu_);
    queued_bytes_ -= batch.bytes;
  });
}

LogStore::File* LogStore::OpenFile(const std::string& path) {
  File& file = files_[path];
  if (file.f != nullptr) {
    lru_.splice(lru_.begin(), lru_, file.lru);
    return &file;
  }
  while (static_cast<int>(lru_.size()) >= max_open_) {
    const std::string victim = lru_.back();
    CloseFile(victim, &files_[victim]);
  }
  // DIR/<job>/attempt-<n>/rank-<r>.log: each level below DIR made private.
  const std::string attempt_dir = std::filesystem::path(path).parent_path().string();
  for (const std::string& level :
       {dir_, std::filesystem::path(attempt_dir).parent_path().string(), attempt_dir}) {
    ::mkdir(level.c_str(), kDirMode);
  }
  UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, kFileMode));
  if (!fd.valid()) return nullptr;
  file.f = ::fdopen(fd.get(), "a");
  if (file.f == nullptr) return nullptr;
  fd.release();
  struct stat st;
  file.bytes = ::fstat(fileno(file.f), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  lru_.push_front(path);
  file.lru = lru_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++open_files_;
  return &file;
}

void LogStore::CloseFile(const std::string& path, File* file) {
  if (file->f == nullptr) return;
  fclose(file->f);
  file->f = nullptr;
  lru_.erase(file->lru);
  std::lock_guard<std::mutex> lock(mu_);
  --open_files_;
  (void)path;
}

void LogStore::WriteBatch(const Batch& batch) {
  File* file = OpenFile(batch.path);
  if (file == nullptr) return;
  auto write_line = [&](const std::string& line) {
    if (file->capped) return;
    if (file->bytes + static_cast<int64_t>(line.size()) + 1 > max_bytes_) {
      const std::string marker = "[llamafleet: log size limit reached; further lines dropped]\n";
      fwrite(marker.data(), 1, marker.size(), file->f);
      file->capped = true;
      return;
    }
    fwrite(line.data(), 1, line.size(), file->f);
    fputc('\n', file->f);
    file->bytes += static_cast<int64_t>(line.size()) + 1;
  };
  if (batch.dropped > 0) {
    write_line(absl::StrCat("[llamafleet: ", batch.dropped,
                            " lines dropped: the relay or the coordinator's log queue was full]"));
  }
  for (const std::string& line : batch.lines) write_line(line);
  fflush(file->f);
}

void LogStore::CloseAttempt(int64_t job_id, int attempt) {
  const std::string prefix = absl::StrCat(dir_, "/", job_id, "/attempt-", attempt, "/");
  writer_->Post([this, prefix] {
    for (auto it = files_.lower_bound(prefix);
         it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      CloseFile(it->first, &it->second);
      it = files_.erase(it);
    }
  });
}

void LogStore::Flush() {
  std::promise<void> done;
  auto f = done.get_future();
  writer_->Post([&done] { done.set_value(); });
  f.wait();
}

int LogStore::OpenFiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_files_;
}

absl::Status LogStore::RemoveJob(int64_t job_id) {
  const std::string job_dir = absl::StrCat(dir_, "/", job_id);
  // files_ belongs to the writer thread: close the job's files and delete there, after
  // every line already queued for it (a write after the delete would recreate the dir).
  std::promise<absl::Status> done;
  auto result = done.get_future();
  writer_->Post([this, job_dir, &done] {
    const std::string prefix = job_dir + "/";
    for (auto it = files_.lower_bound(prefix);
         it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      CloseFile(it->first, &it->second);
      it = files_.erase(it);
    }
    std::error_code ec;
    std::filesystem::remove_all(job_dir, ec);
    done.set_value(ec ? absl::InternalError(absl::StrCat("cannot remove logs ", job_dir, ": ",
                                                         ec.message()))
                      : absl::OkStatus());
  });
  return result.get();
}

std::vector<LogStore::Source> LogStore::Sources(int64_t job_id, int attempt) const {
  std::vector<Source> out;
  const std::string job_dir = absl::StrCat(dir_, "/", job_id);
  std::error_code ec;
  if (attempt <= 0) {
    for (const auto& entry : std::filesystem::directory_iterator(job_dir, ec)) {
      int a = 0;
      const std::string file = entry.path().filename().string();  // owns what `name` views
      absl::string_view name = file;
      if (absl::ConsumePrefix(&name, "attempt-") && absl::SimpleAtoi(name, &a)) {
        attempt = std::max(attempt, a);
      }
    }
  }
  if (attempt <= 0) return out;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat(job_dir, "/attempt-", attempt), ec)) {
    const std::string file = entry.path().filename().string();  // owns what `name` views
    absl::string_view name = file;
    int r = 0;
    if (absl::ConsumePrefix(&name, "rank-") && absl::ConsumeSuffix(&name, ".log") &&
        absl::SimpleAtoi(name, &r)) {
      out.push_back({attempt, r, entry.path().string()});
    }
  }
  std::sort(out.begin(), out.end(), [](const Source& a, const Source& b) { return a.rank < b.rank; });
  return out;
}

int64_t LogStore::TailOffset(const std::string& path, int64_t tail_lines) {
  if (tail_lines <= 0) return 0;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return 0;
  fseek(f, 0, SEEK_END);
  int64_t end = ftell(f);
  int64_t newlines = 0;
  std::string block(kBlock, '\0');
  int64_t result = 0;
  // Backwards in blocks: the start is just after the (tail_lines+1)-th newline from the
  // end (the file's last byte is a newline ending the last line).
  while (end > 0) {
    const int64_t start = std::max<int64_t>(0, end - static_cast<int64_t>(kBlock));
    const size_t n = static_cast<size_t>(end - start);
    fseek(f, start, SEEK_SET);
    if (fread(block.data(), 1, n, f) != n) break;
    for (size_t i = n; i-- > 0;) {
      if (block[i] == '\n' && ++newlines > tail_lines) {
        result = start + static_cast<int64_t>(i) + 1;
        fclose(f);
        return result;
      }
    }
    end = start;
  }
  fclose(f);
  return 0;
}

std::vector<std::string> LogStore::ReadLines(const std::string& path, Cursor* c) {
  std::vector<std::string> lines;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return lines;
  if (fseek(f, c->offset, SEEK_SET) != 0) {
    fclose(f);
    return lines;
  }
  std::string block(kBlock, '\0');
  std::string partial;  // bytes of a line not yet complete
  int64_t total = 0;    // bytes returned so far
  bool full = false;
  while (!full) {
    const size_t n = fread(block.data(), 1, kBlock, f);
    if (n == 0) break;
    size_t start = 0;
    for (size_t i = 0; i < n; ++i) {
      if (block[i] != '\n') continue;
      if (total + static_cast<int64_t>(partial.size() + (i - start)) > kMaxChunkBytes) {
        // A line longer than the chunk (written before lines were capped): alone, its
        // first part; after other lines, in the next chunk.
        if (lines.empty()) {
          partial.append(block, start, i - start);
          partial.resize(static_cast<size_t>(kMaxChunkBytes));
          c->offset += kMaxChunkBytes;
          lines.push_back(std::move(partial));
        }
        full = true;
        break;
      }
      partial.append(block, start, i - start);
      start = i + 1;
      total += static_cast<int64_t>(partial.size());
      c->offset += static_cast<int64_t>(partial.size()) + 1;
      lines.push_back(std::move(partial));
      partial.clear();
      if (static_cast<int>(lines.size()) >= kMaxChunkLines) {
        full = true;
        break;
      }
      // Stop before a line that could push the chunk over its byte bound.
      if (total + kMaxLineBytes + 256 > kMaxChunkBytes) {
        full = true;
        break;
      }
    }
    if (full) break;
    partial.append(block, start, n - start);
    if (static_cast<int64_t>(partial.size()) >= kMaxChunkBytes - total) {
      // One line longer than the chunk (written before lines were capped): return its
      // first part on its own.
      if (!lines.empty()) break;
      partial.resize(static_cast<size_t>(kMaxChunkBytes - total));
      c->offset += static_cast<int64_t>(partial.size());
      lines.push_back(std::move(partial));
      break;
    }
  }
  fclose(f);
  return lines;
}

}  // namespace llamafleet
