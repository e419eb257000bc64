// The memory the parsers of a model directory's files take per byte of what they parse:
// config.json (ParseConfigJson), a safetensors header (ParseSafetensorsHeader, no DOM), a
// model.safetensors.index.json (ParseSafetensorsIndex) and a checkpoint's manifest.json
// (ParseCheckpointManifest), each fed the whole input. Property: the peak of the bytes they
// hold allocated while parsing is at most kBytesPerByte x the input plus kSlack, whatever
// the input: a DOM of an unbounded "[[[[..." (85x) fails it.
//
// Allocations are counted by the sanitizer's malloc and free hooks under libFuzzer (ASan),
// and by a replaced operator new and delete in the plain replay build (what the parsers
// allocate goes through them: nlohmann's DOM, strings, vectors, maps).
#include <malloc.h>

#include <cstdlib>
#include <new>

#include "checkpoint_manifest.h"
#include "config.h"
#include "fuzz_check.h"
#include "safetensors.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LF_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define LF_FUZZ_ASAN 1
#endif

namespace {

// The parsers are single-threaded; another thread's allocation in a measured call (libFuzzer's
// own, rarely) only adds to the count, within kSlack.
int64_t g_live = 0;
int64_t g_peak = 0;

void Count(int64_t bytes) {
  g_live += bytes;
  if (g_live > g_peak) g_peak = g_live;
}

// The most a parser may hold: the worst shape within the nesting bound (an array of empty
// objects, "[{},{},...]", ~30x) with room to spare, and a constant for what any call takes
// (messages, small tables).
constexpr int64_t kBytesPerByte = 48;
constexpr int64_t kSlack = int64_t{64} << 10;

}  // namespace

#ifdef LF_FUZZ_ASAN
#include <sanitizer/allocator_interface.h>
namespace {
void OnMalloc(const volatile void*, size_t size) { Count(static_cast<int64_t>(size)); }
void OnFree(const volatile void* p) {
  Count(-static_cast<int64_t>(__sanitizer_get_allocated_size(const_cast<const void*>(p))));
}
const bool kHooked = __sanitizer_install_malloc_and_free_hooks(OnMalloc, OnFree) != 0;
}  // namespace
#else
void* operator new(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  Count(static_cast<int64_t>(malloc_usable_size(p)));
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  Count(-static_cast<int64_t>(malloc_usable_size(p)));
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }
namespace {
constexpr bool kHooked = true;
}  // namespace
#endif

namespace {

// Runs `parse` and checks what it held at its peak against the input's `size`.
template <typename F>
void Measure(const char* parser, size_t size, F parse) {
  const int64_t base = g_live;
  g_peak = g_live;
  parse();
  const int64_t peak = g_peak - base;
  FUZZ_CHECK(peak <= kBytesPerByte * static_cast<int64_t>(size) + kSlack,
             "%s held %lld bytes for %zu input bytes (%.1f per byte)", parser,
             static_cast<long long>(peak), size,
             static_cast<double>(peak) / static_cast<double>(size == 0 ? 1 : size));
}

}  // namespace

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FUZZ_CHECK(kHooked, "allocations are not counted");
  const absl::string_view text = llamafleet::fuzz::AbslText(data, size);
  const std::string copy(text);  // for the parsers that take a std::string, made before measuring
  Measure("ParseConfigJson", size, [&] { (void)ParseConfigJson(text, "config.json"); });
  Measure("ParseSafetensorsHeader", size, [&] {
    std::map<std::string, std::string> metadata;
    (void)ParseSafetensorsHeader(text, uint64_t{1} << 40, &metadata);
  });
  Measure("ParseSafetensorsIndex", size,
          [&] { (void)ParseSafetensorsIndex(copy, "model.safetensors.index.json"); });
  Measure("ParseCheckpointManifest", size,
          [&] { (void)ParseCheckpointManifest(copy, "manifest.json"); });
  return 0;
}
