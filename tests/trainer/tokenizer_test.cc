// The tokenizers against the reference implementations' ids (fixtures made by
// tests/trainer/fixtures/tokenizers/make_fixtures.py with HF tokenizers and tiktoken), and
// hostile tokenizer files.
#include "tokenizer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"
#include "tokenizer_corpus.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::ReadFile;
using nlohmann::json;

std::string IdsDigest(const std::vector<int32_t>& ids) {
  Sha256 h;
  h.Update(ids.data(), ids.size() * sizeof(int32_t));  // little-endian, as the reference packs them
  return h.Hex();
}

// Encodes the reference's corpus document by document and compares with its digests;
// names the first documents that differ, with their text.
void ExpectReferenceIds(const Tokenizer& tok, const std::string& reference_file) {
  const json ref = json::parse(ReadFile(TokenizerFixtureDir() + "/" + reference_file));
  auto docs = TokenizerCorpus(ref["seed"].get<uint64_t>(), ref["min_bytes"].get<size_t>());
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), ref["documents"].get<size_t>())
      << "the C++ corpus differs from corpus.py's";
  Sha256 all;
  size_t count = 0, bytes = 0;
  int reported = 0;
  for (size_t i = 0; i < docs->size(); ++i) {
    auto ids = tok.Encode((*docs)[i]);
    ASSERT_TRUE(ids.ok()) << ids.status();
    all.Update(ids->data(), ids->size() * sizeof(int32_t));
    count += ids->size();
    bytes += (*docs)[i].size();
    if (i < ref["sample"].size()) {
      EXPECT_EQ(*ids, ref["sample"][i].get<std::vector<int32_t>>()) << "document " << i;
    }
    if (IdsDigest(*ids).substr(0, 16) != ref["document_digests"][i].get<std::string>() &&
        reported++ < 3) {
      ADD_FAILURE() << reference_file << ": document " << i
                    << " encodes differently: " << json((*docs)[i]).dump();
    }
  }
  EXPECT_GE(bytes, size_t{1} << 20);
  EXPECT_EQ(count, ref["ids"].get<size_t>());
  EXPECT_EQ(all.Hex(), ref["ids_sha256"].get<std::string>());
  EXPECT_EQ(reported, 0);
  // What was encoded decodes to the text.
  for (size_t i = 0; i < 200 && i < docs->size(); ++i) {
    EXPECT_EQ(tok.Decode(*tok.Encode((*docs)[i])), (*docs)[i]) << "document " << i;
  }
}

TEST(TokenizerTest, Llama3StyleTokenizerJsonMatchesHfTokenizers) {
  auto tok = Tokenizer::Load(TokenizerFixtureDir() + "/llama3_style");  // the directory
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.kind(), "tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 3261);
  EXPECT_EQ(t.bos_id(), 3256);  // the template's <|begin_of_text|>
  EXPECT_EQ(t.eos_id(), 3260);  // tokenizer_config.json's <|eot_id|>
  EXPECT_EQ(t.stop_ids(), (std::vector<int32_t>{3257, 3260}));  // generation_config.json
  ExpectReferenceIds(t, "llama3_style_reference.json");
}

TEST(TokenizerTest, Gpt2StyleTokenizerJsonMatchesHfTokenizers) {
  auto tok = Tokenizer::Load(TokenizerFixtureDir() + "/gpt2_style/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 3256);
  EXPECT_EQ((*tok)->eos_id(), 3260);  // after $A in the template
  ExpectReferenceIds(**tok, "gpt2_style_reference.json");
}

TEST(TokenizerTest, SpecialTokenStringsInTextAreText) {
  auto tok = Tokenizer::Load(TokenizerFixtureDir() + "/llama3_style");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("a<|eot_id|>b<|begin_of_text|>");
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) EXPECT_LT(id, 3256);
  EXPECT_EQ((*tok)->Decode({3256}), "<|begin_of_text|>");
  EXPECT_FALSE((*tok)->Encode("bad \xff byte").ok());
}

// npm's tiktoken package (cl100k_base's 100,256 ranks), from the cache or fetched by npm.
std::string Cl100kRanksJson() {
  const char* cache = std::getenv("LLAMAFLEET_CACHE");
  const char* home = std::getenv("HOME");
  const std::string dir =
      (cache ? std::string(cache) : std::string(home ? home : "/root") + "/.cache/llamafleet") +
      "/npm";
  const std::string json_path = dir + "/x/package/encoders/cl100k_base.json";
  if (!fs::exists(json_path)) {
    const std::string cmd =
        "mkdir -p " + dir + "/x && cd " + dir +
        " && timeout 120 npm pack --silent tiktoken@1.0.22 >/dev/null 2>&1 && tar xzf "
        "tiktoken-1.0.22.tgz -C x package/encoders/cl100k_base.json";
    if (std::system(cmd.c_str()) != 0) return "";
  }
  return json_path;
}

