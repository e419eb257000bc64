// The token cache (worker/trainer/token_cache.h) against the in-memory path it replaces
// (data.h: LoadJsonl, PackSequences, CheckPaddingRows, MakeBatch): the same rows, the same
// batches, the same errors; reuse, rebuild of a damaged entry, one builder at a time.
#include "token_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "data.h"
#include "tests/testing/process.h"
#include "tokenizer.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;

class TokenCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    data_ = dir_ + "/d.jsonl";
    std::mt19937 rng(3);
    std::ofstream out(data_);
    for (int i = 0; i < 500; ++i) {
      if (i % 37 == 5) out << "\n";  // blank lines are skipped, not records
      out << "{\"input_ids\": [";
      const int n = 1 + static_cast<int>(rng() % 60);
      for (int t = 0; t < n; ++t) out << (t ? ", " : "") << rng() % 1000;
      out << "]}\n";
    }
  }
  TokenCacheOptions Options(int threads) const {
    TokenCacheOptions o;
    o.dir = dir_ + "/cache";
    o.load.format = DataFormat::kTokens;
    o.load.vocab_size = 1000;
    o.load.max_positions = 64;
    o.threads = threads;
    return o;
  }

  ::llamafleet::testing::TempDir tmp_;
  std::string dir_, data_;
};

void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.real_tokens, b.real_tokens);
}

TEST_F(TokenCacheTest, RowsAndBatchesEqualTheInMemoryPath) {
  DataLoadOptions lo = Options(1).load;
  auto seqs = LoadJsonl(data_, lo);
  ASSERT_TRUE(seqs.ok()) << seqs.status();
  // Read in one block, or in blocks that cut lines (carried to the next block) or hold less
  // than a line (read on until one ends).
  for (const auto& [threads, block] :
       {std::pair<int, size_t>{1, 64 << 20}, {3, 64 << 20}, {8, 64 << 20}, {3, 1000}, {2, 7}}) {
    SCOPED_TRACE(absl::StrCat(threads, " threads, blocks of ", block));
    fs::remove_all(dir_ + "/cache");
    TokenCacheOptions o = Options(threads);
    o.read_block_bytes = block;
    auto cached = OpenTokenCache(data_, o);
    ASSERT_TRUE(cached.ok()) << cached.status();
    EXPECT_FALSE(cached->hit);
    std::shared_ptr<const TokenFile> file = std::move(cached->file);
    EXPECT_EQ(file->num_sequences(), static_cast<int64_t>(seqs->size()));

    const std::vector<Sequence> packed = PackSequences(*seqs, 48);
    auto rows = TokenRows::Create(file, BatchingMode::kPacking, 48, data_);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->size(), static_cast<int64_t>(packed.size()));
    // Records of 1..60 tokens in rows of 48: some rows hold several documents, some records
    // are cut; the batches' positions and cleared document starts match too.
    ASSERT_TRUE(std::any_of(packed.begin(), packed.end(), [](const Sequence& r) { return r.documents.size() > 2; }));
    auto padded = TokenRows::Create(file, BatchingMode::kPadding, 64, data_);
    ASSERT_TRUE(padded.ok()) << padded.status();
    ASSERT_EQ(padded->size(), static_cast<int64_t>(seqs->size()));
    std::mt19937 rng(threads + block);
    for (int k = 0; k < 50; ++k) {
      std::vector<int64_t> a = {static_cast<int64_t>(rng() % packed.size()), static_cast<int64_t>(rng() % packed.size())};
      ExpectSameBatch(*rows->MakeBatch(a, 0, 1000), MakeBatch(packed, a, 0));
      std::vector<int64_t> b = {static_cast<int64_t>(rng() % seqs->size()), static_cast<int64_t>(rng() % seqs->size()),
                                static_cast<int64_t>(rng() % seqs->size())};
      ExpectSameBatch(*padded->MakeBatch(b, 0, 1000), MakeBatch(*seqs, b, 0));
    }
    // Padding's length rule, with CheckPaddingRows' message.
    auto too_long = TokenRows::Create(file, BatchingMode::kPadding, 10, data_);
    ASSERT_FALSE(too_long.ok());
    EXPECT_EQ(too_long.status().message(), CheckPaddingRows(*seqs, 10, data_).message());
  }
}

TEST_F(TokenCacheTest, SecondOpenIsAHitAndAChangedFileIsANewEntry) {
  auto first = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->hit);
  EXPECT_EQ(second->file->path(), first->file->path());
  // Other limits are another key.
  TokenCacheOptions other = Options(2);
  other.load.max_positions = 4096;
  auto third = OpenTokenCache(data_, other);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NE(third->file->path(), first->file->path());
  // Changed contents: a new entry.
  { std::ofstream(data_, std::ios::app) << "{\"input_ids\": [1, 2, 3]}\n"; }
  auto changed = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(changed->hit);
  EXPECT_EQ(changed->file->num_sequences(), first->file->num_sequences() + 1);
}

