#include "worker/gpu_health_parse.h"

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/gpu_throttle.h"

namespace llamafleet::worker {
namespace {

constexpr size_t kMaxLine = 1024;

// The input's lines, at most kMaxParsedBytes of it, each trimmed; over-long lines dropped.
std::vector<absl::string_view> Lines(absl::string_view text) {
  std::vector<absl::string_view> out;
  for (absl::string_view line : absl::StrSplit(text.substr(0, kMaxParsedBytes), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty() && line.size() <= kMaxLine) out.push_back(line);
  }
  return out;
}

std::optional<int> GpuIndex(absl::string_view s) {
  int i = 0;
  if (!absl::SimpleAtoi(s, &i) || i < 0 || i > kMaxGpuIndex) return std::nullopt;
  return i;
}

// A finite, non-negative reading no larger than `max`; 0 for "[N/A]" and the like.
double Reading(absl::string_view s, double max) {
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v < 0 || v > max) return 0;
  return v;
}

std::optional<int64_t> Count(absl::string_view s) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < 0) return std::nullopt;
  return v;
}

uint64_t HexMask(absl::string_view s) {
  if (!absl::ConsumePrefix(&s, "0x")) absl::ConsumePrefix(&s, "0X");
  uint64_t v = 0;
  if (s.empty() || s.size() > 16 || !absl::SimpleHexAtoi(s, &v)) return 0;
  return v;
}

