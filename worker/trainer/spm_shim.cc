// A C ABI over libsentencepiece, built as its own shared module and dlopen()ed by
// tokenizer.cc with RTLD_LOCAL | RTLD_DEEPBIND.
//
// Why: Debian's libsentencepiece.so embeds and exports its own copy of protobuf-lite.
// Linked into a process that also loads libprotobuf.so (LibTorch, the API protos), the
// two copies interpose each other's symbols and the process crashes during static
// initialisation. Loaded locally with deep binding, sentencepiece keeps to its own copy.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

extern "C" {

__attribute__((visibility("default"))) void* lf_spm_load(const char* path, char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  auto status = sp->Load(path);
  if (!status.ok()) {
    std::snprintf(err, err_len, "%s", status.ToString().c_str());
    delete sp;
    return nullptr;
  }
  return sp;
}

// The same from the bytes of a model file (a serialized ModelProto).
__attribute__((visibility("default"))) void* lf_spm_load_proto(const char* data, size_t len,
                                                               char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  auto status = sp->LoadFromSerializedProto(std::string_view(data, len));
  if (!status.ok()) {
    std::snprintf(err, err_len, "%s", status.ToString().c_str());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void lf_spm_free(void* h) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

// Encodes text; writes up to `cap` ids to `out` and returns the total count (call again
// with a larger buffer when it exceeds cap). Returns -1 on error.
__attribute__((visibility("default"))) int64_t lf_spm_encode(void* h, const char* text, size_t len,
                                                             int32_t* out, int64_t cap) {
  std::vector<int> ids;
  auto status = static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(
      std::string_view(text, len), &ids);
  if (!status.ok()) return -1;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < n && i < cap; ++i) out[i] = ids[i];
  return n;
}

// Decodes ids (out-of-range ones skipped); writes up to `cap` bytes to `out` and returns
// the total size (call again with a larger buffer when it exceeds cap). -1 on error.
__attribute__((visibility("default"))) int64_t lf_spm_decode(void* h, const int32_t* ids, int64_t n,
                                                             char* out, int64_t cap) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  std::vector<int> v;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < sp->GetPieceSize()) v.push_back(ids[i]);
  }
  std::string text;
  if (!sp->Decode(v, &text).ok()) return -1;
  std::memcpy(out, text.data(), std::min<size_t>(text.size(), static_cast<size_t>(cap)));
  return static_cast<int64_t>(text.size());
}

__attribute__((visibility("default"))) int32_t lf_spm_info(void* h, int what) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  switch (what) {
    case 0: return sp->bos_id();
    case 1: return sp->eos_id();
    case 2: return sp->GetPieceSize();
    default: return -1;
  }
}

}  // extern "C"
