// Sequential writing of large files (checkpoint shards, exported weights) around the page
// cache.
//
// Buffered writes cost CPU twice: the copy into the page cache and the kernel's writeback
// of it. On a node whose cores are busy with training ranks, that CPU is taken from the
// step loop even when the write itself runs on a background thread. Written with O_DIRECT
// from an aligned buffer, the bytes go from one user-space copy straight to the device.
// Where the filesystem refuses O_DIRECT (tmpfs, some FUSE mounts), or refuses one write,
// the writer goes on with ordinary writes: the file's contents are the same either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llamafleet::trainer {

class DirectFileWriter {
 public:
  // Creates (truncates) `path`, mode 0644. `buffer_bytes` is rounded up to the alignment.
  // `try_direct` false writes buffered from the start (as on a filesystem without O_DIRECT).
  static absl::StatusOr<std::unique_ptr<DirectFileWriter>> Create(const std::string& path,
                                                                   size_t buffer_bytes = size_t{8} << 20,
                                                                   bool try_direct = true);
  ~DirectFileWriter();  // closes without syncing when Finish() was not reached
  DirectFileWriter(const DirectFileWriter&) = delete;
  DirectFileWriter& operator=(const DirectFileWriter&) = delete;

  // Appends bytes; `on_bytes` (when set) sees every appended byte, in order, while it is
  // still in cache.
  absl::Status Append(const void* data, size_t nbytes);
  // Appends bytes written from the caller's memory without a copy where it can: when
  // nothing is buffered and `data` is aligned, its whole blocks go to the file as they
  // are (the rest is buffered as Append does). Otherwise the same as Append.
  absl::Status AppendInPlace(const void* data, size_t nbytes);
  // Writes what is buffered, fsyncs and closes. The file then holds exactly the appended
  // bytes.
  absl::Status Finish();

  void set_on_bytes(std::function<void(const void*, size_t)> on_bytes) { on_bytes_ = std::move(on_bytes); }
  uint64_t bytes() const { return appended_; }
  bool direct() const { return direct_; }  // whether O_DIRECT is (still) in use

  static constexpr size_t kAlignment = 4096;  // covers 512-byte and 4 KiB logical blocks

 private:
  DirectFileWriter() = default;
  absl::Status WriteFrom(const char* data, size_t length);
  void DropDirect();

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t fill_ = 0;
  uint64_t appended_ = 0;
  std::function<void(const void*, size_t)> on_bytes_;
};

// Page-aligned host memory (an anonymous mapping), for data that
// DirectFileWriter::AppendInPlace writes without a copy. Kept and reused: Reserve() maps
// anew only to grow, and the contents are then undefined.
class PageAlignedBuffer {
 public:
  PageAlignedBuffer() = default;
  ~PageAlignedBuffer();
  PageAlignedBuffer(const PageAlignedBuffer&) = delete;
  PageAlignedBuffer& operator=(const PageAlignedBuffer&) = delete;

  absl::Status Reserve(size_t bytes);
  char* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace llamafleet::trainer
