#include "worker/inventory.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

std::vector<std::string> CommandLines(const std::string& command) {
  std::vector<std::string> lines;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>/dev/null").c_str(), "r"), pclose);
  if (pipe == nullptr) return lines;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) {
    std::string line(buffer.data());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

bool HaveNvidiaSmi() {
  static const bool have = [] {
    const char* path = std::getenv("PATH");
    if (path == nullptr) return false;
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (access((std::string(dir) + "/nvidia-smi").c_str(), X_OK) == 0) return true;
    }
    return false;
  }();
  return have;
}

std::vector<v1::Gpu> DetectGpus() {
  std::vector<v1::Gpu> gpus;
  if (!HaveNvidiaSmi()) return gpus;
  for (const std::string& line : CommandLines(
           "nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits")) {
    std::vector<std::string> f = Fields(line);
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

std::vector<v1::GpuSample> SampleGpus() {
  std::vector<v1::GpuSample> samples;
  if (!HaveNvidiaSmi()) return samples;
  for (const std::string& line : CommandLines(
           "nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,"
           "temperature.gpu,power.draw,clocks.sm --format=csv,noheader,nounits")) {
    std::vector<std::string> f = Fields(line);
    if (f.size() < 7) continue;
    v1::GpuSample s;
    s.set_index(static_cast<int>(Number(f[0])));
    s.set_gpu_util(Number(f[1]));
    s.set_mem_copy_util(Number(f[2]));
    s.set_memory_used_bytes(static_cast<int64_t>(Number(f[3]) * 1024 * 1024));
    s.set_temperature_c(Number(f[4]));
    s.set_power_w(Number(f[5]));
    s.set_sm_clock_mhz(Number(f[6]));
    samples.push_back(std::move(s));
  }
  return samples;
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
  inventory->set_cpus(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  inventory->set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
}

}  // namespace llamafleet::worker
