#include "tokenizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/safe_open.h"
#include "model_file.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

struct ShimApi {
  void* (*load)(const char*, size_t, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int64_t (*encode)(void*, const char*, size_t, int32_t*, int64_t) = nullptr;
  int32_t (*info)(void*, int) = nullptr;
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
    if (const char* env = std::getenv("LLAMAFLEET_SPM_SHIM"); env && *env) candidates.push_back(env);
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
      api.error = absl::StrCat("cannot load the SentencePiece module libllamafleet_spm.so: ", errors);
      return;
    }
    api.load = reinterpret_cast<decltype(api.load)>(::dlsym(lib, "lf_spm_load_proto"));
    api.free = reinterpret_cast<decltype(api.free)>(::dlsym(lib, "lf_spm_free"));
    api.encode = reinterpret_cast<decltype(api.encode)>(::dlsym(lib, "lf_spm_encode"));
    api.info = reinterpret_cast<decltype(api.info)>(::dlsym(lib, "lf_spm_info"));
    if (!api.load || !api.free || !api.encode || !api.info) {
      api.error = "libllamafleet_spm.so lacks the lf_spm_* entry points";
    }
  });
  return api;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  const ShimApi& api = Shim();
  if (!api.error.empty()) return absl::FailedPreconditionError(api.error);
  // Read once, bounded, and loaded from these bytes: the digest names what was loaded.
  LF_ASSIGN_OR_RETURN(const std::string bytes, ReadModelFile(path, kMaxTokenizerFileBytes));
  char err[1024] = {0};
  void* h = api.load(bytes.data(), bytes.size(), err, sizeof err);
  if (!h) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot load SentencePiece model: ", err));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->handle_ = h;
  t->path_ = path;
  Sha256 digest;
  digest.Update(bytes.data(), bytes.size());
  t->sha256_ = digest.Hex();
  t->bos_ = api.info(h, 0);
  t->eos_ = api.info(h, 1);
  t->vocab_ = api.info(h, 2);
  return t;
}

Tokenizer::~Tokenizer() {
  if (handle_) Shim().free(handle_);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids(text.size() + 16);
  int64_t n = Shim().encode(handle_, text.data(), text.size(), ids.data(), static_cast<int64_t>(ids.size()));
  if (n > static_cast<int64_t>(ids.size())) {
    ids.resize(n);
    n = Shim().encode(handle_, text.data(), text.size(), ids.data(), n);
  }
  ids.resize(n < 0 ? 0 : n);
  return ids;
}

}  // namespace llamafleet::trainer