TEST_F(TokenCacheTest, MalformedLineNamesFileAndLineAndLeavesNothing) {
  // Line numbers count every line, blank ones too, across the build threads' chunks and the
  // blocks read.
  std::vector<std::string> lines;
  { std::ifstream in(data_); for (std::string l; std::getline(in, l);) lines.push_back(l); }
  lines[400] = "{\"input_ids\": [1, \"x\"]}";
  { std::ofstream out(data_); for (const std::string& l : lines) out << l << "\n"; }
  auto expected = LoadJsonl(data_, Options(1).load);
  ASSERT_FALSE(expected.ok());
  EXPECT_NE(expected.status().message().find(":401: "), std::string::npos) << expected.status();
  for (const auto& [threads, block] :
       {std::pair<int, size_t>{1, 64 << 20}, {4, 64 << 20}, {2, 500}}) {
    TokenCacheOptions o = Options(threads);
    o.read_block_bytes = block;
    auto r = OpenTokenCache(data_, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), expected.status().message()) << threads << " " << block;
  }
  for (const auto& e : fs::directory_iterator(dir_ + "/cache")) {
    EXPECT_EQ(e.path().string().find(".tokens"), std::string::npos) << e.path();
  }
}

TEST_F(TokenCacheTest, EveryBadLineIsNamedAsTheInMemoryPathNamesThem) {
  // 30 bad lines spread over the threads' chunks and the blocks read: the same list (the
  // first 20 in file order, then a count) as LoadJsonl's, and no entry.
  std::vector<std::string> lines;
  { std::ifstream in(data_); for (std::string l; std::getline(in, l);) lines.push_back(l); }
  for (size_t i = 3; i < lines.size() && i < 3 + 30 * 16; i += 16) lines[i] = "{\"input_ids\": [1, \"x\"]}";
  { std::ofstream out(data_); for (const std::string& l : lines) out << l << "\n"; }
  auto expected = LoadJsonl(data_, Options(1).load);
  ASSERT_FALSE(expected.ok());
  EXPECT_NE(expected.status().message().find(": 30 bad lines:\n"), std::string::npos) << expected.status();
  EXPECT_NE(expected.status().message().find("... and 10 more"), std::string::npos) << expected.status();
  for (const auto& [threads, block] : {std::pair<int, size_t>{1, 64 << 20}, {4, 64 << 20}, {3, 700}}) {
    TokenCacheOptions o = Options(threads);
    o.read_block_bytes = block;
    auto r = OpenTokenCache(data_, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), expected.status().message()) << threads << " " << block;
  }
  for (const auto& e : fs::directory_iterator(dir_ + "/cache")) {
    EXPECT_EQ(e.path().string().find(".tokens"), std::string::npos) << e.path();
  }
}

TEST_F(TokenCacheTest, DamagedEntryIsRebuilt) {
  auto first = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string path = first->file->path();
  first->file.reset();
  fs::resize_file(path, fs::file_size(path) - 7);
  EXPECT_EQ(TokenFile::Open(path).status().code(), absl::StatusCode::kDataLoss);
  auto again = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->hit);
  EXPECT_TRUE(TokenFile::Open(path).ok());
}

