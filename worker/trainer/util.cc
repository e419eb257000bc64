#include "util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/safe_open.h"
#include "worker/path_guard.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;

namespace {

// The most ReadFileToString reads: the largest file it is given (a checkpoint manifest of a
// 70B model over hundreds of ranks, a sharded model's index) is a few MiB.
constexpr size_t kMaxReadFileBytes = size_t{64} << 20;

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  // Links are followed: the paths a job names were resolved against the roots
  // (worker/path_guard.h), and model directories are often links into a cache.
  absl::StatusOr<std::string> content =
      ReadRegularFile(AT_FDCWD, path, kMaxReadFileBytes, path, LastLink::kFollow);
  if (content.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  return content;
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view data) {
  absl::StatusOr<UniqueFd> fd = CreateRegularFile(AT_FDCWD, path, 0644, path);
  if (!fd.ok()) return fd.status();
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd->get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // ENOSPC: a full checkpoint filesystem, worth a retry
      return absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd->get()) != 0 || ::close(fd->release()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": fsync/close failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StagedDir> StagedDir::Create(const std::string& final_path, const std::string& owner,
                                            const std::vector<std::string>& path_roots) {
  static std::atomic<int> counter{0};
  fs::path final_p = fs::absolute(fs::path(final_path)).lexically_normal();
  if (final_p.filename().empty()) final_p = final_p.parent_path();
  const fs::path parent = final_p.parent_path();
  StagedDir d;
  d.final_path_ = final_p.string();
  d.final_name_ = final_p.filename().string();
  d.owner_ = owner;
  if (!path_roots.empty()) {
    absl::StatusOr<UniqueFd> fd = OpenDirInRoots(path_roots, parent.string(), 0755);
    if (!fd.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("output.export_dir: its parent ", fd.status().message()));
    }
    d.parent_fd_ = std::move(*fd);
  } else {
    std::error_code ec;
    if (!fs::is_directory(parent, ec)) {
      fs::create_directories(parent, ec);
      if (ec) {
        return absl::InvalidArgumentError(
            absl::StrCat(parent.string(), ": cannot create output parent directory: ", ec.message()));
      }
    }
    d.parent_fd_ = UniqueFd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d.parent_fd_.valid()) {
      return absl::InvalidArgumentError(absl::StrCat(parent.string(), ": cannot open: ", std::strerror(errno)));
    }
  }
  LF_RETURN_IF_ERROR(d.CheckFinal());
  d.tmp_name_ = absl::StrCat(d.final_name_, ".tmp-", ::getpid(), "-", counter++);
  (void)RemoveTreeAt(d.parent_fd_.get(), d.tmp_name_);
  if (::mkdirat(d.parent_fd_.get(), d.tmp_name_.c_str(), 0755) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat((parent / d.tmp_name_).string(), ": cannot create directory: ", std::strerror(errno)));
  }
  d.tmp_fd_ = UniqueFd(::openat(d.parent_fd_.get(), d.tmp_name_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.tmp_fd_.valid()) {
    const int error = errno;
    (void)RemoveTreeAt(d.parent_fd_.get(), d.tmp_name_);
    return absl::PermissionDeniedError(
        absl::StrCat((parent / d.tmp_name_).string(), ": cannot open: ", std::strerror(error)));
  }
  d.tmp_path_ = FdPath(d.tmp_fd_.get());
  return d;
}

absl::Status StagedDir::CheckFinal() const {
  // Through the parent's descriptor: the entry of the directory that was opened.
  const std::string through = absl::StrCat(FdPath(parent_fd_.get()), "/", final_name_);
  absl::Status s = worker::CheckExportDir(through, owner_);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrReplaceAll(s.message(), {{through, final_path_}}));
}

StagedDir::~StagedDir() {
  if (!done_ && parent_fd_.valid() && !tmp_name_.empty()) (void)RemoveTreeAt(parent_fd_.get(), tmp_name_);
}

absl::Status StagedDir::Commit() {
  // Someone may have put files there since Create: check again, just before the rename.
  LF_RETURN_IF_ERROR(CheckFinal());
  LF_RETURN_IF_ERROR(WriteStringToFile(absl::StrCat(tmp_path_, "/", worker::kExportMarker), owner_));
  const int at = parent_fd_.get();
  std::string old;
  struct stat st;
  if (::fstatat(at, final_name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    old = absl::StrCat(tmp_name_, ".old");
    if (::renameat(at, final_name_.c_str(), at, old.c_str()) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(final_path_, ": cannot replace existing directory: ", std::strerror(errno)));
    }
  }
  if (::renameat(at, tmp_name_.c_str(), at, final_name_.c_str()) != 0) {
    const int error = errno;
    if (!old.empty()) ::renameat(at, old.c_str(), at, final_name_.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat(final_path_, ": cannot rename output into place: ", std::strerror(error)));
  }
  done_ = true;
  if (!old.empty()) (void)RemoveTreeAt(at, old);
  return absl::OkStatus();
}

namespace {
std::mutex& LogMutex() {
  static std::mutex mu;
  return mu;
}
void Log(char level, absl::string_view message) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(LogMutex());
  std::fprintf(stderr, "%s llamafleet-train [%c] %.*s\n", buf, level,
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}
}  // namespace

void LogInfo(absl::string_view message) { Log('I', message); }
void LogWarning(absl::string_view message) { Log('W', message); }

void EmitJsonLine(const std::string& json_object) {
  std::lock_guard<std::mutex> lock(LogMutex());
  std::fwrite(json_object.data(), 1, json_object.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::Update(const void* data, size_t n) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n); }
std::string Sha256::Raw() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}
std::string Sha256::Hex() {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : Raw()) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace llamafleet::trainer
