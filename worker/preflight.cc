#include "worker/preflight.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "common/gpu_throttle.h"
#include "worker/gpu_health.h"
#include "worker/inventory.h"

namespace llamafleet::worker {
namespace {

using Steady = std::chrono::steady_clock;

// nvidia-smi answers in well under a second; a wedged driver fails the check instead.
constexpr absl::Duration kGpuQueryTimeout = absl::Seconds(10);

double SecondsSince(Steady::time_point start) {
  return std::chrono::duration<double>(Steady::now() - start).count();
}

v1::PreflightCheck Check(const std::string& name, v1::PreflightCheck::State state,
                         const std::string& detail, double seconds) {
  v1::PreflightCheck c;
  c.set_name(name);
  c.set_state(state);
  c.set_detail(detail);
  c.set_seconds(seconds);
  return c;
}

v1::PreflightCheck GemmCheck() {
  constexpr int n = 96;
  constexpr double kSlowSeconds = 1.0;
  std::vector<double> a(n * n), b(n * n), c(n * n, 0.0);
  std::vector<int64_t> ref(n * n, 0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      a[i * n + j] = static_cast<double>((i * 7 + j * 3) % 17) - 8;
      b[i * n + j] = static_cast<double>((i * 5 + j * 11) % 13) - 6;
    }
  }
  const auto start = Steady::now();
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      const double aik = a[i * n + k];
      for (int j = 0; j < n; ++j) c[i * n + j] += aik * b[k * n + j];
    }
  }
  const double seconds = SecondsSince(start);
  // The reference in exact integer arithmetic, another loop order.
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int k = 0; k < n; ++k) {
        sum += static_cast<int64_t>(a[i * n + k]) * static_cast<int64_t>(b[k * n + j]);
      }
      ref[i * n + j] = sum;
    }
  }
  for (int i = 0; i < n * n; ++i) {
    if (c[i] != static_cast<double>(ref[i])) {
      return Check("gemm", v1::PreflightCheck::FAILED,
                   absl::StrFormat("%dx%d result differs from the reference at (%d,%d): %g != %d", n, n,
                                   i / n, i % n, c[i], ref[i]),
                   seconds);
    }
  }
  if (seconds > kSlowSeconds) {
    return Check("gemm", v1::PreflightCheck::FAILED,
                 absl::StrFormat("%dx%d took %.3f s (limit %.1f s)", n, n, seconds, kSlowSeconds), seconds);
  }
  return Check("gemm", v1::PreflightCheck::PASSED, absl::StrFormat("%dx%d in %.2f ms", n, n, seconds * 1e3),
               seconds);
}

v1::PreflightCheck LoopbackCheck() {
  const auto start = Steady::now();
  auto fail = [&](const std::string& what) {
    return Check("loopback", v1::PreflightCheck::FAILED, absl::StrCat(what, ": ", std::strerror(errno)),
                 SecondsSince(start));
  };
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int client = -1, server = -1;
  auto close_all = [&] {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  };
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    v1::PreflightCheck c = fail("listen on 127.0.0.1");
    close_all();
    return c;
  }
  client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0 || connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    v1::PreflightCheck c = fail("connect to 127.0.0.1");
    close_all();
    return c;
  }
  server = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (server < 0) {
    v1::PreflightCheck c = fail("accept");
    close_all();
    return c;
  }
  // 64 KiB fits the socket buffers: written whole, then read back.
  std::string sent(64 * 1024, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 131 % 251);
  size_t off = 0;
  while (off < sent.size()) {
    const ssize_t w = write(client, sent.data() + off, sent.size() - off);
    if (w <= 0) {
      v1::PreflightCheck c = fail("write");
      close_all();
      return c;
    }
    off += static_cast<size_t>(w);
  }
  std::string got(sent.size(), '\0');
  off = 0;
  while (off < got.size()) {
    const ssize_t r = read(server, got.data() + off, got.size() - off);
    if (r <= 0) {
      v1::PreflightCheck c = fail("read");
      close_all();
      return c;
    }
    off += static_cast<size_t>(r);
  }
  close_all();
  const double seconds = SecondsSince(start);
  if (got != sent) return Check("loopback", v1::PreflightCheck::FAILED, "64 KiB came back altered", seconds);
  return Check("loopback", v1::PreflightCheck::PASSED,
               absl::StrFormat("64 KiB over 127.0.0.1 in %.2f ms", seconds * 1e3), seconds);
}

}  // namespace

v1::PreflightCheck GpuCheckFromSamples(const std::vector<v1::GpuSample>& samples, int expected) {
  std::vector<std::string> problems;
  int seen = 0;
  for (const v1::GpuSample& s : samples) {
    if (s.gone()) continue;
    ++seen;
    if (s.ecc_uncorrected_volatile() > 0) {
      problems.push_back(absl::StrCat("GPU ", s.index(), ": ", s.ecc_uncorrected_volatile(), " uncorrected ECC errors"));
    }
    for (const std::string& words : GpuHealthThrottleNames(s.clock_throttle_reasons(), /*words=*/true)) {
      problems.push_back(absl::StrCat("GPU ", s.index(), ": ", words, " active"));
    }
  }
  if (seen < expected) {
    problems.push_back(absl::StrCat("nvidia-smi sees ", seen, " of the ", expected, " GPUs this worker joined with"));
  }
  if (!problems.empty()) return Check("gpu", v1::PreflightCheck::FAILED, absl::StrJoin(problems, "; "), 0);
  return Check("gpu", v1::PreflightCheck::PASSED,
               absl::StrCat(seen, " GPUs: no uncorrected ECC errors, no clock slowdown"), 0);
}

v1::PreflightResult RunPreflight(const PreflightOptions& options, int64_t sequence) {
  const auto start = Steady::now();
  v1::PreflightResult r;
  r.set_sequence(sequence);
  *r.add_checks() = GemmCheck();
  *r.add_checks() = LoopbackCheck();
  if (options.expected_gpus == 0) {
    *r.add_checks() = Check("gpu", v1::PreflightCheck::SKIPPED, "no GPU", 0);
  } else if (!HaveNvidiaSmi()) {
    *r.add_checks() = Check("gpu", v1::PreflightCheck::SKIPPED, "nvidia-smi not found", 0);
  } else {
    const auto gpu_start = Steady::now();
    std::vector<v1::GpuSample> samples;
    for (NvidiaSmiGpu& g : QueryNvidiaSmiHealth(kGpuQueryTimeout).value_or(std::vector<NvidiaSmiGpu>{})) {
      samples.push_back(std::move(g.sample));
    }
    v1::PreflightCheck c = GpuCheckFromSamples(samples, options.expected_gpus);
    c.set_seconds(SecondsSince(gpu_start));
    *r.add_checks() = c;
  }
  if (!options.fail_while_exists.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(options.fail_while_exists, ec)) {
      *r.add_checks() = Check("injected", v1::PreflightCheck::FAILED,
                              absl::StrCat("failing on purpose while ", options.fail_while_exists,
                                           " exists (--preflight-fail-for-test)"),
                              0);
    }
  }
  bool passed = true;
  for (const v1::PreflightCheck& c : r.checks()) passed &= c.state() != v1::PreflightCheck::FAILED;
  r.set_passed(passed);
  r.set_seconds(SecondsSince(start));
  *r.mutable_time() = google::protobuf::util::TimeUtil::GetCurrentTime();
  return r;
}

}  // namespace llamafleet::worker
