// Single-thread encoding speed of the trainer's tokenizers on the equivalence corpus
// (tests/trainer/fixtures/tokenizers), document by document as the token cache encodes
// records: MB/s of UTF-8 text, the first pass (empty piece cache) and the median of the
// next five. Compare with tests/trainer/fixtures/tokenizers/bench_reference.py (HF
// tokenizers and tiktoken on the same documents), run right before or after on the same
// machine.
//
//   tokenizer_bench [TOKENIZER...]   # default: the llama3_style tokenizer.json fixture
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer.h"
#include "tokenizer_corpus.h"

using namespace llamafleet::trainer;

namespace {

double Pass(const Tokenizer& tok, const std::vector<std::string>& docs, size_t* ids) {
  const auto start = std::chrono::steady_clock::now();
  *ids = 0;
  for (const std::string& d : docs) {
    auto r = tok.Encode(d);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      std::exit(1);
    }
    *ids += r->size();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths(argv + 1, argv + argc);
  if (paths.empty()) paths.push_back(TokenizerFixtureDir() + "/llama3_style");
  auto docs = TokenizerCorpus(1, size_t{1} << 20);
  if (!docs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(docs.status().message()).c_str());
    return 1;
  }
  size_t bytes = 0;
  for (const std::string& d : *docs) bytes += d.size();
  std::printf("corpus: %zu documents, %.2f MB (seed 1), one thread\n", docs->size(), bytes / 1e6);
  for (const std::string& path : paths) {
    auto tok = Tokenizer::Load(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
      return 1;
    }
    size_t ids = 0;
    const double cold = Pass(**tok, *docs, &ids);
    std::vector<double> warm;
    for (int i = 0; i < 5; ++i) warm.push_back(Pass(**tok, *docs, &ids));
    std::sort(warm.begin(), warm.end());
    std::printf("%-14s %-60s %8zu ids  first pass %6.2f MB/s  median of 5 %6.2f MB/s\n",
                std::string((*tok)->kind()).c_str(), path.c_str(), ids, bytes / 1e6 / cold,
                bytes / 1e6 / warm[2]);
  }
  return 0;
}
