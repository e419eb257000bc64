// What the worker reads of its GPUs' health (worker/gpu_health_parse.h): nvidia-smi's CSV,
// dcgmi dmon's table, kernel log records and the test-only fake file, each fed the whole
// input. Properties: every bound holds (at most kMaxGpus GPUs, indices in range), a PCI
// address is normalized once and for all, and an XID read from a kernel line is positive.
#include "fuzz_check.h"
#include "worker/gpu_health_parse.h"

using namespace llamafleet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = fuzz::AbslText(data, size);
  const std::vector<worker::NvidiaSmiGpu> gpus = worker::ParseNvidiaSmiHealth(text);
  FUZZ_CHECK(gpus.size() <= static_cast<size_t>(worker::kMaxGpus), "%zu GPUs", gpus.size());
  for (const worker::NvidiaSmiGpu& g : gpus) {
    FUZZ_CHECK(g.sample.index() >= 0 && g.sample.index() <= worker::kMaxGpuIndex, "index %d", g.sample.index());
    FUZZ_CHECK(g.sample.memory_used_bytes() >= 0 && g.sample.gpu_util() >= 0, "a negative reading");
    FUZZ_CHECK(!g.sample.has_ecc_uncorrected_volatile() || g.sample.ecc_uncorrected_volatile() >= 0, "ECC < 0");
    FUZZ_CHECK(worker::NormalizePciAddress(g.pci) == g.pci, "not normalized: %s", g.pci.c_str());
  }
  const std::map<int, int64_t> xids = worker::ParseDcgmiXids(text);
  FUZZ_CHECK(xids.size() <= static_cast<size_t>(worker::kMaxGpus), "%zu DCGM rows", xids.size());
  for (const auto& [gpu, xid] : xids) FUZZ_CHECK(gpu >= 0 && gpu <= worker::kMaxGpuIndex && xid >= 0, "row %d", gpu);
  const std::string pci = worker::NormalizePciAddress(text);
  FUZZ_CHECK(pci.empty() || worker::NormalizePciAddress(pci) == pci, "not idempotent: %s", pci.c_str());
  if (std::optional<worker::KernelXid> x = worker::ParseKernelXid(text)) {
    FUZZ_CHECK(x->xid > 0 && !x->pci.empty(), "XID %lld on '%s'", static_cast<long long>(x->xid), x->pci.c_str());
  }
  absl::StatusOr<std::vector<worker::FakeGpuEvent>> fake = worker::ParseGpuHealthFake(text);
  if (fake.ok()) {
    FUZZ_CHECK(fake->size() <= static_cast<size_t>(worker::kMaxGpus), "%zu fake events", fake->size());
    for (const worker::FakeGpuEvent& e : *fake) FUZZ_CHECK(e.gpu >= 0 && e.gpu <= worker::kMaxGpuIndex, "gpu %d", e.gpu);
  }
  return 0;
}
