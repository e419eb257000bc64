#ifndef LLAMAFLEET_COMMON_TENSORBOARD_WRITER_H_
#define LLAMAFLEET_COMMON_TENSORBOARD_WRITER_H_

// Scalars and text as TensorBoard reads them: one events file per writer,
// `<run dir>/events.out.tfevents.<unix seconds>.<hostname>`, so `tensorboard --logdir ROOT`
// shows each run directory below ROOT as one run. The trainer's rank 0 writes one run per
// attempt of a job, `<checkpoint dir>/tensorboard/attempt-<N>` (TensorBoardAttemptDir).
//
// The file is a sequence of TFRecords, each
//   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
//   `length` bytes: a serialized tensorboard.Event | uint32 masked CRC-32C of the data
// (common/crc32c.h), the first Event carrying file_version "brain.Event:2", each later one a
// Summary with one simple_value (a float: values are rounded to float precision) or one
// text summary (AddText).
//
// Records are buffered in memory until Flush() (or more than kAutoFlushBytes are waiting) and
// then written with write(2), whole: callers flush after each metrics line, so a crash loses
// at most what was added since. A file being written may end in a partly written record;
// TensorBoard (and tests/testing/tensorboard_events.py) read up to it.
//
// No Torch; protobuf (the generated tensorboard.Event) only inside the .cc. Not thread-safe:
// one thread uses a writer.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dir_fd.h"

namespace llamafleet {

// "tensorboard/attempt-<attempt>": a job attempt's run directory, relative to the job's
// checkpoint directory.
std::string TensorBoardAttemptDir(int64_t attempt);

class TensorBoardWriter {
 public:
  static constexpr mode_t kDirMode = 0750;   // directories created (then set past the umask)
  static constexpr mode_t kFileMode = 0640;  // the events file (the umask applies)
  static constexpr size_t kAutoFlushBytes = 1 << 20;

  // Creates `run_dir` (and missing parents, kDirMode) and a new events file in it, and
  // writes the file_version record. Links in the parents of `run_dir` are followed (the
  // path is the caller's); `run_dir` itself must be a real directory: a symbolic link there
  // is FAILED_PRECONDITION, never followed. The file is created O_EXCL | O_NOFOLLOW: when
  // another writer already has the name (same second, same host), ".<pid>" and then
  // ".<pid>.<n>" are appended, so each writer has its own file. Errors name the path.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& run_dir);

  // The same beneath an open directory: `relative_run_dir` ("tensorboard/attempt-1": no
  // leading '/', no "." or "..") is opened or created below `parent_dir_fd` one component
  // at a time with O_NOFOLLOW (OpenDirBeneath, common/dir_fd.h), so a link at any level
  // below `parent_dir_fd` is FAILED_PRECONDITION, never followed. `shown_parent` is
  // `parent_dir_fd`'s path as users know it, for errors and path(); "" shows the relative
  // path alone. `parent_dir_fd` is not kept.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(int parent_dir_fd,
                                                                const std::string& relative_run_dir,
                                                                const std::string& shown_parent = "");

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Flushes (an error is dropped: call Close() to see it) and closes the file.
  ~TensorBoardWriter();

  // Buffers one scalar: Event{wall_time, step, Summary{Value{tag, simple_value}}}.
  // `wall_time_s`: seconds since the Unix epoch; 0 means now. INVALID_ARGUMENT for an empty
  // tag. The value is stored as a float (rounded to nearest; a finite value beyond float's
  // range becomes an infinity); NaN and infinities are recorded as they are (TensorBoard
  // shows them). Writes the
  // buffer when it holds more than kAutoFlushBytes, and then returns Flush()'s error.
  absl::Status AddScalar(absl::string_view tag, int64_t step, double value, double wall_time_s = 0);

  // Buffers one text summary, as TensorBoard's text plugin reads it (its Text tab renders
  // Markdown): Event{wall_time, step, Summary{Value{tag, metadata{plugin_data{"text"},
  // DATA_CLASS_TENSOR}, tensor{DT_STRING, scalar shape, string_val [text]}}}}. `text` is
  // bytes as given (TensorBoard expects UTF-8). Errors and flushing as AddScalar.
  absl::Status AddText(absl::string_view tag, int64_t step, absl::string_view text,
                       double wall_time_s = 0);

  // Writes every buffered record with write(2) (retrying short writes and EINTR); no fsync.
  // After a failed write the file may end in a partial record, so the writer stops: this
  // and every later call return that error (naming the file), and nothing more is written.
  absl::Status Flush();

  // Flush(), then close(2); the first error. Later calls return FAILED_PRECONDITION.
  absl::Status Close();

  // The events file, as shown in errors: the run directory as given, then the file name.
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> OpenIn(UniqueFd dir, const std::string& shown_dir);
  void AppendRecord(const std::string& data);

  UniqueFd fd_;
  std::string path_;
  std::string buffer_;
  absl::Status failed_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_TENSORBOARD_WRITER_H_
