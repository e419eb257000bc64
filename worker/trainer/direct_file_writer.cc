#include "direct_file_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

absl::StatusOr<std::unique_ptr<DirectFileWriter>> DirectFileWriter::Create(const std::string& path,
                                                                           size_t buffer_bytes, bool try_direct) {
  std::unique_ptr<DirectFileWriter> w(new DirectFileWriter());
  w->path_ = path;
  w->capacity_ = std::max(kAlignment, (buffer_bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* buffer = nullptr;
  if (::posix_memalign(&buffer, kAlignment, w->capacity_) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot allocate a write buffer"));
  }
  w->buffer_ = static_cast<char*>(buffer);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (try_direct) {
    w->fd_ = ::open(path.c_str(), kFlags | O_DIRECT, 0644);
    w->direct_ = w->fd_ >= 0;
  }
  if (!try_direct || (w->fd_ < 0 && errno == EINVAL)) w->fd_ = ::open(path.c_str(), kFlags, 0644);
  if (w->fd_ < 0) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file: ", std::strerror(errno)));
  }
  return w;
}

DirectFileWriter::~DirectFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  std::free(buffer_);
}

void DirectFileWriter::DropDirect() {
  if (!direct_) return;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
  direct_ = false;
}

absl::Status DirectFileWriter::WriteFrom(const char* data, size_t length) {
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::write(fd_, data + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {
      DropDirect();  // an alignment this device does not take: go on buffered
      continue;
    }
    if (n <= 0) return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
    done += static_cast<size_t>(n);
    // A short direct write leaves the file offset unaligned; the rest goes buffered.
    if (done < length && direct_) DropDirect();
  }
  return absl::OkStatus();
}

absl::Status DirectFileWriter::Append(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const size_t k = std::min(nbytes, capacity_ - fill_);
    std::memcpy(buffer_ + fill_, p, k);
    if (on_bytes_) on_bytes_(buffer_ + fill_, k);
    fill_ += k;
    p += k;
    nbytes -= k;
    appended_ += k;
    if (fill_ == capacity_) {
      if (absl::Status s = WriteFrom(buffer_, fill_); !s.ok()) return s;
      fill_ = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status DirectFileWriter::AppendInPlace(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  if (fill_ != 0 || reinterpret_cast<uintptr_t>(p) % kAlignment != 0) return Append(data, nbytes);
  const size_t whole = nbytes / kAlignment * kAlignment;
  if (whole > 0) {
    if (on_bytes_) on_bytes_(p, whole);
    if (absl::Status s = WriteFrom(p, whole); !s.ok()) return s;
    appended_ += whole;
  }
  return Append(p + whole, nbytes - whole);
}

absl::Status DirectFileWriter::Finish() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already finished"));
  // The tail is not a whole number of blocks: written buffered (the offset is aligned, the
  // length need not be).
  if (fill_ % kAlignment != 0) DropDirect();
  if (absl::Status s = WriteFrom(buffer_, fill_); !s.ok()) return s;
  fill_ = 0;
  if (::fsync(fd_) != 0) return absl::DataLossError(absl::StrCat(path_, ": fsync failed: ", std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return absl::DataLossError(absl::StrCat(path_, ": close failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

PageAlignedBuffer::~PageAlignedBuffer() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

absl::Status PageAlignedBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_) return absl::OkStatus();
  constexpr size_t kPage = DirectFileWriter::kAlignment;
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", size, " bytes of staging memory: ", std::strerror(errno)));
  }
  // No MADV_HUGEPAGE: where THP defrag is "madvise" (Debian's default) the first touch
  // would compact memory synchronously, which stalled a first save for 0.4 s here against
  // 0.1 s of ordinary page faults.
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = static_cast<char*>(p);
  capacity_ = size;
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
