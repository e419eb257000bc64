#ifndef LLAMAFLEET_SERVER_HUGE_PAGE_HEAP_H_
#define LLAMAFLEET_SERVER_HUGE_PAGE_HEAP_H_
// Where the coordinator's heap gets its memory from the kernel (issue 13).
//
// The coordinator's heap grows with the queue it keeps in memory (~2.8 KB per queued job:
// the job, its scheduler entry). Each new 4 KiB page is a page fault the first time it
// is touched, and under a stream of submissions those faults came at ~0.7 per
// acknowledged submission, ~4% of the coordinator's CPU on a VM where a fault is dear,
// mostly inside tcmalloc while it holds a size class's lock.
//
// With tcmalloc linked (see the top-level CMakeLists.txt), InstallHugePageHeap makes it
// take new memory from 64 MiB regions aligned to 2 MiB and marked MADV_HUGEPAGE, so the
// kernel backs them with transparent huge pages where it can (one fault per 2 MiB), and
// a background thread ("lf-heap-fault") faults in the 16 MiB ahead of what tcmalloc has
// taken (MADV_POPULATE_WRITE), so no request waits for a 2 MiB page to be zeroed. The
// cost: up to 16 MiB more resident memory than the heap uses. Requests for more than
// 32 MiB at once, and a kernel that refuses, go to tcmalloc's own system allocator.
//
// Not installed when tcmalloc is not linked, when the kernel's transparent huge pages
// are off ("never"), or when LLAMAFLEET_HUGE_PAGES=0.
#include <cstdint>
#include <string>

namespace llamafleet {

// The kernel's transparent huge pages setting: "always", "madvise" or "never" (the
// bracketed word of /sys/kernel/mm/transparent_hugepage/enabled); empty if unknown.
std::string TransparentHugePages();

// Installs it if it can; returns a line for the log saying whether it did and why.
// Call once, early in main, before the heap grows much.
std::string InstallHugePageHeap();

struct HugePageHeapStats {
  bool installed = false;
  uint64_t regions = 0;           // 64 MiB regions reserved
  uint64_t handed_out_bytes = 0;  // given to tcmalloc
  uint64_t prefaulted_bytes = 0;  // faulted in ahead by the background thread
  uint64_t fallback_calls = 0;    // requests sent to tcmalloc's own allocator
  // Addresses [ahead_begin, ahead_end): the range of the current region past what
  // tcmalloc has taken that the background thread has faulted in (for tests).
  uintptr_t ahead_begin = 0, ahead_end = 0;
};
HugePageHeapStats GetHugePageHeapStats();

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_HUGE_PAGE_HEAP_H_
