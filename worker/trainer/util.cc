#include "util.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "worker/path_guard.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for reading"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ss.str();
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      const int err = errno;  // ENOSPC: a full checkpoint filesystem, worth a retry
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": fsync/close failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StagedDir> StagedDir::Create(const std::string& final_path,
                                           const std::string& owner) {
  static std::atomic<int> counter{0};
  fs::path final_p = fs::absolute(fs::path(final_path)).lexically_normal();
  if (final_p.filename().empty()) final_p = final_p.parent_path();
  LF_RETURN_IF_ERROR(worker::CheckExportDir(final_p.string(), owner));
  std::error_code ec;
  const fs::path parent = final_p.parent_path();
  if (!fs::is_directory(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(parent.string(), ": cannot create output parent directory: ", ec.message()));
    }
  }
  if (fs::exists(final_p, ec) && !fs::is_directory(final_p, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(final_p.string(), ": exists and is not a directory"));
  }
  std::string tmp = absl::StrCat(final_p.string(), ".tmp-", ::getpid(), "-", counter++);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) {
    return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create directory"));
  }
  return StagedDir(final_p.string(), tmp, owner);
}

StagedDir::StagedDir(StagedDir&& o) noexcept
    : final_path_(std::move(o.final_path_)),
      tmp_path_(std::move(o.tmp_path_)),
      owner_(std::move(o.owner_)),
      done_(o.done_) {
  o.done_ = true;
}

StagedDir::~StagedDir() {
  if (!done_) {
    std::error_code ec;
    fs::remove_all(tmp_path_, ec);
  }
}

absl::Status StagedDir::Commit() {
  // Someone may have put files there since Create: check again, just before the rename.
  LF_RETURN_IF_ERROR(worker::CheckExportDir(final_path_, owner_));
  LF_RETURN_IF_ERROR(WriteStringToFile(absl::StrCat(tmp_path_, "/", worker::kExportMarker), owner_));
  std::error_code ec;
  std::string old;
  if (fs::exists(final_path_, ec)) {
    old = absl::StrCat(tmp_path_, ".old");
    fs::rename(final_path_, old, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat(final_path_, ": cannot replace existing directory: ", ec.message()));
    }
  }
  fs::rename(tmp_path_, final_path_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, final_path_, ec);
    return absl::PermissionDeniedError(
        absl::StrCat(final_path_, ": cannot rename output into place: ", ec.message()));
  }
  done_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
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
