#include "sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "gguf_vocab.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

struct ShimApi {
  void* (*load)(const char*, size_t, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int64_t (*encode)(void*, const char*, size_t, int32_t*, int64_t) = nullptr;
  int32_t (*info)(void*, int) = nullptr;
  int64_t (*decode)(void*, const int32_t*, int64_t, char*, int64_t) = nullptr;
  std::string error;
};

std::string ExecutableDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

const ShimApi& Shim() {
  static ShimApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("LLAMAFLEET_SPM_SHIM"); env && *env)
      candidates.push_back(env);
    candidates.push_back(ExecutableDir() + "/libllamafleet_spm.so");
    candidates.push_back("libllamafleet_spm.so");
    void* lib = nullptr;
    std::string errors;
    for (const std::string& c : candidates) {
      lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib) break;
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", ::dlerror());
    }
    if (!lib) {
      api.error =
          absl::StrCat("cannot load the SentencePiece module libllamafleet_spm.so: ", errors);
      return;
    }
    api.load = reinterpret_cast<decltype(api.load)>(::dlsym(lib, "lf_spm_load_proto"));
    api.free = reinterpret_cast<decltype(api.free)>(::dlsym(lib, "lf_spm_free"));
    api.encode = reinterpret_cast<decltype(api.encode)>(::dlsym(lib, "lf_spm_encode"));
    api.info = reinterpret_cast<decltype(api.info)>(::dlsym(lib, "lf_spm_info"));
    api.decode = reinterpret_cast<decltype(api.decode)>(::dlsym(lib, "lf_spm_decode"));
    if (!api.load || !api.free || !api.encode || !api.info || !api.decode) {
      api.error = "libllamafleet_spm.so lacks the lf_spm_* entry points";
    }
  });
  return api;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> SentencePieceTokenizer::FromBytes(
    const std::string& path, const std::string& bytes) {
  const ShimApi& api = Shim();
  if (!api.error.empty()) return absl::FailedPreconditionError(api.error);
  char err[1024] = {0};
  void* h = api.load(bytes.data(), bytes.size(), err, sizeof err);
  if (!h) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load SentencePiece model: ", err));
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->handle_ = h;
  t->path_ = path;
  Sha256 digest;
  digest.Update(bytes.data(), bytes.size());
  t->sha256_ = digest.Hex();
  t->bos_ = api.info(h, 0);
  t->eos_ = api.info(h, 1);
  t->vocab_ = api.info(h, 2);
  t->SetStopIds({});
  std::vector<std::pair<std::string, int32_t>> controls;
  if (t->bos_ >= 0) controls.emplace_back("<s>", t->bos_);
  if (t->eos_ >= 0) controls.emplace_back("</s>", t->eos_);
  // Every other control piece too (Mistral v3's [INST], [/INST], [TOOL_CALLS], ...), as
  // Hugging Face's conversion of the model makes them special tokens. The library has
  // read the model already; where this stricter reader cannot, BOS and EOS remain.
  GgufVocab pieces;
  if (ParseSentencePiecePieces(bytes, path, &pieces).ok()) {
    for (size_t id = 0; id < pieces.tokens.size(); ++id) {
      const std::string& piece = pieces.tokens[id];
      if (pieces.token_types[id] != static_cast<int32_t>(GgufTokenType::kControl) ||
          piece.empty() || piece == "<s>" || piece == "</s>") {
        continue;
      }
      controls.emplace_back(piece, static_cast<int32_t>(id));
    }
  }
  t->SetTemplateTokens(std::move(controls));
  return t;
}

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_) Shim().free(handle_);
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids(text.size() + 16);
  int64_t n = Shim().encode(handle_, text.data(), text.size(), ids.data(),
                            static_cast<int64_t>(ids.size()));
  if (n > static_cast<int64_t>(ids.size())) {
    ids.resize(n);
    n = Shim().encode(handle_, text.data(), text.size(), ids.data(), n);
  }
  if (n < 0) return absl::InvalidArgumentError("SentencePiece cannot encode the text");
  ids.resize(n);
  return ids;
}

std::string SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out(ids.size() * 8 + 16, '\0');
  int64_t n = Shim().decode(handle_, ids.data(), static_cast<int64_t>(ids.size()), out.data(),
                            static_cast<int64_t>(out.size()));
  if (n > static_cast<int64_t>(out.size())) {
    out.resize(n);
    n = Shim().decode(handle_, ids.data(), static_cast<int64_t>(ids.size()), out.data(), n);
  }
  out.resize(n < 0 ? 0 : n);
  return out;
}

}  // namespace llamafleet::trainer