bool IsHex(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string NormalizePciAddress(absl::string_view address) {
  address = absl::StripAsciiWhitespace(address);
  if (address.size() > 32) return "";
  // DOMAIN:BUS:DEVICE[.FUNCTION], hex; nvidia-smi's domain has 8 digits, the kernel's 4.
  std::vector<absl::string_view> parts = absl::StrSplit(address, ':');
  if (parts.size() != 3) return "";
  absl::string_view device = parts[2];
  if (const size_t dot = device.find('.'); dot != absl::string_view::npos) {
    if (!IsHex(device.substr(dot + 1))) return "";
    device = device.substr(0, dot);
  }
  uint64_t domain = 0, bus = 0, dev = 0;
  if (!IsHex(parts[0]) || parts[0].size() > 8 || !IsHex(parts[1]) || parts[1].size() > 2 ||
      !IsHex(device) || device.size() > 2 || !absl::SimpleHexAtoi(parts[0], &domain) ||
      !absl::SimpleHexAtoi(parts[1], &bus) || !absl::SimpleHexAtoi(device, &dev) || domain > 0xffff) {
    return "";
  }
  return absl::StrFormat("%04x:%02x:%02x", domain, bus, dev);
}

std::vector<NvidiaSmiGpu> ParseNvidiaSmiHealth(absl::string_view output) {
  std::vector<NvidiaSmiGpu> gpus;
  std::set<int> seen;
  for (absl::string_view line : Lines(output)) {
    if (static_cast<int>(gpus.size()) >= kMaxGpus) break;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() != 10) continue;
    for (absl::string_view& x : f) x = absl::StripAsciiWhitespace(x);
    const std::optional<int> index = GpuIndex(f[0]);
    if (!index.has_value() || !seen.insert(*index).second) continue;
    NvidiaSmiGpu g;
    g.pci = NormalizePciAddress(f[1]);
    v1::GpuSample& s = g.sample;
    s.set_index(*index);
    s.set_gpu_util(Reading(f[2], 100));
    s.set_mem_copy_util(Reading(f[3], 100));
    s.set_memory_used_bytes(static_cast<int64_t>(Reading(f[4], 1e9) * 1024 * 1024));  // MiB
    s.set_temperature_c(Reading(f[5], 1000));
    s.set_power_w(Reading(f[6], 1e6));
    s.set_sm_clock_mhz(Reading(f[7], 1e6));
    if (std::optional<int64_t> ecc = Count(f[8]); ecc.has_value()) s.set_ecc_uncorrected_volatile(*ecc);
    s.set_clock_throttle_reasons(HexMask(f[9]));
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::map<int, int64_t> ParseDcgmiXids(absl::string_view output) {
  std::map<int, int64_t> xids;
  for (absl::string_view line : Lines(output)) {
    if (static_cast<int>(xids.size()) >= kMaxGpus) break;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() != 3 || f[0] != "GPU") continue;
    const std::optional<int> index = GpuIndex(f[1]);
    const std::optional<int64_t> value = Count(f[2]);
    if (index.has_value() && value.has_value()) xids.emplace(*index, *value);
  }
  return xids;
}

std::optional<KernelXid> ParseKernelXid(absl::string_view record) {
  record = record.substr(0, kMaxLine);
  // A /dev/kmsg record's text follows its "prio,seq,time,flags;" prefix and ends at the
  // first newline (continuation lines carry dictionary fields).
  if (const size_t nl = record.find('\n'); nl != absl::string_view::npos) record = record.substr(0, nl);
  constexpr absl::string_view kTag = "NVRM: Xid (PCI:";
  const size_t at = record.find(kTag);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = record.substr(at + kTag.size());
  const size_t close = rest.find("):");
  if (close == absl::string_view::npos) return std::nullopt;
  KernelXid x;
  x.pci = NormalizePciAddress(rest.substr(0, close));
  if (x.pci.empty()) return std::nullopt;
  rest = absl::StripLeadingAsciiWhitespace(rest.substr(close + 2));
  size_t digits = 0;
  while (digits < rest.size() && digits < 6 && absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits == 0 || !absl::SimpleAtoi(rest.substr(0, digits), &x.xid) || x.xid <= 0) return std::nullopt;
  return x;
}

absl::StatusOr<std::vector<FakeGpuEvent>> ParseGpuHealthFake(absl::string_view content) {
  std::vector<FakeGpuEvent> events;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(content.substr(0, kMaxParsedBytes), '\n')) {
    ++number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("gpu health fake, line ", number, ": ", why,
                                                     " (want: xid N gpu G | ecc N gpu G | gone gpu G | "
                                                     "throttle NAME gpu G)"));
    };
    if (line.size() > 200) return bad("longer than 200 characters");
    if (static_cast<int>(events.size()) >= kMaxGpus) return bad(absl::StrCat("more than ", kMaxGpus, " events"));
    std::vector<absl::string_view> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    FakeGpuEvent e;
    e.line = std::string(line);
    absl::string_view gpu_word, gpu_value;
    if (w.size() == 3 && w[0] == "gone") {
      e.kind = FakeGpuEvent::kGone;
      gpu_word = w[1];
      gpu_value = w[2];
    } else if (w.size() == 4 && (w[0] == "xid" || w[0] == "ecc" || w[0] == "throttle")) {
      gpu_word = w[2];
      gpu_value = w[3];
      if (w[0] == "throttle") {
        e.kind = FakeGpuEvent::kThrottle;
        for (const GpuThrottleBit& b : kGpuHealthThrottles) {
          if (w[1] == b.name) e.value = static_cast<int64_t>(b.bit);
        }
        if (e.value == 0) return bad(absl::StrCat("unknown throttle reason \"", w[1], "\""));
      } else {
        e.kind = w[0] == "xid" ? FakeGpuEvent::kXid : FakeGpuEvent::kEcc;
        std::optional<int64_t> n = Count(w[1]);
        if (!n.has_value() || (e.kind == FakeGpuEvent::kXid && (*n == 0 || *n > 100000))) {
          return bad(absl::StrCat("bad number \"", w[1], "\""));
        }
        e.value = *n;
      }
    } else {
      return bad("unknown event");
    }
    std::optional<int> gpu = GpuIndex(gpu_value);
    if (gpu_word != "gpu" || !gpu.has_value()) return bad("expected \"gpu G\" with 0 <= G <= 1023");
    e.gpu = *gpu;
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace llamafleet::worker
