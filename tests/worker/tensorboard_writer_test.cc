// TensorBoard events files (common/tensorboard_writer.h): CRC-32C known answers; what the
// writer writes is read back, tag by tag and step by step, by an independent reader
// (tests/testing/tensorboard_events.py: its own CRC and protobuf decoding) at float
// precision; a corrupted byte is reported with its record's offset and a truncated last
// record is tolerated; a run directory that is a link is refused; two writers in one run
// directory get two files.
#include "common/tensorboard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crc32c.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;

// One "scalar" line of the reader's --dump: run, tag, step, value, wall time.
struct Point {
  std::string run;
  std::string tag;
  int64_t step = 0;
  double value = 0;
  double wall_time = 0;
};

// One "text" line of the reader's --dump: run, tag, step, the text (decoded from hex).
struct Text {
  std::string run;
  std::string tag;
  int64_t step = 0;
  std::string text;
};

struct Dump {
  int exit_code = -1;
  std::string err;
  std::vector<Point> points;
  std::vector<Text> texts;
  std::vector<std::vector<std::string>> files;      // run, path, file_version, records
  std::vector<std::vector<std::string>> truncated;  // run, path, offset, reason
};

bool HavePython() { return std::string(LLAMAFLEET_PYTHON3).size() > 0; }

Dump ReadWithPython(const std::string& path) {
  Dump dump;
  absl::StatusOr<testing::CommandResult> r =
      testing::RunCommand({LLAMAFLEET_PYTHON3, LLAMAFLEET_TENSORBOARD_EVENTS_PY, "--dump", path});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return dump;
  dump.exit_code = r->exit_code;
  dump.err = r->err;
  for (absl::string_view line : absl::StrSplit(r->out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f[0] == "scalar" && f.size() == 6) {
      Point p{f[1], f[2]};
      EXPECT_TRUE(absl::SimpleAtoi(f[3], &p.step)) << line;
      EXPECT_TRUE(absl::SimpleAtod(f[4], &p.value)) << line;
      EXPECT_TRUE(absl::SimpleAtod(f[5], &p.wall_time)) << line;
      dump.points.push_back(p);
    } else if (f[0] == "text" && f.size() == 5) {
      Text t{f[1], f[2]};
      EXPECT_TRUE(absl::SimpleAtoi(f[3], &t.step)) << line;
      t.text = absl::HexStringToBytes(f[4]);
      dump.texts.push_back(t);
    } else if (f[0] == "file" && f.size() == 5) {
      dump.files.emplace_back(f.begin() + 1, f.end());
    } else if (f[0] == "truncated" && f.size() == 5) {
      dump.truncated.emplace_back(f.begin() + 1, f.end());
    } else {
      ADD_FAILURE() << "unexpected reader line: " << line;
    }
  }
  return dump;
}

using testing::ReadFile;

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// The byte offsets at which the file's records start (its framing walked by length only).
std::vector<size_t> RecordOffsets(const std::string& blob) {
  std::vector<size_t> offsets;
  size_t pos = 0;
  while (pos + 12 <= blob.size()) {
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(blob[pos + i]);
    offsets.push_back(pos);
    pos += 16 + length;
  }
  return offsets;
}

std::vector<std::string> EventsFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Crc32cTest, KnownAnswers) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32cExtend(Crc32c("1234"), "56789"), 0xE3069283u);
  EXPECT_EQ(MaskCrc32c(0), 0xA282EAD8u);
  EXPECT_EQ(MaskCrc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
}

// The crc32 instruction's path agrees with the table at every length and alignment, and
// across split points (checkpoint files are checksummed in pieces as they are written).
TEST(Crc32cTest, FastPathMatchesTheTable) {
  std::string data(4096 + 64, '\0');
  uint32_t x = 12345;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 16);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t length : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      const absl::string_view piece(data.data() + offset, length);
      ASSERT_EQ(Crc32c(piece), Crc32cExtendPortable(0, piece)) << offset << " " << length;
      const size_t split = length / 3;
      EXPECT_EQ(Crc32cExtend(Crc32c(piece.substr(0, split)), piece.substr(split)), Crc32c(piece));
    }
  }
}

