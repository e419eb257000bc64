// Small helpers shared by the trainer: the status macros (common/status_macros.h), file
// I/O, atomic directory output, and the stdout JSON-line / stderr log streams.
#pragma once

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dir_fd.h"
#include "common/status_macros.h"

namespace llamafleet::trainer {

// Whole file as bytes, at most 64 MiB, links followed. A regular file only: a FIFO, socket
// or device is FAILED_PRECONDITION ("... is not a regular file (a FIFO)") without being
// opened or waited for (common/safe_open.h), as is a file past the bound. NOT_FOUND / other
// errors name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` (created, or truncated when it is a regular file) and fsyncs it.
// Never through a link or into a FIFO: FAILED_PRECONDITION naming the path.
absl::Status WriteStringToFile(const std::string& path, absl::string_view data);

// A directory that is written in full under a temporary sibling name and then renamed into
// place, so a reader never sees a half-written output. If the destructor runs before
// Commit() (an error path), the temporary directory is removed. It replaces only what
// llamafleet wrote: the final path must not exist, be empty, or be an earlier output of the
// same `owner` (a job id; its marker file, worker/path_guard.h kExportMarker, is written
// into every committed directory), else FAILED_PRECONDITION and nothing is touched.
//
// Everything goes through descriptors held from Create on: the parent (opened beneath
// `path_roots` without following links, when given) and the staged directory, written
// through its FdPath; the final rename is a renameat in the parent. A parent swapped for a
// link, or renamed away, during the job changes nothing: the files land in the directory
// that was checked, never outside the roots.
class StagedDir {
 public:
  // Checks the final path (see above), then creates `<final>.tmp-<pid>-<n>` next to
  // `final_path` (creating missing parents); fails if the parent cannot be made or opened.
  static absl::StatusOr<StagedDir> Create(const std::string& final_path, const std::string& owner = "",
                                          const std::vector<std::string>& path_roots = {});
  StagedDir(StagedDir&& other) noexcept = default;
  StagedDir& operator=(StagedDir&&) = delete;
  ~StagedDir();

  // Where to write the files: the staged directory through its descriptor.
  const std::string& path() const { return tmp_path_; }
  // Checks the final path again, writes the owner marker, and renames the staged directory
  // to its final path, replacing an earlier output of the same owner there (moved aside
  // first and removed after the rename).
  absl::Status Commit();

 private:
  StagedDir() = default;
  // `final_path_`'s entry checked through the parent's descriptor; messages name it.
  absl::Status CheckFinal() const;

  std::string final_path_;  // as the caller named it
  std::string final_name_;  // its last component, an entry of parent_fd_
  std::string tmp_name_;    // the staged directory's entry in parent_fd_
  std::string tmp_path_;    // FdPath(tmp_fd_)
  std::string owner_;
  UniqueFd parent_fd_, tmp_fd_;
  bool done_ = false;
};

// SHA-256 fed in pieces (OpenSSL's EVP). Finish with Raw() or Hex(), once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  std::string Raw();  // the 32-byte digest
  std::string Hex();  // the digest in lowercase hex
 private:
  void* ctx_;  // EVP_MD_CTX
};

// Human-readable log line on stderr ("llamafleet-train [I] ...").
void LogInfo(absl::string_view message);
void LogWarning(absl::string_view message);
// One JSON object per line on stdout, flushed (the stream the worker relays).
void EmitJsonLine(const std::string& json_object);

}  // namespace llamafleet::trainer
