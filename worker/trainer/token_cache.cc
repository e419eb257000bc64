#include "token_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bad_lines.h"
#include "common/safe_open.h"
#include "common/usable_cpus.h"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'L', 'F', 'T', 'O', 'K', 'v', '1', '\n'};
constexpr uint64_t kHeaderBytes = 64;
constexpr int kKeyVersion = 2;  // bump when the tokenization of a record or the key changes

// The data file, opened once. Everything the cache learns of it (its signature, its content
// key, the bytes it tokenizes) comes through this descriptor, so a file renamed over the
// path, or a link put there, after the open changes nothing this process reads.
struct DataFile {
  std::string path;  // for messages
  UniqueFd fd;
  struct stat st = {};
};

// Opens `path` as common/safe_open.h opens a file others may have put there: a regular file
// only, never waited on (a FIFO), checked on the descriptor. Links are followed, as every
// read of the job's data is (the trainer's path checks resolved them within the roots).
absl::StatusOr<DataFile> OpenDataFile(const std::string& path) {
  DataFile f;
  f.path = path;
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(AT_FDCWD, path, path, LastLink::kFollow);
  if (!fd.ok()) return fd.status();
  f.fd = std::move(*fd);
  if (::fstat(f.fd.get(), &f.st) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  return f;
}

// Reads up to `n` bytes at `offset` (fewer only at the end of the file).
absl::StatusOr<size_t> ReadAt(const DataFile& f, char* buf, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(f.fd.get(), buf + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::DataLossError(absl::StrCat(f.path, ": read error: ", std::strerror(errno)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// What identifies a file's current contents without reading it: device, inode, size and
// modification and change times (any write changes them), from its descriptor.
std::string StatSignature(const DataFile& f) {
  const struct stat& st = f.st;
  return absl::StrCat(f.path, " ", st.st_dev, " ", st.st_ino, " ", st.st_size, " ",
                      st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, " ", st.st_ctim.tv_sec, ".",
                      st.st_ctim.tv_nsec, "\n");
}

// For chat data, the renderer and the tokens that carry loss ("" otherwise, so the keys of
// the other formats stay as they were).
std::string ChatKey(const DataLoadOptions& l) {
  if ((l.format != DataFormat::kChat && l.format != DataFormat::kPreference) ||
      l.chat_template == nullptr)
    return "";
  const ChatTemplate& t = *l.chat_template;
  return absl::StrCat("chat ", static_cast<int>(t.family), " ", t.name, " dated ", t.dated_system,
                      t.dated_system ? absl::StrCat(" ", t.date) : "", " system ",
                      t.default_system.size(), ":", t.default_system, " train_on ",
                      static_cast<int>(l.train_on), "\n");
}

// The key is sha256(KeyPrefix, the data file's bytes, KeySuffix): the first says how records
// become tokens, the last which tokenizer (the digest of the bytes it was loaded from, not
// of a path read again).
std::string KeyPrefix(const DataLoadOptions& l) {
  return absl::StrCat("llamafleet-tokens ", kKeyVersion, " format ", static_cast<int>(l.format),
                      " bos ", l.bos_id, " eos ", l.eos_id, " vocab ", l.vocab_size,
                      " max_positions ", l.max_positions, "\n", ChatKey(l));
}
std::string KeySuffix(const DataLoadOptions& l) {
  if (l.format == DataFormat::kTokens || l.tokenizer == nullptr) return "";
  return absl::StrCat("tokenizer ", l.tokenizer->sha256(), "\n");
}

// The content key of the file's first st_size bytes (all of it, unless it grew since the
// open), read through its descriptor.
absl::StatusOr<std::string> ContentKey(const DataFile& f, const DataLoadOptions& l) {
  Sha256 h;
  const std::string prefix = KeyPrefix(l), suffix = KeySuffix(l);
  h.Update(prefix.data(), prefix.size());
  std::vector<char> buf(size_t{1} << 20);
  const uint64_t size = static_cast<uint64_t>(f.st.st_size);
  for (uint64_t offset = 0; offset < size;) {
    LF_ASSIGN_OR_RETURN(
        const size_t n,
        ReadAt(f, buf.data(), std::min<uint64_t>(buf.size(), size - offset), offset));
    if (n == 0) break;
    h.Update(buf.data(), n);
    offset += n;
  }
  h.Update(suffix.data(), suffix.size());
  return h.Hex();
}

// ".tmp-<host>-<pid>": unique among the live processes of every host that shares the cache
// directory (the entry lock keeps builders apart, unless the filesystem does not do flock).
std::string TmpSuffix(pid_t pid = ::getpid()) {
  char host[256] = "host";
  (void)::gethostname(host, sizeof(host) - 1);
  return absl::StrCat(".tmp-", host, "-", pid);
}

// Whether the temporary `name` of `entry` (<entry>.tmp-<host>-<pid>) is a dead builder's:
// one of this host's whose process is gone. Another host's is never judged (where flock
// does not reach across hosts, its builder may be writing it now).
bool DeadBuildersTemporary(const std::string& name, const std::string& entry) {
  const std::string mine = entry + TmpSuffix(0);  // "<entry>.tmp-<host>-0"
  const std::string prefix = mine.substr(0, mine.size() - 1);
  if (name.rfind(prefix, 0) != 0) return false;
  int pid = 0;
  if (!absl::SimpleAtoi(name.substr(prefix.size()), &pid) || pid <= 0) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// The content key, remembered in <dir>/<signature hash>.key so that a start whose files are
// unchanged does not read them again (a 1 GB dataset takes ~0.5 s to hash). A file whose
// signature changed while it was hashed is not remembered. The memo only saves reading:
// a build checks the key against the bytes it tokenizes.
absl::StatusOr<std::string> CacheKey(const DataFile& f, const TokenCacheOptions& o) {
  const std::string sig = KeyPrefix(o.load) + StatSignature(f) + KeySuffix(o.load);
  Sha256 h;
  h.Update(sig.data(), sig.size());
  const std::string memo = (fs::path(o.dir) / (h.Hex() + ".key")).string();
  if (absl::StatusOr<std::string> k = ReadFileToString(memo); k.ok() && k->size() == 64) return *k;
  LF_ASSIGN_OR_RETURN(std::string key, ContentKey(f, o.load));
  DataFile after;
  after.path = f.path;
  if (::fstat(f.fd.get(), &after.st) != 0 || StatSignature(after) != StatSignature(f)) return key;
  const std::string tmp = absl::StrCat(memo, TmpSuffix());
  if (WriteStringToFile(tmp, key).ok()) {
    std::error_code ec;
    fs::rename(tmp, memo, ec);
  }
  return key;
}

// One thread's share of a block: [begin, end), whole lines.
struct Chunk {
  const char* begin = nullptr;
  const char* end = nullptr;
  int64_t lines = 0;  // lines in the chunk (blank ones included), for global line numbers
  std::vector<int32_t> tokens;
  std::vector<uint8_t> target;
  std::vector<uint64_t> lengths;
  BadLines bad;  // numbered within the chunk (1-based)
};

void ParseChunk(const std::string& path, const DataLoadOptions& opt, Chunk& c, std::atomic<int64_t>& done) {
  const char* p = c.begin;
  int64_t since_report = 0;
  while (p < c.end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(c.end - p)));
    const char* line_end = nl ? nl : c.end;
    ++c.lines;
    const absl::string_view line(p, static_cast<size_t>(line_end - p));
    if (!IsBlankLine(line)) {
      // The path and a local line number; the caller rewrites the number.
      absl::StatusOr<std::vector<Sequence>> s = ParseRecordSequences(path, c.lines, line, opt);
      if (!s.ok()) c.bad.Add(c.lines, s.status());
      // After a bad line the build fails: the chunk only looks for more bad lines.
      if (!c.bad.empty()) {
        since_report += line_end - p + 1;
        p = line_end + 1;
        continue;
      }
      for (const Sequence& q : *s) {
        c.tokens.insert(c.tokens.end(), q.tokens.begin(), q.tokens.end());
        c.target.insert(c.target.end(), q.target.begin(), q.target.end());
        c.lengths.push_back(q.tokens.size());
      }
    }
    since_report += line_end - p + 1;
    if (since_report > (1 << 20)) {
      done += since_report;
      since_report = 0;
    }
    p = line_end + 1;
  }
  done += since_report;
}

// The records of a whole file, in file order, and where a build stands.
struct Tokenized {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> target;
  std::vector<uint64_t> lengths;  // tokens of each record
  int64_t lines = 0;              // lines so far, blank ones included
  BadLines bad;                   // numbered in the whole file
  std::atomic<int64_t> done{0};   // bytes parsed, for progress
  std::chrono::steady_clock::time_point last_report = std::chrono::steady_clock::now();
};

// Tokenizes the whole lines [data, data + n) on up to `threads` threads, in chunks of about
// equal bytes cut after a newline, and appends them to `out` in order. Bad lines are
// added to `out.bad`, numbered in the whole file; once there is one, records are no longer
// kept.
void TokenizeBlock(const std::string& path, const TokenCacheOptions& o, const char* data, size_t n,
                   int threads, int64_t total, Tokenized& out) {
  std::vector<Chunk> chunks(static_cast<size_t>(threads));
  const char* cur = data;
  for (int i = 0; i < threads; ++i) {
    Chunk& c = chunks[static_cast<size_t>(i)];
    c.bad = BadLines(path);
    c.begin = cur;
    const char* end = i + 1 == threads ? data + n : data + n * static_cast<size_t>(i + 1) / threads;
    if (end < cur) end = cur;
    if (end < data + n) {
      const char* nl =
          static_cast<const char*>(std::memchr(end, '\n', static_cast<size_t>(data + n - end)));
      end = nl ? nl + 1 : data + n;
    }
    c.end = end;
    cur = end;
  }
  std::mutex mu;
  std::condition_variable finished_cv;
  size_t finished = 0;  // guarded by mu
  std::vector<std::thread> workers;
  for (Chunk& c : chunks) {
    if (c.begin >= c.end) continue;
    workers.emplace_back([&, cp = &c] {
      ParseChunk(path, o.load, *cp, out.done);
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      finished_cv.notify_one();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!finished_cv.wait_until(lock, out.last_report + std::chrono::seconds(2),
                                   [&] { return finished == workers.size(); })) {
      if (o.progress) o.progress(std::min(out.done.load(), total), total);
      out.last_report = std::chrono::steady_clock::now();
    }
  }
  for (std::thread& t : workers) t.join();
  for (Chunk& c : chunks) {
    out.bad.Append(c.bad, out.lines);
    out.lines += c.lines;
    if (!out.bad.empty()) continue;
    out.tokens.insert(out.tokens.end(), c.tokens.begin(), c.tokens.end());
    out.target.insert(out.target.end(), c.target.begin(), c.target.end());
    out.lengths.insert(out.lengths.end(), c.lengths.begin(), c.lengths.end());
  }
}

// Reads the data file through its descriptor in blocks of whole lines, hashing every byte
// read and tokenizing exactly those bytes (never read twice), so the digest is of what was
// tokenized. ABORTED when that digest is not `key`: the file changed since the key was
// computed, and its tokens must not be stored under it. Bad lines (all of them, listed up
// to a bound) fail it only once the digest matched, so that a line is blamed only in the
// content the key names.
absl::StatusOr<std::unique_ptr<Tokenized>> TokenizeFile(const DataFile& f, const std::string& key,
                                                        const TokenCacheOptions& o) {
  const int threads = std::max(1, o.threads > 0 ? o.threads : UsableCpus());
  const uint64_t size = static_cast<uint64_t>(f.st.st_size);
  Sha256 h;
  const std::string prefix = KeyPrefix(o.load), suffix = KeySuffix(o.load);
  h.Update(prefix.data(), prefix.size());
  auto out = std::make_unique<Tokenized>();
  out->bad = BadLines(f.path);
  std::string buf;  // a line carried over from the last block, then the block read
  for (uint64_t offset = 0;;) {
    const size_t carried = buf.size();
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(std::max<size_t>(o.read_block_bytes, 1), size - offset));
    buf.resize(carried + want);
    LF_ASSIGN_OR_RETURN(const size_t got, ReadAt(f, buf.data() + carried, want, offset));
    buf.resize(carried + got);
    h.Update(buf.data() + carried, got);
    offset += got;
    const bool last = got < want || offset >= size;
    size_t cut = buf.size();
    if (!last) {
      const size_t nl = buf.rfind('\n');
      if (nl == std::string::npos) continue;  // a line longer than a block: read on
      cut = nl + 1;
    }
    TokenizeBlock(f.path, o, buf.data(), cut, threads, static_cast<int64_t>(size), *out);
    buf.erase(0, cut);
    if (last) break;
  }
  h.Update(suffix.data(), suffix.size());
  if (h.Hex() != key) {
    return absl::AbortedError(
        absl::StrCat(f.path,
                     ": changed while it was tokenized (its content is not what its "
                     "cache key was computed from); nothing was cached: run again once it "
                     "stays unchanged"));
  }
  LF_RETURN_IF_ERROR(out->bad.ToStatus());
  if (o.progress && size > 0) o.progress(static_cast<int64_t>(size), static_cast<int64_t>(size));
  return out;
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) {
      return absl::DataLossError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Tokenizes the data file (TokenizeFile) into `out_path` (a temporary name; the caller
// renames it).
absl::Status Build(const DataFile& data, const std::string& key, const TokenCacheOptions& o,
                   const std::string& out_path) {
  // Preference pairs may be token ids (a text or messages pair names the tokenizer it lacks).
  if (o.load.format != DataFormat::kTokens && o.load.format != DataFormat::kPreference &&
      o.load.tokenizer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        data.path, ": a tokenizer is required for text, prompt_completion and chat data"));
  }
  LF_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenized> t, TokenizeFile(data, key, o));
  const uint64_t sequences = t->lengths.size(), tokens = t->tokens.size();
  if (sequences == 0) {
    return absl::InvalidArgumentError(absl::StrCat(data.path, ": dataset is empty"));
  }

  std::vector<uint64_t> offsets;
  offsets.reserve(sequences + 1);
  offsets.push_back(0);
  for (uint64_t n : t->lengths) offsets.push_back(offsets.back() + n);
  Sha256 body;
  body.Update(offsets.data(), offsets.size() * sizeof(uint64_t));
  body.Update(t->tokens.data(), t->tokens.size() * sizeof(int32_t));
  body.Update(t->target.data(), t->target.size());
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, &sequences, 8);
  std::memcpy(header + 16, &tokens, 8);
  std::memcpy(header + 24, &kHeaderBytes, 8);
  const std::string digest = body.Raw();
  std::memcpy(header + 32, digest.data(), 32);

  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return absl::PermissionDeniedError(absl::StrCat(out_path, ": cannot create: ", std::strerror(errno)));
  absl::Status s = WriteAll(out, header, kHeaderBytes, out_path);
  if (s.ok()) s = WriteAll(out, offsets.data(), offsets.size() * sizeof(uint64_t), out_path);
  if (s.ok()) s = WriteAll(out, t->tokens.data(), t->tokens.size() * sizeof(int32_t), out_path);
  if (s.ok()) s = WriteAll(out, t->target.data(), t->target.size(), out_path);
  if (s.ok() && ::fsync(out) != 0) s = absl::DataLossError(absl::StrCat(out_path, ": fsync failed"));
  if (::close(out) != 0 && s.ok()) s = absl::DataLossError(absl::StrCat(out_path, ": close failed"));
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path) {
  std::unique_ptr<TokenFile> f(new TokenFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st;
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const size_t size = stat_ok ? static_cast<size_t>(st.st_size) : 0;
  if (size < kHeaderBytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a token file (", size, " bytes)"));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::DataLossError(absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
  f->map_ = map;
  f->map_bytes_ = size;
  const char* p = static_cast<const char*>(map);
  uint64_t s = 0, t = 0, h = 0;
  std::memcpy(&s, p + 8, 8);
  std::memcpy(&t, p + 16, 8);
  std::memcpy(&h, p + 24, 8);
  if (std::memcmp(p, kMagic, 8) != 0 || h != kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": not a token file (bad header)"));
  }
  // Sizes that cannot overflow the checks below (a file this big cannot be mapped anyway).
  if (s == 0 || s > (uint64_t{1} << 40) || t > (uint64_t{1} << 44) ||
      size != kHeaderBytes + (s + 1) * 8 + t * 5) {
    return absl::DataLossError(absl::StrCat(path, ": ", size, " bytes do not match its header (", s,
                                            " sequences, ", t, " tokens): truncated or damaged"));
  }
  f->offsets_ = reinterpret_cast<const uint64_t*>(p + kHeaderBytes);
  f->tokens_ = reinterpret_cast<const int32_t*>(p + kHeaderBytes + (s + 1) * 8);
  f->target_ = reinterpret_cast<const uint8_t*>(p + kHeaderBytes + (s + 1) * 8 + t * 4);
  if (f->offsets_[0] != 0 || f->offsets_[s] != t) return absl::DataLossError(absl::StrCat(path, ": bad offsets"));
  for (uint64_t i = 0; i < s; ++i) {
    if (f->offsets_[i + 1] <= f->offsets_[i]) {
      return absl::DataLossError(absl::StrCat(path, ": bad offsets at sequence ", i));
    }
  }
  f->num_sequences_ = static_cast<int64_t>(s);
  f->num_tokens_ = static_cast<int64_t>(t);
  return f;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

// Removes the least recently used entries of `dir` until they take at most `max_bytes`,
// passing over any that a process maps (its use lock is held: the caller's own entry too).
void EvictLeastRecentlyUsed(const std::string& dir, uint64_t max_bytes, TokenCacheResult& r) {
  struct Entry {
    std::string name;
    uint64_t bytes;
    struct timespec used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st;
    if (!absl::EndsWith(name, ".tokens") || ::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    entries.push_back({name, static_cast<uint64_t>(st.st_size), st.st_mtim});
    total += static_cast<uint64_t>(st.st_size);
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) < std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    const std::string use_path = (fs::path(dir) / (e.name.substr(0, e.name.size() - 7) + ".use")).string();
    const UniqueFd use(::open(use_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (use.valid() && ::flock(use.get(), LOCK_EX | LOCK_NB) == 0 &&
        ::unlink((fs::path(dir) / e.name).c_str()) == 0) {
      total -= e.bytes;
      ++r.evicted;
      r.evicted_bytes += e.bytes;
    }
  }
  r.kept_bytes = total;
}

absl::StatusOr<TokenCacheResult> OpenTokenCache(const std::string& data_path, const TokenCacheOptions& o) {
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  ::chmod(o.dir.c_str(), 0700);
  struct stat dst;
  if (::stat(o.dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(o.dir, ": token cache directory cannot be created"));
  }
  if (dst.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(o.dir, ": token cache directory is owned by uid ", dst.st_uid,
                                                    ", not this process's ", ::geteuid()));
  }
  LF_ASSIGN_OR_RETURN(const DataFile data, OpenDataFile(data_path));
  LF_ASSIGN_OR_RETURN(const std::string key, CacheKey(data, o));
  const std::string entry = key + ".tokens";
  const std::string path = (fs::path(o.dir) / entry).string();
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  // <key>.use: held shared while the file is mapped (an entry in use is never evicted).
  // <key>.lock: held exclusively to build (builders never wait for users).
  const std::string use_path = (fs::path(o.dir) / (key + ".use")).string();
  const std::string lock_path = (fs::path(o.dir) / (key + ".lock")).string();
  UniqueFd use(::open(use_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  // In a directory this process cannot write (a read-only mount), where nothing can be
  // removed either, an entry without a use lock is mapped unlocked.
  if (!use.valid()) use = UniqueFd(::open(use_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (use.valid() && ::flock(use.get(), LOCK_SH) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(use_path, ": cannot lock"));
  }
  TokenCacheResult r;
  auto mapped = [&](std::unique_ptr<TokenFile> f) {  // the file keeps the use lock
    f->use_fd_ = std::move(use);
    r.file = std::move(f);
    return std::move(r);
  };
  if (auto f = TokenFile::Open(path); f.ok()) {
    (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used
    r.hit = true;
    r.built_meanwhile = !existed;
    return mapped(std::move(*f));
  }
  // One builder per entry; the others wait here and then map its file.
  const UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(lock_path, ": cannot open and lock"));
  }
  if (auto f = TokenFile::Open(path); f.ok()) {
    r.hit = true;
    r.built_meanwhile = true;
    return mapped(std::move(*f));
  }
  // A builder killed mid-write left its temporary: removed before building anew.
  for (const auto& e : fs::directory_iterator(o.dir, ec)) {
    if (DeadBuildersTemporary(e.path().filename().string(), entry)) fs::remove(e.path(), ec);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tmp = absl::StrCat(path, TmpSuffix());
  if (o.before_build_for_test) o.before_build_for_test();
  absl::Status built = Build(data, key, o, tmp);
  if (!built.ok()) {
    fs::remove(tmp, ec);
    return built;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::DataLossError(absl::StrCat(path, ": cannot rename into place: ", ec.message()));
  }
  if (int dfd = ::open(o.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  LF_ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> f, TokenFile::Open(path));
  r.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.max_bytes > 0) EvictLeastRecentlyUsed(o.dir, o.max_bytes, r);
  return mapped(std::move(f));
}

absl::StatusOr<TokenRows> TokenRows::Create(std::shared_ptr<const TokenFile> file,
                                            BatchingMode batching, int64_t seq_len,
                                            const std::string& source) {
  TokenRows r;
  r.batching_ = batching;
  r.seq_len_ = seq_len;
  if (batching == BatchingMode::kPacking) {
    if (file->num_tokens() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens to pack"));
    }
    // PackSequences' next fit over the sequences' lengths: `used` tokens of the open row.
    r.row_begin_.push_back(0);
    int64_t used = 0;
    for (int64_t s = 0; s < file->num_sequences(); ++s) {
      const int64_t lo = file->sequence_begin(s), n = file->sequence_end(s) - lo;
      if (used > 0 && n > seq_len - used) {
        r.row_begin_.push_back(lo);
        used = 0;
      }
      int64_t i = 0;
      for (; n - i > seq_len; i += seq_len) r.row_begin_.push_back(lo + i + seq_len);
      used += n - i;
      if (used == seq_len) {
        r.row_begin_.push_back(lo + n);
        used = 0;
      }
    }
    if (used > 0) r.row_begin_.push_back(file->num_tokens());
    r.rows_ = static_cast<int64_t>(r.row_begin_.size()) - 1;
  } else {
    for (int64_t s = 0; s < file->num_sequences(); ++s) {
      const int64_t n = file->sequence_end(s) - file->sequence_begin(s);
      if (n > seq_len) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": record ", s + 1, " has ", n,
                                                       " tokens, longer than seq_len ", seq_len,
                                                       " (padding batching)"));
      }
    }
    r.rows_ = file->num_sequences();
  }
  r.file_ = std::move(file);
  return r;
}

std::pair<int64_t, int64_t> TokenRows::Span(int64_t row) const {
  if (batching_ == BatchingMode::kPacking) return {row_begin_[row], row_begin_[row + 1]};
  return {file_->sequence_begin(row), file_->sequence_end(row)};
}

std::vector<int32_t> TokenRows::Documents(int64_t begin, int64_t end) const {
  // The first sequence that starts after `begin` (offsets are monotonic: TokenFile::Open).
  int64_t lo = 0, hi = file_->num_sequences();
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (file_->sequence_begin(mid) <= begin) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  std::vector<int32_t> docs;
  int64_t start = begin;
  for (int64_t s = lo; s < file_->num_sequences() && file_->sequence_begin(s) < end; ++s) {
    if (file_->sequence_begin(s) > start)
      docs.push_back(static_cast<int32_t>(file_->sequence_begin(s) - start));
    start = file_->sequence_begin(s);
  }
  docs.push_back(static_cast<int32_t>(end - start));
  return docs;
}

absl::StatusOr<Batch> TokenRows::MakeBatch(const std::vector<int64_t>& indices, int32_t pad_id,
                                           int64_t vocab_size) const {
  Batch b;
  b.rows = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    const auto [lo, hi] = Span(i);
    b.seq_len = std::max(b.seq_len, hi - lo);
  }
  b.tokens.assign(b.rows * b.seq_len, pad_id);
  b.target.assign(b.rows * b.seq_len, 0);
  std::vector<std::vector<int32_t>> documents(b.rows);
  for (int64_t r = 0; r < b.rows; ++r) {
    const auto [lo, hi] = Span(indices[r]);
    for (int64_t t = lo; t < hi; ++t) {
      const int32_t id = file_->tokens()[t];
      if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat(file_->path(), ": token id ", id,
                         " is outside the vocabulary (a damaged token cache file)"));
      }
      b.tokens[r * b.seq_len + (t - lo)] = id;
      b.target[r * b.seq_len + (t - lo)] = file_->target()[t] ? 1 : 0;
    }
    b.real_tokens += hi - lo;
    if (batching_ == BatchingMode::kPacking) documents[r] = Documents(lo, hi);
  }
  SetDocuments(documents, &b);
  return b;
}

std::string DefaultTokenCacheDir() {
  if (const char* d = std::getenv("LLAMAFLEET_TOKEN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "llamafleet" / "tokens").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "llamafleet" / "tokens").string();
  return absl::StrCat("/tmp/llamafleet-tokens-", ::geteuid());
}

}  // namespace llamafleet::trainer