TEST(TensorBoardWriterTest, AttemptDir) { EXPECT_EQ(TensorBoardAttemptDir(3), "tensorboard/attempt-3"); }

TEST(TensorBoardWriterTest, EveryScalarReadsBackAtFloatPrecision) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  const std::string run_dir = tmp.path() + "/job/tensorboard/attempt-1";
  const std::vector<std::string> tags = {"train/loss", "train/lr", "train/grad_norm", "perf/mfu",
                                         "eval/perplexity"};
  std::map<std::pair<std::string, int64_t>, std::pair<double, double>> wrote;  // -> value, wall
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(run_dir);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(absl::StartsWith((*w)->path(), run_dir + "/events.out.tfevents.")) << (*w)->path();
    for (int64_t step = 0; step < 40; ++step) {
      for (size_t t = 0; t < tags.size(); ++t) {
        const double value = (t == 1 ? 3e-4 : 2.5) / (1.0 + step * 0.37 + t) + (t == 4 ? 1e6 : 0.0);
        const double wall = 1.7e9 + step * 0.25 + t * 1e-3;
        ASSERT_TRUE((*w)->AddScalar(tags[t], step, value, wall).ok());
        wrote[{tags[t], step}] = {value, wall};
      }
      ASSERT_TRUE((*w)->Flush().ok());
    }
    // Negative steps and non-finite values go through as they are.
    ASSERT_TRUE((*w)->AddScalar("odd/values", -5, std::nan(""), 1.7e9).ok());
    ASSERT_TRUE((*w)->AddScalar("odd/values", 1LL << 40, -INFINITY, 1.7e9).ok());
    ASSERT_TRUE((*w)->AddScalar("odd/values", 7, 1e300, 0).ok());  // past float range; wall time now
    EXPECT_TRUE((*w)->Close().ok());
  }
  Dump dump = ReadWithPython(tmp.path());
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  ASSERT_EQ(dump.files.size(), 1u);
  EXPECT_EQ(dump.files[0][0], "job/tensorboard/attempt-1");
  EXPECT_EQ(dump.files[0][2], "brain.Event:2");
  EXPECT_EQ(dump.files[0][3], absl::StrCat(1 + wrote.size() + 3));
  EXPECT_TRUE(dump.truncated.empty());

  size_t matched = 0;
  std::vector<Point> odd;
  for (const Point& p : dump.points) {
    EXPECT_EQ(p.run, "job/tensorboard/attempt-1");
    if (p.tag == "odd/values") {
      odd.push_back(p);
      continue;
    }
    auto it = wrote.find({p.tag, p.step});
    ASSERT_NE(it, wrote.end()) << p.tag << " " << p.step;
    EXPECT_EQ(p.value, static_cast<double>(static_cast<float>(it->second.first))) << p.tag << " " << p.step;
    EXPECT_EQ(p.wall_time, it->second.second) << p.tag << " " << p.step;
    ++matched;
  }
  EXPECT_EQ(matched, wrote.size());
  ASSERT_EQ(odd.size(), 3u);
  EXPECT_EQ(odd[0].step, -5);
  EXPECT_TRUE(std::isnan(odd[0].value));
  EXPECT_EQ(odd[1].step, 1LL << 40);
  EXPECT_EQ(odd[1].value, -INFINITY);
  EXPECT_EQ(odd[2].value, INFINITY);
  EXPECT_GT(odd[2].wall_time, 1.7e9);
}

TEST(TensorBoardWriterTest, DestructorFlushesAndAnEmptyTagIsRefused) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(tmp.path() + "/run/");
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->AddScalar("", 1, 1.0).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE((*w)->AddScalar("train/loss", 1, 2.0).ok());
    ASSERT_TRUE((*w)->AddScalar("train/loss", 2, 1.5).ok());
  }
  Dump dump = ReadWithPython(tmp.path() + "/run");
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  ASSERT_EQ(dump.points.size(), 2u);
  EXPECT_EQ(dump.points[1].step, 2);
  EXPECT_EQ(dump.points[1].value, 1.5);
}

