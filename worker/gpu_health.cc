#include "worker/gpu_health.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/bounded_command.h"

namespace llamafleet::worker {
namespace {

// nvidia-smi rounds that must fail in a row before every GPU counts as gone (one slow
// answer under load is not a lost GPU).
constexpr int kSmiFailuresForGone = 2;
// Kernel log records read per round at most (the rest wait for the next round).
constexpr int kMaxKmsgRecords = 4096;
constexpr size_t kMaxFakeBytes = 4096;
// XIDs of a GPU each sample lists (GpuSample.recent_xids).
constexpr size_t kRecentXids = 8;

v1::GpuSample GoneSample(int index) {
  v1::GpuSample s;
  s.set_index(index);
  s.set_gone(true);
  return s;
}

}  // namespace

GpuHealthTracker::GpuHealthTracker(std::vector<int> gpus) : gpus_(std::move(gpus)) {}

void GpuHealthTracker::AddXid(int gpu, int64_t xid) {
  Xids& x = xids_[gpu];
  ++x.count;
  x.recent.push_back(xid);
  if (x.recent.size() > kRecentXids) x.recent.erase(x.recent.begin());
}

void GpuHealthTracker::SetXids(v1::GpuSample* sample) const {
  auto it = xids_.find(sample->index());
  if (it == xids_.end()) return;
  sample->set_xid_count(it->second.count);
  sample->set_xid_errors(it->second.recent.back());
  sample->clear_recent_xids();
  for (int64_t xid : it->second.recent) sample->add_recent_xids(xid);
}

std::vector<v1::GpuSample> GpuHealthTracker::Update(const GpuHealthReadings& r) {
  if (r.smi.has_value()) {
    for (const NvidiaSmiGpu& g : *r.smi) {
      if (!g.pci.empty()) gpu_of_pci_[g.pci] = g.sample.index();
    }
  }
  if (r.dcgm_xids.has_value()) {
    // DCGM keeps the last XID per GPU: a value that changed since the last read is one new
    // event. The first read is only the baseline (those XIDs predate this worker).
    for (const auto& [gpu, xid] : *r.dcgm_xids) {
      auto prev = dcgm_last_.find(gpu);
      const bool changed = prev == dcgm_last_.end() ? xid != 0 : prev->second != xid;
      if (dcgm_baseline_ && changed && xid != 0) AddXid(gpu, xid);
      dcgm_last_[gpu] = xid;
    }
    dcgm_baseline_ = true;
  }
  for (const KernelXid& x : r.kernel_xids) {
    auto it = gpu_of_pci_.find(x.pci);
    if (it == gpu_of_pci_.end()) {
      spdlog::warn("GPU health: XID {} on PCI {}, which is none of this worker's GPUs", x.xid, x.pci);
      continue;
    }
    AddXid(it->second, x.xid);
  }
  std::vector<v1::GpuSample> out;
  if (r.smi.has_value()) {
    smi_failures_ = 0;
    std::map<int, const v1::GpuSample*> by_index;
    for (const NvidiaSmiGpu& g : *r.smi) by_index[g.sample.index()] = &g.sample;
    for (int gpu : gpus_) {
      auto it = by_index.find(gpu);
      out.push_back(it == by_index.end() ? GoneSample(gpu) : *it->second);
    }
    last_good_ = out;
  } else if (++smi_failures_ >= kSmiFailuresForGone) {
    for (int gpu : gpus_) out.push_back(GoneSample(gpu));
  } else {
    out = last_good_;  // the previous round's (nothing before the first answer)
  }
  for (v1::GpuSample& s : out) SetXids(&s);
  return out;
}

std::vector<v1::GpuSample> GpuHealthTracker::WithFake(std::vector<v1::GpuSample> samples,
                                                      const std::optional<std::vector<FakeGpuEvent>>& fake) {
  std::set<std::string> lines;
  if (fake.has_value()) {
    for (const FakeGpuEvent& e : *fake) {
      auto it = std::find_if(samples.begin(), samples.end(),
                             [&](const v1::GpuSample& s) { return s.index() == e.gpu; });
      if (it == samples.end()) {
        v1::GpuSample s;
        s.set_index(e.gpu);
        samples.push_back(s);
        it = samples.end() - 1;
      }
      switch (e.kind) {
        case FakeGpuEvent::kXid:
          lines.insert(e.line);
          if (!fake_lines_.count(e.line)) AddXid(e.gpu, e.value);
          break;
        case FakeGpuEvent::kEcc:
          it->set_ecc_uncorrected_volatile(e.value);
          break;
        case FakeGpuEvent::kGone:
          *it = GoneSample(e.gpu);
          break;
        case FakeGpuEvent::kThrottle:
          it->set_clock_throttle_reasons(it->clock_throttle_reasons() | static_cast<uint64_t>(e.value));
          break;
      }
    }
  }
  fake_lines_ = std::move(lines);
  for (v1::GpuSample& s : samples) SetXids(&s);
  std::sort(samples.begin(), samples.end(),
            [](const v1::GpuSample& a, const v1::GpuSample& b) { return a.index() < b.index(); });
  return samples;
}

std::optional<std::vector<NvidiaSmiGpu>> QueryNvidiaSmiHealth(absl::Duration timeout) {
  const CommandOutput out = RunBoundedCommand(
      {"nvidia-smi", absl::StrCat("--query-gpu=", kNvidiaSmiHealthFields), "--format=csv,noheader,nounits"},
      timeout);
  if (!out.ok()) return std::nullopt;
  return ParseNvidiaSmiHealth(out.out);
}

GpuHealthMonitor::GpuHealthMonitor(GpuHealthOptions options)
    : options_(std::move(options)), tracker_(options_.gpus) {
  if (options_.gpus.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    sources_ = options_.fake_for_test.empty() ? "skipped: no GPU" : "no GPU; the test fake only";
    spdlog::info("GPU health: {}", sources_);
    return;
  }
  if (options_.background) thread_ = std::thread([this] { Loop(); });
}

GpuHealthMonitor::~GpuHealthMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (kmsg_fd_ >= 0) close(kmsg_fd_);
}

