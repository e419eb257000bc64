// The coordinator's heap on huge pages (server/huge_page_heap.h): with tcmalloc linked,
// new heap memory comes from the huge-page regions, is correct (no two allocations
// overlap), is faulted in ahead by the background thread, and requests too large for a
// region go to tcmalloc's own allocator. Built like the coordinator: tcmalloc linked when
// the build links it there.
#include "server/huge_page_heap.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace llamafleet {
namespace {

// MADV_POPULATE_WRITE came with Linux 5.14.
bool KernelCanPopulate() {
  utsname u{};
  if (uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 14);
}

std::string AnonHugePages() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) return line;
  }
  return "AnonHugePages: (unknown)";
}

// Declared first: runs before the heap is installed in this process.
TEST(HugePageHeapTest, LlamafleetHugePagesZeroLeavesTheHeapAlone) {
  setenv("LLAMAFLEET_HUGE_PAGES", "0", 1);
  const std::string line = InstallHugePageHeap();
  unsetenv("LLAMAFLEET_HUGE_PAGES");
  EXPECT_NE(line.find("4 KiB pages"), std::string::npos) << line;
  EXPECT_FALSE(GetHugePageHeapStats().installed);
}

TEST(HugePageHeapTest, ServesTheHeapFromHugePageRegionsAndFaultsAhead) {
  const std::string line = InstallHugePageHeap();
  std::printf("%s\n", line.c_str());
#if !LLAMAFLEET_HUGE_PAGE_HEAP
  EXPECT_NE(line.find("not linked with tcmalloc"), std::string::npos) << line;
  EXPECT_FALSE(GetHugePageHeapStats().installed);
  GTEST_SKIP() << "built without tcmalloc";
#else
  const std::string thp = TransparentHugePages();
  if (thp.empty() || thp == "never") {
    EXPECT_FALSE(GetHugePageHeapStats().installed) << line;
    GTEST_SKIP() << "transparent huge pages are off here: " << thp;
  }
  ASSERT_TRUE(GetHugePageHeapStats().installed) << line;
  const HugePageHeapStats before = GetHugePageHeapStats();

  // ~200 MB of small objects, each filled with its own index, then all read back: an
  // allocator handing out overlapping memory would show here.
  constexpr size_t kCount = 400000, kSize = 500;
  rusage usage_before{};
  getrusage(RUSAGE_THREAD, &usage_before);
  std::vector<std::unique_ptr<uint32_t[]>> blocks;
  blocks.reserve(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    blocks.emplace_back(new uint32_t[kSize / sizeof(uint32_t)]);
    for (size_t j = 0; j < kSize / sizeof(uint32_t); ++j) blocks.back()[j] = static_cast<uint32_t>(i);
  }
  rusage usage_after{};
  getrusage(RUSAGE_THREAD, &usage_after);
  size_t wrong = 0;
  for (size_t i = 0; i < kCount; ++i) {
    for (size_t j = 0; j < kSize / sizeof(uint32_t); ++j) wrong += blocks[i][j] != i;
  }
  EXPECT_EQ(wrong, 0u);

  // Larger than half a region: tcmalloc's own allocator, and still usable.
  constexpr size_t kLarge = size_t{40} << 20;
  std::unique_ptr<char[]> large(new char[kLarge]);
  std::memset(large.get(), 0x5a, kLarge);
  EXPECT_EQ(large[kLarge - 1], 0x5a);

  const HugePageHeapStats after = GetHugePageHeapStats();
  EXPECT_GE(after.handed_out_bytes - before.handed_out_bytes, uint64_t{150} << 20);
  EXPECT_GE(after.regions - before.regions, 2u);
  EXPECT_GE(after.fallback_calls - before.fallback_calls, 1u);
  if (KernelCanPopulate()) {
    // The background thread runs behind the allocations; give it a moment to catch up.
    HugePageHeapStats now = after;
    for (int i = 0; i < 200 && now.prefaulted_bytes < (uint64_t{16} << 20); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      now = GetHugePageHeapStats();
    }
    EXPECT_GE(now.prefaulted_bytes, uint64_t{16} << 20);
    // What it says it faulted in is in memory (mincore: resident pages).
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    // (Empty only when what tcmalloc took ends within the region's last 2 MiB.)
    const size_t pages = (now.ahead_end - now.ahead_begin) / page;
    std::vector<unsigned char> resident(pages);
    ASSERT_EQ(mincore(reinterpret_cast<void*>(now.ahead_begin), pages * page, resident.data()), 0)
        << std::strerror(errno);
    size_t absent = 0;
    for (unsigned char r : resident) absent += (r & 1) == 0;
    EXPECT_EQ(absent, 0u) << "of " << pages << " pages ahead";
  }
  std::printf("heap: %llu MiB in %llu regions, %llu MiB faulted in ahead, %llu fallback calls; "
              "this thread's page faults writing %zu MB: %ld (4 KiB pages would be %zu); %s\n",
              static_cast<unsigned long long>(after.handed_out_bytes >> 20),
              static_cast<unsigned long long>(after.regions),
              static_cast<unsigned long long>(GetHugePageHeapStats().prefaulted_bytes >> 20),
              static_cast<unsigned long long>(after.fallback_calls), kCount * kSize >> 20,
              usage_after.ru_minflt - usage_before.ru_minflt, kCount * kSize / 4096,
              AnonHugePages().c_str());
#endif
}

}  // namespace
}  // namespace llamafleet