// A text summary (Markdown with a table, newlines, tabs and UTF-8) reads back as the text
// plugin's: plugin_name "text", a DT_STRING tensor holding the bytes as given, among scalars.
TEST(TensorBoardWriterTest, TextSummariesReadBackAsTheTextPlugin) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  const std::string table = "| prompt | text |\n|---|---|\n| caf\xc3\xa9\t? | a \\| b |\n";
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Open(tmp.path() + "/run");
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->AddText("", 1, "x").code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE((*w)->AddScalar("eval/loss", 2, 1.5).ok());
    ASSERT_TRUE((*w)->AddText("samples", 2, table).ok());
    ASSERT_TRUE((*w)->AddText("samples", 4, "").ok());
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ((*w)->AddText("samples", 5, "x").code(), absl::StatusCode::kFailedPrecondition);
  }
  Dump dump = ReadWithPython(tmp.path() + "/run");
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  ASSERT_EQ(dump.points.size(), 1u);
  ASSERT_EQ(dump.texts.size(), 2u);
  EXPECT_EQ(dump.texts[0].tag, "samples");
  EXPECT_EQ(dump.texts[0].step, 2);
  EXPECT_EQ(dump.texts[0].text, table);
  EXPECT_EQ(dump.texts[1].step, 4);
  EXPECT_EQ(dump.texts[1].text, "");
  EXPECT_EQ(dump.files[0][3], "4");  // file_version, the scalar, two texts
}

TEST(TensorBoardWriterTest, ClosedWriterRefusesScalars) {
  testing::TempDir tmp;
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(tmp.path() + "/run");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->AddScalar("train/loss", 1, 1.0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Close().code(), absl::StatusCode::kFailedPrecondition);
}

// Writes `n` scalars into a fresh run directory and returns the events file's path.
std::string WriteRun(const std::string& run_dir, int n) {
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(run_dir);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return "";
  for (int i = 0; i < n; ++i) EXPECT_TRUE((*w)->AddScalar("train/loss", i, 1.0 / (i + 1), 1.7e9 + i).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return (*w)->path();
}

TEST(TensorBoardWriterTest, CorruptedByteIsReportedWithItsRecordOffset) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  const std::string path = WriteRun(tmp.path() + "/run", 5);
  ASSERT_FALSE(path.empty());
  const std::string clean = ReadFile(path);
  const std::vector<size_t> offsets = RecordOffsets(clean);
  ASSERT_EQ(offsets.size(), 6u);

  std::string bad = clean;
  bad[offsets[3] + 12 + 4] ^= 0x01;  // a byte of record 3's data
  WriteFile(path, bad);
  Dump dump = ReadWithPython(path);
  EXPECT_EQ(dump.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(dump.err, path)) << dump.err;
  EXPECT_TRUE(absl::StrContains(dump.err, absl::StrCat("byte offset ", offsets[3], ": data CRC mismatch")))
      << dump.err;

  bad = clean;
  bad[offsets[2] + 1] ^= 0x40;  // record 2's length
  WriteFile(path, bad);
  dump = ReadWithPython(tmp.path() + "/run");
  EXPECT_EQ(dump.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(dump.err, absl::StrCat("byte offset ", offsets[2], ": length CRC mismatch")))
      << dump.err;

  bad = clean;
  bad[bad.size() - 1] ^= 0x80;  // the last record's data CRC
  WriteFile(path, bad);
  dump = ReadWithPython(path);
  EXPECT_EQ(dump.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(dump.err, absl::StrCat("byte offset ", offsets[5], ": data CRC mismatch")))
      << dump.err;
}