std::string GpuHealthMonitor::Sources() {
  std::lock_guard<std::mutex> lock(mu_);
  return sources_;
}

GpuHealthReadings GpuHealthMonitor::Collect() {
  GpuHealthReadings r;
  r.smi = QueryNvidiaSmiHealth(options_.command_timeout);
  const std::vector<std::string> dcgmi = {"dcgmi", "dmon", "-e", "230", "-c", "1"};
  if (xid_source_ == XidSource::kUnchosen) {
    std::string said;
    if (OnPath("dcgmi") && RunBoundedCommand(dcgmi, options_.command_timeout).ok()) {
      xid_source_ = XidSource::kDcgm;
      said = "XIDs from DCGM (dcgmi dmon -e 230)";
    } else if ((kmsg_fd_ = open(options_.kmsg_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) >= 0) {
      if (!options_.kmsg_from_start) lseek(kmsg_fd_, 0, SEEK_END);  // only what happens from now on
      xid_source_ = XidSource::kKernelLog;
      said = absl::StrCat("XIDs from the kernel log (", options_.kmsg_path, ")");
    } else {
      xid_source_ = XidSource::kNone;
      said = absl::StrCat("XIDs not watched (no dcgmi answering, ", options_.kmsg_path, " not readable)");
    }
    std::lock_guard<std::mutex> lock(mu_);
    sources_ = absl::StrCat("nvidia-smi every ", absl::FormatDuration(options_.interval), "; ", said);
    spdlog::info("GPU health: {}", sources_);
  }
  if (xid_source_ == XidSource::kDcgm) {
    const CommandOutput out = RunBoundedCommand(dcgmi, options_.command_timeout);
    if (out.ok()) r.dcgm_xids = ParseDcgmiXids(out.out);
  } else if (xid_source_ == XidSource::kKernelLog) {
    char record[8192];
    for (int i = 0; i < kMaxKmsgRecords; ++i) {
      const ssize_t n = read(kmsg_fd_, record, sizeof(record));
      if (n < 0 && errno == EPIPE) continue;  // records overwritten before we read them
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;                       // EAGAIN: nothing new
      if (std::optional<KernelXid> x = ParseKernelXid(absl::string_view(record, static_cast<size_t>(n)))) {
        r.kernel_xids.push_back(std::move(*x));
      }
    }
  }
  return r;
}

void GpuHealthMonitor::Loop() {
  while (true) {
    GpuHealthReadings r = Collect();
    std::unique_lock<std::mutex> lock(mu_);
    latest_ = tracker_.Update(r);
    cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.interval), [&] { return stopping_; });
    if (stopping_) return;
  }
}

std::optional<std::vector<FakeGpuEvent>> GpuHealthMonitor::ReadFake() {
  if (options_.fake_for_test.empty()) return std::nullopt;
  std::ifstream in(options_.fake_for_test, std::ios::binary);
  if (!in) return std::nullopt;
  std::string content(kMaxFakeBytes, '\0');
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<size_t>(in.gcount()));
  absl::StatusOr<std::vector<FakeGpuEvent>> events = ParseGpuHealthFake(content);
  if (!events.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fake_error_ != events.status().message()) {
      fake_error_ = std::string(events.status().message());
      spdlog::warn("{}: {}", options_.fake_for_test, fake_error_);
    }
    return std::vector<FakeGpuEvent>{};
  }
  return *std::move(events);
}

std::vector<v1::GpuSample> GpuHealthMonitor::Latest() {
  std::optional<std::vector<FakeGpuEvent>> fake = ReadFake();
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.fake_for_test.empty()) return latest_;
  return tracker_.WithFake(latest_, fake);
}

std::vector<v1::GpuSample> GpuHealthMonitor::SampleNow() {
  if (!options_.gpus.empty()) {
    GpuHealthReadings r = Collect();
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = tracker_.Update(r);
  }
  return Latest();
}

}  // namespace llamafleet::worker
