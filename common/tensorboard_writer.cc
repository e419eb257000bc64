#include "common/tensorboard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "tensorboard/event.pb.h"

namespace llamafleet {
namespace {

// Past this many names taken in one second on one host, something else is wrong.
constexpr int kMaxNameAttempts = 100;

// `v` as a float: rounded to nearest; finite values beyond float's range become infinities
// (said here rather than left to the conversion, whose overflow C++ leaves undefined).
float ToFloat(double v) {
  if (std::isfinite(v) && std::fabs(v) > FLT_MAX) return std::signbit(v) ? -INFINITY : INFINITY;
  return static_cast<float>(v);
}

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

std::string HostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string host(buf);
  for (char& c : host) {
    if (c == '/') c = '_';
  }
  return host;
}

// Creates `mkdir -p`-style every directory above the last component of `path` (following
// links: the path is the caller's). An existing directory is fine whatever mkdir said.
absl::Status MakeParents(const std::string& path, const std::string& shown) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (prefix.empty() || prefix.back() == '/') continue;  // "//" in the path
    if (::mkdir(prefix.c_str(), TensorBoardWriter::kDirMode) == 0 || errno == EEXIST) continue;
    const int error = errno;
    struct stat st;
    if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard run directory ", shown, ": cannot create ", prefix, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TensorBoardAttemptDir(int64_t attempt) { return absl::StrCat("tensorboard/attempt-", attempt); }

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& run_dir) {
  std::string dir = run_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorBoard run directory '", run_dir, "' does not end in a directory name"));
  }
  std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  if (parent.empty()) parent = "/";
  LF_RETURN_IF_ERROR(MakeParents(dir, run_dir));
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TensorBoard run directory ", run_dir, ": cannot open ", parent, ": ", std::strerror(errno)));
  }
  absl::StatusOr<UniqueFd> run = OpenDirBeneath(parent_fd.get(), base, kDirMode, run_dir);
  if (!run.ok()) return run.status();
  return OpenIn(*std::move(run), dir);
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(int parent_dir_fd,
                                                                          const std::string& relative_run_dir,
                                                                          const std::string& shown_parent) {
  const std::string shown =
      shown_parent.empty() ? relative_run_dir : absl::StrCat(shown_parent, "/", relative_run_dir);
  if (relative_run_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorBoard run directory ", shown, ": empty relative path"));
  }
  absl::StatusOr<UniqueFd> run = OpenDirBeneath(parent_dir_fd, relative_run_dir, kDirMode, shown);
  if (!run.ok()) return run.status();
  return OpenIn(*std::move(run), shown);
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::OpenIn(UniqueFd dir,
                                                                            const std::string& shown_dir) {
  const double now = NowSeconds();
  const std::string stem = absl::StrCat("events.out.tfevents.", static_cast<int64_t>(now), ".", HostName());
  const pid_t pid = ::getpid();
  for (int n = 0; n < kMaxNameAttempts; ++n) {
    std::string name = stem;
    if (n >= 1) absl::StrAppend(&name, ".", pid);
    if (n >= 2) absl::StrAppend(&name, ".", n - 1);
    const std::string shown = absl::StrCat(shown_dir, "/", name);
    UniqueFd fd(::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kFileMode));
    if (!fd.valid()) {
      if (errno == EEXIST) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create TensorBoard events file ", shown, ": ", std::strerror(errno)));
    }
    std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(std::move(fd), shown));
    tensorboard::Event event;
    event.set_wall_time(now);
    event.set_file_version("brain.Event:2");
    writer->AppendRecord(event.SerializeAsString());
    LF_RETURN_IF_ERROR(writer->Flush());
    return writer;
  }
  return absl::AlreadyExistsError(absl::StrCat("TensorBoard run directory ", shown_dir, ": ", kMaxNameAttempts,
                                               " events file names starting ", stem, " are taken"));
}

TensorBoardWriter::~TensorBoardWriter() { (void)Flush(); }

void TensorBoardWriter::AppendRecord(const std::string& data) {
  std::string header;
  AppendLittleEndian(&header, data.size(), 8);
  buffer_ += header;
  AppendLittleEndian(&buffer_, MaskCrc32c(Crc32c(header)), 4);
  buffer_ += data;
  AppendLittleEndian(&buffer_, MaskCrc32c(Crc32c(data)), 4);
}

absl::Status TensorBoardWriter::AddScalar(absl::string_view tag, int64_t step, double value, double wall_time_s) {
  if (!failed_.ok()) return failed_;
  if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  if (tag.empty()) return absl::InvalidArgumentError(absl::StrCat(path_, ": a scalar needs a tag"));
  tensorboard::Event event;
  event.set_wall_time(wall_time_s == 0 ? NowSeconds() : wall_time_s);
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(ToFloat(value));
  AppendRecord(event.SerializeAsString());
  if (buffer_.size() > kAutoFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::AddText(absl::string_view tag, int64_t step, absl::string_view text,
                                        double wall_time_s) {
  if (!failed_.ok()) return failed_;
  if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  if (tag.empty())
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a text summary needs a tag"));
  tensorboard::Event event;
  event.set_wall_time(wall_time_s == 0 ? NowSeconds() : wall_time_s);
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  v->mutable_metadata()->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  tensorboard::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tensorboard::DT_STRING);
  t->mutable_tensor_shape();  // present and empty: a scalar
  t->add_string_val(std::string(text));
  AppendRecord(event.SerializeAsString());
  if (buffer_.size() > kAutoFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Flush() {
  if (!failed_.ok()) return failed_;
  if (buffer_.empty()) return absl::OkStatus();
  if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_.get(), buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      failed_ = absl::DataLossError(absl::StrCat("TensorBoard events file ", path_, ": write: ", std::strerror(error),
                                                 "; no more records are written to it"));
      buffer_.clear();
      return failed_;
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Close() {
  if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  absl::Status status = Flush();
  const int fd = fd_.release();
  if (::close(fd) != 0 && status.ok()) {
    status = absl::DataLossError(absl::StrCat("TensorBoard events file ", path_, ": close: ", std::strerror(errno)));
  }
  return status;
}

}  // namespace llamafleet