TEST(TensorBoardWriterTest, TruncatedLastRecordIsReportedNotFatal) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  const std::string path = WriteRun(tmp.path() + "/run", 4);
  ASSERT_FALSE(path.empty());
  const std::string clean = ReadFile(path);
  const std::vector<size_t> offsets = RecordOffsets(clean);
  ASSERT_EQ(offsets.size(), 5u);
  // Cut inside the last record's data, then inside its header.
  for (size_t keep : {clean.size() - 3, offsets[4] + 7}) {
    WriteFile(path, clean.substr(0, keep));
    Dump dump = ReadWithPython(tmp.path());
    ASSERT_EQ(dump.exit_code, 0) << dump.err;
    EXPECT_EQ(dump.points.size(), 3u);
    ASSERT_EQ(dump.truncated.size(), 1u);
    EXPECT_EQ(dump.truncated[0][1], path);
    EXPECT_EQ(dump.truncated[0][2], absl::StrCat(offsets[4]));
  }
}

TEST(TensorBoardWriterTest, RunDirThatIsALinkIsRefused) {
  testing::TempDir tmp;
  const std::string elsewhere = tmp.path() + "/elsewhere";
  ASSERT_EQ(::mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(elsewhere.c_str(), (tmp.path() + "/run").c_str()), 0);
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(tmp.path() + "/run");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(w.status().message(), tmp.path() + "/run")) << w.status();
  EXPECT_TRUE(fs::is_empty(elsewhere));

  // Through a directory descriptor: a link at any level below it is refused.
  UniqueFd job(::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(job.valid());
  ASSERT_EQ(::symlink(elsewhere.c_str(), (tmp.path() + "/tensorboard").c_str()), 0);
  w = TensorBoardWriter::Open(job.get(), TensorBoardAttemptDir(1), "/shown/job");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(w.status().message(), "/shown/job/tensorboard/attempt-1")) << w.status();
  EXPECT_TRUE(fs::is_empty(elsewhere));

  EXPECT_EQ(TensorBoardWriter::Open(job.get(), "../x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorBoardWriter::Open(job.get(), "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorBoardWriter::Open(tmp.path() + "/..").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorBoardWriterTest, OpensBeneathADirectoryDescriptor) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  UniqueFd job(::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(job.valid());
  for (int attempt : {1, 2}) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w =
        TensorBoardWriter::Open(job.get(), TensorBoardAttemptDir(attempt), tmp.path());
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(absl::StartsWith((*w)->path(), tmp.path() + "/tensorboard/attempt-" + std::to_string(attempt) +
                                                   "/events.out.tfevents."))
        << (*w)->path();
    ASSERT_TRUE((*w)->AddScalar("train/loss", 10 * attempt, attempt, 1.7e9).ok());
  }
  struct stat st;
  ASSERT_EQ(::stat((tmp.path() + "/tensorboard/attempt-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, TensorBoardWriter::kDirMode);

  Dump dump = ReadWithPython(tmp.path());
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  ASSERT_EQ(dump.points.size(), 2u);
  EXPECT_EQ(dump.points[0].run, "tensorboard/attempt-1");
  EXPECT_EQ(dump.points[0].step, 10);
  EXPECT_EQ(dump.points[1].run, "tensorboard/attempt-2");
  EXPECT_EQ(dump.points[1].value, 2.0);
}

TEST(TensorBoardWriterTest, WritersInOneRunDirGetDistinctFiles) {
  if (!HavePython()) GTEST_SKIP() << "no python3 for the reader";
  testing::TempDir tmp;
  const std::string run_dir = tmp.path() + "/run";
  std::vector<std::unique_ptr<TensorBoardWriter>> writers;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> w = TensorBoardWriter::Open(run_dir);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->AddScalar("train/loss", i, i, 1.7e9).ok());
    writers.push_back(*std::move(w));
  }
  writers.clear();  // flushed on destruction
  const std::vector<std::string> files = EventsFiles(run_dir);
  ASSERT_EQ(files.size(), 3u);
  // Within one second the later names carry the pid (and a counter).
  if (files[0].size() < files[1].size()) {
    EXPECT_TRUE(absl::StrContains(files[1], absl::StrCat(".", ::getpid()))) << files[1];
  }
  Dump dump = ReadWithPython(run_dir);
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  EXPECT_EQ(dump.files.size(), 3u);
  EXPECT_EQ(dump.points.size(), 3u);
}

}  // namespace
}  // namespace llamafleet