TEST_F(TokenCacheTest, ADeadBuildersTemporaryIsRemovedByTheNextBuild) {
  auto first = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string path = first->file->path();
  first->file.reset();
  fs::remove(path);
  // What a builder of this host killed mid-write leaves (a child that has exited: its pid
  // is no live process's). Another host's temporary is left alone: where flock does not
  // reach across hosts, its builder may be writing it.
  char host[256] = "host";
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = path + ".tmp-" + host + "-" + std::to_string(dead);
  const std::string others = path + ".tmp-otherhost-12345";
  { std::ofstream(stale) << std::string(4096, 'x'); }
  { std::ofstream(others) << std::string(4096, 'x'); }
  auto again = OpenTokenCache(data_, Options(2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->hit);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(others));
  fs::remove(others);
  for (const auto& e : fs::directory_iterator(dir_ + "/cache")) {
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

// A dataset of its own (its own entry), about `records` x 30 tokens.
std::string WriteDataset(const std::string& path, int seed, int records) {
  std::mt19937 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < records; ++i) {
    out << "{\"input_ids\": [";
    for (int t = 0; t < 30; ++t) out << (t ? ", " : "") << rng() % 1000;
    out << "]}\n";
  }
  return path;
}

TEST_F(TokenCacheTest, ABoundRemovesTheLeastRecentlyUsedEntriesThatNoRunMaps) {
  TokenCacheOptions o = Options(1);
  std::vector<std::string> data;
  for (int i = 0; i < 5; ++i) data.push_back(WriteDataset(dir_ + "/d" + std::to_string(i) + ".jsonl", i, 100));
  auto open = [&](int i) {
    auto r = OpenTokenCache(data[i], o);
    EXPECT_TRUE(r.ok()) << r.status();
    // Distinct modification times, whatever the filesystem's timestamp granularity.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return r.ok() ? std::move(*r) : TokenCacheResult{};
  };
  TokenCacheResult a = open(0);  // kept mapped: in use by "a run"
  const uint64_t entry = fs::file_size(a.file->path());
  std::string paths[5];
  paths[0] = a.file->path();
  for (int i = 1; i < 3; ++i) paths[i] = open(i).file->path();  // built, then unmapped
  // A hit makes entry 1 more recent than entry 2.
  EXPECT_TRUE(open(1).hit);
  // Room for three entries: the fourth build removes the least recently used entry that
  // nobody maps (2: 1 was hit since), not the older one in use (0).
  o.max_bytes = 3 * entry + entry / 2;
  TokenCacheResult d = open(3);
  paths[3] = d.file->path();
  EXPECT_FALSE(d.hit);
  EXPECT_EQ(d.evicted, 1);
  EXPECT_EQ(d.evicted_bytes, entry);
  EXPECT_TRUE(fs::exists(paths[0]));
  EXPECT_TRUE(fs::exists(paths[1]));
  EXPECT_FALSE(fs::exists(paths[2]));
  EXPECT_TRUE(fs::exists(paths[3]));
  // Once unmapped, the old entry goes first.
  a.file.reset();
  TokenCacheResult e = open(4);
  EXPECT_EQ(e.evicted, 1);
  EXPECT_FALSE(fs::exists(paths[0]));
  EXPECT_TRUE(fs::exists(paths[1]));
  EXPECT_TRUE(fs::exists(paths[3]));
  // An evicted entry is built again on its next use, with the same rows.
  auto again = OpenTokenCache(data[0], o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->hit);
  EXPECT_EQ(again->file->num_sequences(), 100);
}

TEST_F(TokenCacheTest, AnEntryAnotherProcessMapsIsNotRemoved) {
  TokenCacheOptions o = Options(1);
  const std::string first = WriteDataset(dir_ + "/first.jsonl", 1, 100);
  const std::string second = WriteDataset(dir_ + "/second.jsonl", 2, 100);
  ASSERT_TRUE(OpenTokenCache(first, o).ok());
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // maps the first entry until told to stop
    auto r = OpenTokenCache(first, o);
    char c = r.ok() && r->hit ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    (void)!::read(done[0], &c, 1);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  o.max_bytes = 1;  // no room at all
  auto r = OpenTokenCache(second, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->evicted, 0);
  EXPECT_EQ(r->kept_bytes, fs::file_size(r->file->path()) * 2) << "both stay, over the bound: both in use";
  EXPECT_GT(fs::file_size(r->file->path()), 0u);
  (void)!::write(done[1], "x", 1);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  // The child is gone: the next build may remove the first entry (the second is mapped here).
  const std::string third = WriteDataset(dir_ + "/third.jsonl", 3, 100);
  auto t = OpenTokenCache(third, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->evicted, 1);
  EXPECT_TRUE(fs::exists(r->file->path()));
  for (int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
}

// Every token of an entry, in order, and the same of the in-memory path.
std::vector<int32_t> EntryTokens(const TokenFile& f) {
  return {f.tokens(), f.tokens() + f.num_tokens()};
}
std::vector<int32_t> JsonlTokens(const std::string& path, const DataLoadOptions& o) {
  std::vector<int32_t> all;
  auto seqs = LoadJsonl(path, o);
  EXPECT_TRUE(seqs.ok()) << seqs.status();
  for (const Sequence& s : seqs.ok() ? *seqs : std::vector<Sequence>()) {
    all.insert(all.end(), s.tokens.begin(), s.tokens.end());
  }
  return all;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// bob owns a data file alice trains on and swaps its content between the moment her run
// computes the entry's key and the moment it tokenizes (the report timed it with inotify;
// the hook times it here), by renaming another file over it or by rewriting it in place.
// Whatever her run gets, no entry holds tokens other than those of the content its key
// names: her private clean copy, opened later, gets the clean tokens, never bob's.
TEST_F(TokenCacheTest, AContentSwapBetweenKeyAndBuildNeverPoisonsAnEntry) {
  const std::string clean = Contents(data_);
  const std::string poison = WriteDataset(dir_ + "/poison.jsonl", 9, 1828);
  const std::vector<int32_t> clean_tokens = JsonlTokens(data_, Options(1).load);
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "rewritten in place" : "renamed over");
    fs::remove_all(dir_ + "/cache");
    { std::ofstream(data_, std::ios::trunc | std::ios::binary) << clean; }
    TokenCacheOptions o = Options(2);
    o.before_build_for_test = [&] {
      if (in_place) {
        std::ofstream(data_, std::ios::trunc | std::ios::binary) << Contents(poison);
      } else {
        fs::copy_file(poison, data_ + ".new", fs::copy_options::overwrite_existing);
        fs::rename(data_ + ".new", data_);
      }
    };
    auto run = OpenTokenCache(data_, o);
    if (run.ok()) {
      EXPECT_EQ(EntryTokens(*run->file), clean_tokens)
          << "the run got tokens other than its key's content";
    } else {
      EXPECT_EQ(run.status().code(), absl::StatusCode::kAborted) << run.status();
      EXPECT_NE(run.status().message().find(data_ + ": changed while it was tokenized"),
                std::string::npos)
          << run.status();
    }
    const std::string copy = dir_ + "/alice-copy.jsonl";
    { std::ofstream(copy, std::ios::trunc | std::ios::binary) << clean; }
    auto later = OpenTokenCache(copy, Options(2));
    ASSERT_TRUE(later.ok()) << later.status();
    EXPECT_EQ(later->file->num_sequences(), 500) << "a clean copy got the swapped-in rows";
    EXPECT_EQ(EntryTokens(*later->file), clean_tokens);
  }
}

// The same with the tokenizer: bob swaps the tokenizer.model a job names after the job
// loaded it. The entry holds the tokens of the tokenizer that was loaded, so its key is of
// those bytes: a run that loads bob's model cleanly must not hit it.
TEST_F(TokenCacheTest, ATokenizerSwappedAfterItWasLoadedDoesNotNameTheEntry) {
  if (std::system("command -v spm_train >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "spm_train is not installed";
  }
  {
    std::ofstream corpus(dir_ + "/corpus.txt");
    for (int i = 0; i < 200; ++i) {
      corpus << "the quick brown fox " << i << " jumps over the lazy dog\n";
    }
  }
  for (const auto& [name, vocab] : {std::pair<std::string, int>{"a", 40}, {"b", 60}}) {
    const std::string cmd =
        "spm_train --minloglevel=2 --input=" + dir_ + "/corpus.txt --model_prefix=" + dir_ + "/" +
        name + " --model_type=bpe --vocab_size=" + std::to_string(vocab) + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  { std::ofstream(data_, std::ios::trunc) << "{\"text\": \"the quick brown fox jumps\"}\n"; }
  auto options = [&](const Tokenizer* t) {
    TokenCacheOptions o = Options(1);
    o.load.format = DataFormat::kText;
    o.load.tokenizer = t;
    o.load.vocab_size = 64;
    return o;
  };
  const std::string named = dir_ + "/tokenizer.model";
  fs::copy_file(dir_ + "/a.model", named);
  auto loaded = Tokenizer::Load(named);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  fs::copy_file(dir_ + "/b.model", named, fs::copy_options::overwrite_existing);  // the swap
  auto run = OpenTokenCache(data_, options(loaded->get()));
  ASSERT_TRUE(run.ok()) << run.status();
  auto bobs = Tokenizer::Load(dir_ + "/b.model");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  auto clean = OpenTokenCache(data_, options(bobs->get()));
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_FALSE(clean->hit) << "an entry of one tokenizer's tokens was found under another's key";
  DataLoadOptions b = options(bobs->get()).load;
  EXPECT_EQ(EntryTokens(*clean->file), JsonlTokens(data_, b));
}

TEST_F(TokenCacheTest, ConcurrentOpenersBuildOnce) {
  std::vector<absl::StatusOr<TokenCacheResult>> results;
  for (int i = 0; i < 4; ++i) results.emplace_back(absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { results[i] = OpenTokenCache(data_, Options(1)); });
  for (std::thread& t : threads) t.join();
  int built = 0;
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    built += r->hit ? 0 : 1;
    if (!r->hit) {
      EXPECT_FALSE(r->built_meanwhile);
    }
  }
  EXPECT_EQ(built, 1);
  // A later opener finds the entry at once: a plain hit.
  auto later = OpenTokenCache(data_, Options(1));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_TRUE(later->hit);
  EXPECT_FALSE(later->built_meanwhile);
}

}  // namespace
}  // namespace llamafleet::trainer
