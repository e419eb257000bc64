#include "server/huge_page_heap.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#if LLAMAFLEET_HUGE_PAGE_HEAP
#include <gperftools/malloc_extension.h>
#endif

namespace llamafleet {
namespace {

std::atomic<bool> g_installed{false};
std::atomic<uint64_t> g_regions{0}, g_handed_out{0}, g_prefaulted{0}, g_fallback{0};

#if LLAMAFLEET_HUGE_PAGE_HEAP

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and fault on use
#endif

constexpr uintptr_t kHuge = uintptr_t{2} << 20;
constexpr uintptr_t kRegion = uintptr_t{64} << 20;
constexpr uintptr_t kAhead = uintptr_t{16} << 20;

uintptr_t AlignUp(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }

// tcmalloc calls Alloc with its page heap lock held, one call at a time: nothing here may
// allocate. The background thread reads the region under mu_ and faults outside it.
class HugePageAllocator : public SysAllocator {
 public:
  explicit HugePageAllocator(SysAllocator* fallback) : fallback_(fallback) {}

  void* Alloc(size_t size, size_t* actual_size, size_t alignment) override {
    if (alignment > kHuge || size > kRegion / 2 || failed_) return Fallback(size, actual_size, alignment);
    std::unique_lock<std::mutex> lock(mu_);
    uintptr_t at = AlignUp(next_, alignment);
    if (next_ == 0 || at + size > end_) {
      // MAP_NORESERVE: a reservation of address space; memory is committed as it is touched.
      void* p = mmap(nullptr, kRegion + kHuge, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        failed_ = true;
        lock.unlock();
        return Fallback(size, actual_size, alignment);
      }
      const uintptr_t base = AlignUp(reinterpret_cast<uintptr_t>(p), kHuge);
      (void)madvise(reinterpret_cast<void*>(base), kRegion, MADV_HUGEPAGE);
      base_ = base;
      end_ = base + kRegion;
      faulted_ = base;
      at = base;
      g_regions.fetch_add(1, std::memory_order_relaxed);
    }
    next_ = at + size;
    const bool wake = next_ + kAhead / 2 > faulted_;
    lock.unlock();
    if (wake) wake_.notify_one();
    g_handed_out.fetch_add(size, std::memory_order_relaxed);
    if (actual_size != nullptr) *actual_size = size;
    return reinterpret_cast<void*>(at);
  }

  // [first whole huge page not handed out, end of what is faulted in).
  std::pair<uintptr_t, uintptr_t> Ahead() {
    std::lock_guard<std::mutex> lock(mu_);
    return {AlignUp(next_, kHuge), faulted_};
  }

  // The background thread: keeps the kAhead bytes past what tcmalloc has taken faulted in.
  void FaultAhead() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return next_ != 0 && next_ + kAhead / 2 > faulted_ && faulted_ < end_; });
      const uintptr_t region = base_;
      const uintptr_t from = std::max(faulted_, AlignUp(next_, kHuge));
      const uintptr_t to = std::min(end_, AlignUp(next_ + kAhead, kHuge));
      if (from >= to) {
        faulted_ = std::max(faulted_, to);
        continue;
      }
      lock.unlock();
      // Faulting never changes what is in memory: pages tcmalloc already wrote stay as
      // they are. A kernel without MADV_POPULATE_WRITE answers EINVAL: faults happen on use.
      int error = 0;
      do {
        error = madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
      } while (error == EINTR);
      lock.lock();
      if (error != 0) return;  // nothing ahead is faulted any more; the heap works as before
      g_prefaulted.fetch_add(to - from, std::memory_order_relaxed);
      if (base_ == region) faulted_ = std::max(faulted_, to);
    }
  }

 private:
  void* Fallback(size_t size, size_t* actual_size, size_t alignment) {
    g_fallback.fetch_add(1, std::memory_order_relaxed);
    return fallback_->Alloc(size, actual_size, alignment);
  }

  SysAllocator* const fallback_;
  bool failed_ = false;  // under tcmalloc's lock
  std::mutex mu_;
  std::condition_variable wake_;
  uintptr_t base_ = 0, end_ = 0;  // the current region
  uintptr_t next_ = 0;            // the first byte not handed out
  uintptr_t faulted_ = 0;         // [AlignUp(next_), faulted_) is faulted in
};

HugePageAllocator* g_allocator = nullptr;  // set once, before g_installed

#endif  // LLAMAFLEET_HUGE_PAGE_HEAP

}  // namespace

std::string TransparentHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return line.substr(open + 1, close - open - 1);
}

std::string InstallHugePageHeap() {
#if LLAMAFLEET_HUGE_PAGE_HEAP
  if (const char* env = std::getenv("LLAMAFLEET_HUGE_PAGES"); env != nullptr && std::string(env) == "0") {
    return "heap: 4 KiB pages (LLAMAFLEET_HUGE_PAGES=0)";
  }
  const std::string thp = TransparentHugePages();
  if (thp.empty() || thp == "never") {
    return "heap: 4 KiB pages (the kernel's transparent huge pages are " +
           (thp.empty() ? std::string("not available") : "off: never") + ")";
  }
  static bool installed = false;
  if (installed) return "heap: huge pages (already installed)";
  installed = true;
  MallocExtension* m = MallocExtension::instance();
  // Never freed: tcmalloc keeps using it until the process ends.
  auto* allocator = new HugePageAllocator(m->GetSystemAllocator());
  g_allocator = allocator;
  std::thread([allocator] {
    pthread_setname_np(pthread_self(), "lf-heap-fault");
    allocator->FaultAhead();
  }).detach();
  m->SetSystemAllocator(allocator);
  g_installed = true;
  return "heap: transparent huge pages (" + thp +
         "), 64 MiB regions, 16 MiB faulted in ahead (LLAMAFLEET_HUGE_PAGES=0 turns this off)";
#else
  return "heap: 4 KiB pages (not linked with tcmalloc)";
#endif
}

HugePageHeapStats GetHugePageHeapStats() {
  HugePageHeapStats s;
  s.installed = g_installed.load();
  s.regions = g_regions.load();
  s.handed_out_bytes = g_handed_out.load();
  s.prefaulted_bytes = g_prefaulted.load();
  s.fallback_calls = g_fallback.load();
#if LLAMAFLEET_HUGE_PAGE_HEAP
  if (s.installed) std::tie(s.ahead_begin, s.ahead_end) = g_allocator->Ahead();
#endif
  return s;
}

}  // namespace llamafleet
