#include "server/cluster/gpu_health_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/gpu_throttle.h"

namespace llamafleet {
namespace {

constexpr int32_t kMaxGpuIndex = 1023;
constexpr int64_t kRecentXidsRead = 8;  // of a sample's recent_xids, the last this many

const char* XidMeaning(int64_t xid) {
  switch (xid) {
    case 48: return "double-bit ECC error";
    case 61: return "internal micro-controller breakpoint";
    case 62: return "internal micro-controller halt";
    case 63: return "ECC page retirement or row remapping recorded";
    case 64: return "ECC page retirement or row remapping failed";
    case 74: return "NVLink error";
    case 79: return "GPU has fallen off the bus";
    case 92: return "high single-bit ECC error rate";
    case 94: return "contained ECC error";
    case 95: return "uncontained ECC error";
    case 119: return "GSP RPC timeout";
    case 120: return "GSP error";
    default: return nullptr;
  }
}

}  // namespace

bool IsFatalXid(int64_t xid) {
  return std::find(std::begin(kFatalXids), std::end(kFatalXids), xid) != std::end(kFatalXids);
}

std::string DescribeXid(int64_t xid) {
  const char* meaning = XidMeaning(xid);
  return meaning == nullptr ? absl::StrCat("XID ", xid) : absl::StrCat("XID ", xid, " (", meaning, ")");
}

const char* GpuHealthEventName(GpuHealthEvent::Kind kind) {
  switch (kind) {
    case GpuHealthEvent::kXid: return "xid";
    case GpuHealthEvent::kEcc: return "ecc";
    case GpuHealthEvent::kGone: return "gone";
    case GpuHealthEvent::kThrottle: return "throttle";
  }
  return "?";
}

std::vector<GpuHealthEvent> ObserveGpuSamples(GpuHealthState& state,
                                              const google::protobuf::RepeatedPtrField<v1::GpuSample>& samples,
                                              absl::Time now) {
  std::vector<GpuHealthEvent> events;
  int read = 0;
  for (const v1::GpuSample& s : samples) {
    if (++read > kMaxGpuSamples) break;
    if (s.index() < 0 || s.index() > kMaxGpuIndex) continue;
    const int32_t gpu = s.index();
    auto add = [&](GpuHealthEvent::Kind kind, bool fatal, const std::string& what) {
      events.push_back({kind, gpu, fatal, absl::StrCat("GPU ", gpu, ": ", what), now});
    };
    GpuHealthMemory& m = state[gpu];
    if (s.xid_count() >= 0) {
      if (s.xid_count() > m.xid_count) {
        const int64_t added = s.xid_count() - m.xid_count;
        // The new ones among the recent XIDs (the newest last); the worst is named.
        const int n = s.recent_xids_size();
        const int take = static_cast<int>(std::min<int64_t>({added, n, kRecentXidsRead}));
        std::vector<int64_t> fresh;
        for (int i = n - take; i < n; ++i) fresh.push_back(s.recent_xids(i));
        if (fresh.empty()) fresh.push_back(s.xid_errors());
        int64_t named = fresh.back();
        for (int64_t xid : fresh) {
          if (IsFatalXid(xid)) named = xid;
        }
        add(GpuHealthEvent::kXid, IsFatalXid(named),
            absl::StrCat(DescribeXid(named), added > 1 ? absl::StrCat(" (", added, " new XID events)") : ""));
      }
      m.xid_count = s.xid_count();  // a smaller count: the worker restarted
    }
    if (s.has_ecc_uncorrected_volatile() && s.ecc_uncorrected_volatile() >= 0) {
      const int64_t ecc = s.ecc_uncorrected_volatile();
      if (m.ecc.has_value() && ecc > *m.ecc) {
        add(GpuHealthEvent::kEcc, true,
            absl::StrCat(ecc - *m.ecc, " new uncorrectable ECC errors (", ecc, " since the driver loaded)"));
      }
      m.ecc = ecc;  // a smaller count: the driver reloaded
    }
    if (s.gone() && !m.gone) add(GpuHealthEvent::kGone, true, "gone (the worker no longer finds it)");
    m.gone = s.gone();
    const uint64_t throttle = GpuHealthThrottleMask(s.clock_throttle_reasons());
    if (const uint64_t onset = throttle & ~m.throttle; onset != 0) {
      add(GpuHealthEvent::kThrottle, false,
          absl::StrCat("clocks held down: ", absl::StrJoin(GpuHealthThrottleNames(onset, /*words=*/true), ", ")));
    }
    m.throttle = throttle;
  }
  return events;
}

HealthDecision DecideGpuHealth(const std::optional<WorkerDrainRecord>& drain,
                               const std::vector<GpuHealthEvent>& events) {
  HealthDecision d;
  if (drain.has_value()) return d;
  std::vector<const GpuHealthEvent*> fatal;
  for (const GpuHealthEvent& e : events) {
    if (e.fatal) fatal.push_back(&e);
  }
  if (fatal.empty()) return d;
  d.action = HealthDecision::kDrain;
  d.reason = fatal.size() == 1 ? fatal[0]->detail
                               : absl::StrCat(fatal[0]->detail, " (and ", fatal.size() - 1, " more)");
  return d;
}

}  // namespace llamafleet
