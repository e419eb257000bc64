#include "worker/inventory.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/usable_cpus.h"
#include "worker/bounded_command.h"

namespace llamafleet::worker {
namespace {

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  for (absl::string_view f : absl::StrSplit(line, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(f));
  }
  return out;
}

double Number(const std::string& s) {
  double v = 0;
  return absl::SimpleAtod(s, &v) ? v : 0;
}

}  // namespace

bool HaveNvidiaSmi() {
  static const bool have = OnPath("nvidia-smi");
  return have;
}

std::vector<v1::Gpu> DetectGpus() {
  std::vector<v1::Gpu> gpus;
  if (!HaveNvidiaSmi()) return gpus;
  const CommandOutput out = RunBoundedCommand(
      {"nvidia-smi", "--query-gpu=index,name,memory.total,uuid", "--format=csv,noheader,nounits"},
      absl::Seconds(30));
  if (!out.ok()) return gpus;
  for (absl::string_view line : absl::StrSplit(out.out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = Fields(std::string(line));
    if (f.size() < 4) continue;
    v1::Gpu gpu;
    gpu.set_index(static_cast<int>(Number(f[0])));
    gpu.set_model(f[1]);
    gpu.set_memory_bytes(static_cast<int64_t>(Number(f[2]) * 1024 * 1024));  // MiB
    gpu.set_uuid(f[3]);
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

int CountEfaDevices(const std::string& sysfs_root) {
  std::error_code ec;
  int efa = 0;
  for (const auto& entry : std::filesystem::directory_iterator(sysfs_root, ec)) {
    if (entry.path().filename().string().rfind("efa", 0) == 0) ++efa;
  }
  return efa;
}

void DetectHost(v1::Inventory* inventory) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) inventory->set_host(host);
  inventory->set_cpus(UsableCpus());
  inventory->set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
}

}  // namespace llamafleet::worker
