#include "tokenizer_corpus.h"

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace llamafleet::trainer {

namespace {

struct Rng {
  uint64_t x;
  uint64_t Next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
};

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The code points of a UTF-8 string (the fragments are well-formed).
std::vector<std::string> Characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string Part(Rng& rng, const nlohmann::json& f, const std::vector<std::string>& latin) {
  auto pick = [&](const char* key) { return f[key][rng.Below(f[key].size())].get<std::string>(); };
  const uint64_t kind = rng.Below(9);
  std::string s;
  if (kind <= 1) return pick("text");
  if (kind == 2) {
    for (uint64_t n = 1 + rng.Below(12); n > 0; --n) s += latin[rng.Below(latin.size())];
    return s;
  }
  if (kind == 3) {
    const nlohmann::json& r = f["ranges"][rng.Below(f["ranges"].size())];
    const uint64_t lo = r[0].get<uint64_t>(), hi = r[1].get<uint64_t>();
    for (uint64_t n = 1 + rng.Below(8); n > 0; --n)
      AppendUtf8(static_cast<uint32_t>(lo + rng.Below(hi - lo + 1)), &s);
    return s;
  }
  if (kind == 4) {
    for (uint64_t n = 1 + rng.Below(4); n > 0; --n) s += pick("whitespace");
    return s;
  }
  if (kind == 5) {
    uint64_t p = 1;
    for (uint64_t e = 1 + rng.Below(12); e > 0; --e) p *= 10;
    return std::to_string(rng.Below(p));
  }
  if (kind == 6) return pick("special");
  return pick("code");
}

}  // namespace

std::string TokenizerFixtureDir() { return LLAMAFLEET_TOKENIZER_FIXTURES; }

absl::StatusOr<std::vector<std::string>> TokenizerCorpus(uint64_t seed, size_t total_bytes) {
  std::ifstream in(TokenizerFixtureDir() + "/corpus_fragments.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json f = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (f.is_discarded()) return absl::NotFoundError("cannot read corpus_fragments.json");
  const std::vector<std::string> latin = Characters(f["latin"].get<std::string>());
  Rng rng{seed == 0 ? 1 : seed};
  std::vector<std::string> docs;
  size_t size = 0;
  static const char* const kSeparators[] = {"", " ", " ", "\n"};
  while (size < total_bytes) {
    std::string doc;
    for (uint64_t n = 1 + rng.Below(60); n > 0; --n) {
      doc += Part(rng, f, latin);
      doc += kSeparators[rng.Below(4)];
    }
    size += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace llamafleet::trainer