TEST(TokenizerTest, TiktokenWithCl100kRanksMatchesTiktoken) {
  const std::string path = Cl100kRanksJson();
  if (path.empty())
    GTEST_SKIP() << "SKIPPED LOUDLY: npm's tiktoken@1.0.22 is neither cached nor fetchable";
  // js-tiktoken's packing: lines of "! offset token token ..." -> "token rank" lines.
  const json packed = json::parse(ReadFile(path));
  std::string ranks;
  std::istringstream lines(packed["bpe_ranks"].get<std::string>());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string bang, token;
    int64_t rank = 0;
    words >> bang >> rank;
    while (words >> token) ranks += token + " " + std::to_string(rank++) + "\n";
  }
  const json ref = json::parse(ReadFile(TokenizerFixtureDir() + "/tiktoken_cl100k_reference.json"));
  Sha256 h;
  h.Update(ranks.data(), ranks.size());
  ASSERT_EQ(h.Hex(), ref["ranks_sha256"].get<std::string>())
      << "not the ranks the reference ids were made from";
  const std::string file = ::testing::TempDir() + "/cl100k_base.tiktoken";
  { std::ofstream(file, std::ios::binary) << ranks; }
  auto tok = Tokenizer::Load(file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "tiktoken");
  EXPECT_EQ((*tok)->vocab_size(), 100256 + 256);
  EXPECT_EQ((*tok)->bos_id(), 100256);
  EXPECT_EQ((*tok)->eos_id(), 100257);
  EXPECT_EQ((*tok)->Decode({100256 + 9}), "<|eot_id|>");
  ExpectReferenceIds(**tok, "tiktoken_cl100k_reference.json");
}

// A tokenizer.json of a few tokens, with `edit` applied to its JSON.
absl::StatusOr<std::unique_ptr<Tokenizer>> SmallTokenizerJson(
    const std::function<void(json&)>& edit) {
  json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"!", 3}}},
        {"merges", json::array({"a b"})}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens", json::array()},
      {"post_processor", nullptr}};
  edit(j);
  return Tokenizer::FromBytes("t/tokenizer.json", j.dump(), "");
}

TEST(TokenizerTest, HostileTokenizerJsonFailsClearly) {
  auto ok = SmallTokenizerJson([](json&) {});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*(*ok)->Encode("abab!"), (std::vector<int32_t>{2, 2, 3}));

  auto unknown = SmallTokenizerJson([](json& j) { j["model"]["merges"] = json::array({"a zz"}); });
  EXPECT_NE(unknown.status().message().find("model.merges[0]: \"zz\" is not in model.vocab"),
            std::string::npos)
      << unknown.status();
  auto not_merged =
      SmallTokenizerJson([](json& j) { j["model"]["merges"] = json::array({"b a"}); });
  EXPECT_NE(not_merged.status().message().find("model.merges[0]"), std::string::npos)
      << not_merged.status();
  auto huge_id = SmallTokenizerJson([](json& j) { j["model"]["vocab"]["!"] = 1 << 29; });
  EXPECT_NE(huge_id.status().message().find("must be an id in [0, 4)"), std::string::npos)
      << huge_id.status();
  auto wordpiece = SmallTokenizerJson([](json& j) { j["model"]["type"] = "WordPiece"; });
  EXPECT_NE(wordpiece.status().message().find("model.type"), std::string::npos)
      << wordpiece.status();
  auto lowercase = SmallTokenizerJson([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; });
  EXPECT_NE(lowercase.status().message().find("normalizer: \"Lowercase\" is not supported"),
            std::string::npos)
      << lowercase.status();
  auto two = SmallTokenizerJson([](json& j) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  });
  EXPECT_NE(two.status().message().find("normalizer"), std::string::npos) << two.status();
  auto bad_regex = SmallTokenizerJson([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", "(a"}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  });
  EXPECT_NE(bad_regex.status().message().find("pre_tokenizer Split.pattern"), std::string::npos)
      << bad_regex.status();

  // A pattern that backtracks exponentially fails the text, in bounded time.
  auto catastrophic = SmallTokenizerJson([](json& j) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", "(a|aa)+$"}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  });
  ASSERT_TRUE(catastrophic.ok()) << catastrophic.status();
  const auto start = std::chrono::steady_clock::now();
  auto ids = (*catastrophic)->Encode(std::string(5000, 'a') + "!");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("limit"), std::string::npos) << ids.status();
  EXPECT_LT(seconds, 10.0);
}

// The process's peak resident set so far, in MB.
double PeakRssMb() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

TEST(TokenizerTest, AHugeTokenizerJsonIsRefusedBeforeItsTreeIsBuilt) {
  // 4M empty objects in 12 MB of text: their DOM would take 450 MB.
  std::string text = R"({"model": {"type": "BPE", "vocab": {}, "merges": [)";
  for (uint64_t i = 0; i <= kMaxTokenizerJsonValues; ++i) text += "{},";
  text += R"({}]}, "pre_tokenizer": {"type": "ByteLevel"}})";
  const double before = PeakRssMb();
  const auto start = std::chrono::steady_clock::now();
  auto t = Tokenizer::FromBytes("t/tokenizer.json", text, "");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "t/tokenizer.json: holds more than 4194304 JSON values");
  EXPECT_LT(PeakRssMb() - before, 100.0);
  EXPECT_LT(seconds, 10.0);

  // A vocabulary past the cap, within the values' bound.
  text = R"({"model": {"type": "BPE", "merges": [], "vocab": {)";
  for (int64_t i = 0; i <= kMaxTokenizerVocab; ++i) absl::StrAppend(&text, "\"", i, "\":0,");
  text.back() = '}';
  text += R"(}, "pre_tokenizer": {"type": "ByteLevel"}})";
  EXPECT_EQ(Tokenizer::FromBytes("t/tokenizer.json", text, "").status().message(),
            "t/tokenizer.json: model.vocab: has 1048577 entries; at most 1048576 are accepted");
}

TEST(TokenizerTest, HostileTiktokenFilesFailClearly) {
  auto load = [](const std::string& text) {
    return Tokenizer::FromBytes("t/tokenizer.model", text, "");
  };
  auto ok = load("YQ== 0\nYg== 1\nYWI= 2\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*(*ok)->Encode("abba"), (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ((*ok)->bos_id(), 3);
  EXPECT_NE(
      load("YQ== 0\nY!g== 1\n").status().message().find("t/tokenizer.model:2: malformed base64"),
      std::string::npos);
  EXPECT_NE(load("YQ== 0\nYg== 0\n").status().message().find("t/tokenizer.model:2:"),
            std::string::npos);
  EXPECT_NE(load("YQ== 0\nYg== 1073741823\n").status().message().find("out of range"),
            std::string::npos);
  EXPECT_NE(load("YQ== 0\nYg== 2\n\n\n").status().message().find("expected 0..1"),
            std::string::npos);
  EXPECT_NE(load("YQ== 0\nYg==\n").status().message().find("t/tokenizer.model:2:"),
            std::string::npos);
  // More lines than a vocabulary may hold: refused before a table is built.
  auto huge = load("YQ== 0\n" + std::string(kMaxTokenizerVocab + 1, '\n'));
  EXPECT_EQ(
      huge.status().message(),
      "t/tokenizer.model: more than 1048576 lines; a tiktoken file holds at most 1048576 ranks");
}

TEST(TokenizerTest, ADirectoryWithBothFilesTakesItsTokenizerModel) {
  // As Llama 2's and Mistral's Hugging Face directories hold them.
  const std::string dir = ::testing::TempDir() + "/both";
  fs::create_directories(dir);
  fs::copy_file(TokenizerFixtureDir() + "/llama3_style/tokenizer.json", dir + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  { std::ofstream(dir + "/tokenizer.model") << "YQ== 0\nYg== 1\n"; }
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "tiktoken");
  EXPECT_EQ((*tok)->path(), dir + "/tokenizer.model");
  fs::create_directories(dir + "/empty");
  EXPECT_EQ(Tokenizer::Load(dir + "/empty").status().message(),
            dir + "/empty has no tokenizer.model or tokenizer.json");
}

TEST(TokenizerTest, FileOfNoKnownKindNamesWhatWasExpected) {
  auto t = Tokenizer::FromBytes("m/tokenizer.model", "hello, I am not a tokenizer\n", "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(
      t.status().message().find("m/tokenizer.model: not a tokenizer: expected a tokenizer.json"),
      std::string::npos)
      << t.status();
  // A file over the cap is refused before it is read.
  const std::string big = ::testing::TempDir() + "/big.model";
  { std::ofstream(big) << "x"; }
  ASSERT_EQ(::truncate(big.c_str(), off_t{65} << 20), 0);
  auto huge = Tokenizer::Load(big);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find(big), std::string::npos) << huge.status();
  // So is a model directory's tokenizer.json over it.
  const std::string dir = ::testing::TempDir() + "/big-json";
  fs::create_directories(dir);
  { std::ofstream(dir + "/tokenizer.json") << "{"; }
  ASSERT_EQ(::truncate((dir + "/tokenizer.json").c_str(), off_t{65} << 20), 0);
  auto huge_json = Tokenizer::Load(dir);
  ASSERT_FALSE(huge_json.ok());
  EXPECT_NE(huge_json.status().message().find(dir + "/tokenizer.json"), std::string::npos)
      << huge_json.status();
  EXPECT_NE(huge_json.status().message().find("more than the 64.0 MiB"), std::string::npos)
      << huge_json.status();
}

}  // namespace
}  // namespace llamafleet::trainer
