#include "collectives.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(LLAMAFLEET_HAVE_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "progress_reporter.h"

namespace llamafleet::trainer {

namespace {

// c10d's process-group base class: ProcessGroup in 1.x, Backend since 2.0 (where a
// ProcessGroup is a dispatcher over backends). Both carry the same collective methods.
#if TORCH_VERSION_MAJOR >= 2
using PgBase = c10d::Backend;
#else
using PgBase = c10d::ProcessGroup;
#endif

// TCPStore's libuv server: TCPStoreOptions::useLibUV exists from 2.2 on and defaults to
// true from 2.4, but a LibTorch built without libuv (Debian's) then fails every rendezvous.
// The classic server exists in every version, so it is asked for wherever the field exists;
// on versions without the field this does nothing.
template <typename Options>
auto UseClassicTcpStore(Options& so, int) -> decltype(so.useLibUV = false, void()) {
  so.useLibUV = false;
}
template <typename Options>
void UseClassicTcpStore(Options&, long) {}

// Returns once host:port accepts a TCP connection, or after `limit`; best effort (the
// TCPStore that follows reports what is wrong). A TCPStore client that finds its server
// not yet listening backs off a whole second before it tries again, and ranks started
// together usually reach the rendezvous a few milliseconds before rank 0 listens: probing
// every 10 ms first keeps that second off every start.
void WaitUntilListening(const std::string& host, int port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses) != 0) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (bool up = false; !up && std::chrono::steady_clock::now() < deadline;) {
    for (const addrinfo* a = addresses; a != nullptr && !up; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        up = true;
      } else if (errno == EINPROGRESS) {  // a remote host: up to 100 ms for its answer
        pollfd p{fd, POLLOUT, 0};
        int error = 0;
        socklen_t len = sizeof(error);
        up = ::poll(&p, 1, 100) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
      }
      ::close(fd);
    }
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::freeaddrinfo(addresses);
}

std::string ExceptionText(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

// ---------------------------------------------------------------------------------------
// Watchdog: one thread, armed by WatchdogGuard around blocking waits.

class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread outlives statics
    return *w;
  }
  uint64_t Arm(std::string what, std::chrono::milliseconds limit) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = next_id_++;
    armed_[id] = {std::move(what), std::chrono::steady_clock::now() + limit + kGrace};
    if (!thread_started_) {
      thread_started_ = true;
      std::thread([this] { Run(); }).detach();
    }
    return id;
  }
  void Disarm(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_.erase(id);
  }

 private:
  // Gloo/NCCL timeouts fire first; the watchdog only catches waits that never return.
  static constexpr std::chrono::seconds kGrace{15};
  struct Entry {
    std::string what;
    std::chrono::steady_clock::time_point deadline;
  };
  void Run() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = std::chrono::steady_clock::now();
      for (const auto& [id, e] : armed_) {
        if (now > e.deadline) {
          std::fprintf(stderr,
                       "llamafleet-train [E] %s did not complete within its timeout (a peer rank "
                       "probably died or hung); exiting\n",
                       e.what.c_str());
          std::fflush(stderr);
          std::_Exit(3);
        }
      }
    }
  }
  std::mutex mu_;
  uint64_t next_id_ = 1;
  bool thread_started_ = false;
  std::map<uint64_t, Entry> armed_;
};

// ---------------------------------------------------------------------------------------
// Work objects.

class DoneWork : public CommWork {
 public:
  explicit DoneWork(absl::Status s = absl::OkStatus()) : status_(std::move(s)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

// A c10d work, optionally followed by a local step (run once, after a successful wait).
class C10dWork : public CommWork {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::string what, std::chrono::milliseconds timeout,
           std::function<void()> then = nullptr)
      : work_(std::move(work)), what_(std::move(what)), timeout_(timeout), then_(std::move(then)) {}
  ~C10dWork() override {
    // Never leave a collective behind that still writes into tensors about to be freed.
    if (!done_) (void)Wait();
  }
  absl::Status Wait() override {
    if (done_) return status_;
    done_ = true;
    CollectiveWaitScope waiting;  // the rank's progress lines say it waits here
    WatchdogGuard guard(what_, timeout_);
    try {
      work_->wait(timeout_);
      if (then_) then_();
    } catch (...) {
      status_ = absl::UnavailableError(
          absl::StrCat(what_, " failed: ", ExceptionText(std::current_exception())));
    }
    work_.reset();
    return status_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::function<void()> then_;
  bool done_ = false;
  absl::Status status_;
};

// Errors raised while *issuing* a collective (e.g. the transport already saw the peer
// close) surface at Wait(), like errors of the collective itself.
template <typename F>
std::unique_ptr<CommWork> Issue(const std::string& what, std::chrono::milliseconds timeout, F&& f,
                                std::function<void()> then = nullptr) {
  try {
    return std::make_unique<C10dWork>(f(), what, timeout, std::move(then));
  } catch (...) {
    return std::make_unique<DoneWork>(
        absl::UnavailableError(absl::StrCat(what, " failed: ", ExceptionText(std::current_exception()))));
  }
}

// Gloo moves bytes verbatim for gathers and all-to-all, but only knows some dtypes: move
// 16-bit floats as Half (same width, no arithmetic involved).
at::Tensor AsGlooMovable(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return t.view(at::kHalf);
  return t;
}

// ---------------------------------------------------------------------------------------
// Communicators.

class LocalComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  std::unique_ptr<CommWork> AllGather(at::Tensor out, at::Tensor in) override {
    if (!out.is_same(in)) out.copy_(in);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<CommWork> ReduceScatterSum(at::Tensor out, at::Tensor in) override {
    if (!out.is_same(in)) out.copy_(in);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<CommWork> AllReduceSum(at::Tensor) override { return std::make_unique<DoneWork>(); }
  std::unique_ptr<CommWork> Broadcast(at::Tensor, int) override { return std::make_unique<DoneWork>(); }
};

class C10dComm : public Comm {
 public:
  C10dComm(c10::intrusive_ptr<PgBase> pg, std::string backend, std::string name, int rank, int size,
           std::chrono::milliseconds timeout)
      : pg_(std::move(pg)),
        backend_(std::move(backend)),
        name_(std::move(name)),
        rank_(rank),
        size_(size),
        timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }

  std::unique_ptr<CommWork> AllGather(at::Tensor out, at::Tensor in) override {
    TORCH_CHECK(out.numel() == in.numel() * size_, "AllGather: out must be size * in");
    const std::string what = Describe("all-gather", in);
    if (backend_ == "nccl") {
      return Issue(what, timeout_, [&] { return pg_->_allgather_base(out, in); });
    }
    // Gloo: a list of per-rank views of `out` (contiguous slices of a contiguous tensor).
    auto outs = std::make_shared<std::vector<std::vector<at::Tensor>>>(1);
    auto ins = std::make_shared<std::vector<at::Tensor>>(1, AsGlooMovable(in));
    at::Tensor o = AsGlooMovable(out);
    for (int r = 0; r < size_; ++r) (*outs)[0].push_back(o.narrow(0, r * in.numel(), in.numel()));
    return Issue(what, timeout_, [&] { return pg_->allgather(*outs, *ins); }, [outs, ins] {});
  }

  std::unique_ptr<CommWork> ReduceScatterSum(at::Tensor out, at::Tensor in) override {
    TORCH_CHECK(in.numel() == out.numel() * size_, "ReduceScatterSum: in must be size * out");
    const std::string what = Describe("reduce-scatter", in);
    if (backend_ == "nccl") {
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      return Issue(what, timeout_, [&] { return pg_->_reduce_scatter_base(out, in, opts); });
    }
    // Gloo: all-to-all sends chunk r of `in` to rank r; we receive every rank's chunk for
    // our shard, [size, S], and sum them in rank order.
    auto recv = std::make_shared<at::Tensor>(at::empty({size_, out.numel()}, in.options()));
    auto send = std::make_shared<at::Tensor>(in.contiguous());
    at::Tensor recv_m = AsGlooMovable(*recv), send_m = AsGlooMovable(*send);
    std::vector<int64_t> splits;  // empty: equal splits
    return Issue(
        what, timeout_,
        [&] { return pg_->alltoall_base(recv_m, send_m, splits, splits); },
        [recv, send, out]() mutable { at::sum_out(out, *recv, {0}); });
  }

  std::unique_ptr<CommWork> AllReduceSum(at::Tensor t) override {
    const std::string what = Describe("all-reduce", t);
    if (backend_ == "gloo" && t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble &&
        t.scalar_type() != at::kLong && t.scalar_type() != at::kInt) {
      // Gloo lacks 16-bit float arithmetic: reduce-scatter (local sums) + all-gather.
      const int64_t n = t.numel(), shard = (n + size_ - 1) / size_;
      at::Tensor padded = at::zeros({shard * size_}, t.options());
      padded.narrow(0, 0, n).copy_(t.reshape({-1}));
      at::Tensor mine = at::empty({shard}, t.options());
      absl::Status s = ReduceScatterSum(mine, padded)->Wait();
      if (s.ok()) s = AllGather(padded, mine)->Wait();
      if (s.ok()) t.copy_(padded.narrow(0, 0, n).view_as(t));
      return std::make_unique<DoneWork>(s);
    }
    auto ts = std::make_shared<std::vector<at::Tensor>>(1, t);
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return Issue(what, timeout_, [&] { return pg_->allreduce(*ts, opts); }, [ts] {});
  }

  std::unique_ptr<CommWork> Broadcast(at::Tensor t, int root) override {
    auto ts = std::make_shared<std::vector<at::Tensor>>(1, AsGlooMovable(t));
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return Issue(Describe("broadcast", t), timeout_, [&] { return pg_->broadcast(*ts, opts); }, [ts] {});
  }

 private:
  std::string Describe(const char* op, const at::Tensor& t) const {
    return absl::StrCat(backend_, " ", op, " of ", t.numel(), " elements in group ", name_,
                        " (rank ", rank_, " of ", size_, ")");
  }

  c10::intrusive_ptr<PgBase> pg_;
  const std::string backend_;
  const std::string name_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
};

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::shared_ptr<::gloo::transport::Device> GlooDevice(const std::string& master_addr) {
  // Like torch.distributed: GLOO_SOCKET_IFNAME wins; a loopback rendezvous means every
  // rank is on this machine, so bind to loopback; otherwise the host's own address.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (IsLoopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

WatchdogGuard::WatchdogGuard(std::string what, std::chrono::milliseconds limit)
    : id_(Watchdog::Get().Arm(std::move(what), limit)) {}
WatchdogGuard::~WatchdogGuard() { Watchdog::Get().Disarm(id_); }

std::unique_ptr<Comm> MakeLocalComm() { return std::make_unique<LocalComm>(); }

bool HaveNccl() {
#if defined(LLAMAFLEET_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

DistContext::~DistContext() = default;

absl::StatusOr<std::unique_ptr<DistContext>> DistContext::Create(const RendezvousOptions& o) {
  std::unique_ptr<DistContext> ctx(new DistContext());
  ctx->options_ = o;
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("bad rank ", o.rank, " / world size ", o.world_size));
  }
  if (o.timeout.count() <= 0) return absl::InvalidArgumentError("collective timeout must be > 0");
  if (o.world_size == 1) {
    ctx->backend_ = "local";
    ctx->world_ = MakeLocalComm();
    return ctx;
  }
  if (o.backend == "nccl" || (o.backend == "auto" && o.device.is_cuda())) {
    if (!HaveNccl()) {
      return absl::FailedPreconditionError(
          "NCCL requested but this build has no NCCL (LibTorch without CUDA, or nccl.h missing)");
    }
    ctx->backend_ = "nccl";
  } else if (o.backend == "gloo" || o.backend == "auto") {
    ctx->backend_ = "gloo";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", o.backend, "\" (auto, gloo, nccl)"));
  }
  if (o.master_addr.empty() || o.master_port <= 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WORLD_SIZE=", o.world_size, " needs MASTER_ADDR and MASTER_PORT (got \"", o.master_addr, "\":",
        o.master_port, ")"));
  }
  const std::string where = absl::StrCat(o.master_addr, ":", o.master_port);
  try {
    WatchdogGuard guard(absl::StrCat("rendezvous at ", where), o.timeout);
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<size_t>(o.world_size);
    so.waitWorkers = true;
    so.timeout = o.timeout;
    UseClassicTcpStore(so, 0);
    if (o.rank != 0) WaitUntilListening(o.master_addr, o.master_port, o.timeout);
    ctx->store_ = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("rendezvous with TCPStore at ", where, " (rank ", o.rank,
                                               " of ", o.world_size, ") failed: ",
                                               ExceptionText(std::current_exception())));
  }
  auto world = ctx->MakeGroup("world", o.rank, o.world_size);
  if (!world.ok()) return world.status();
  ctx->world_ = std::move(*world);
  return ctx;
}

absl::StatusOr<std::unique_ptr<Comm>> DistContext::MakeGroup(const std::string& prefix, int rank,
                                                             int size) {
  if (size == 1) return MakeLocalComm();
  const RendezvousOptions& o = options_;
  try {
    WatchdogGuard guard(absl::StrCat("creating process group ", prefix), o.timeout);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
#if defined(LLAMAFLEET_HAVE_NCCL)
    if (backend_ == "nccl") {
      // Let NCCL errors and timeouts abort the communicator instead of hanging.
      setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 0);
      setenv("NCCL_ASYNC_ERROR_HANDLING", "1", 0);
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = o.timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
      opts->group_name = prefix;  // named in NCCL's logs and PyTorch's flight recorder
#endif
      auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
      return std::unique_ptr<Comm>(new C10dComm(pg, "nccl", prefix, rank, size, o.timeout));
    }
#endif
    auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
    opts->devices.push_back(GlooDevice(o.master_addr));
    opts->threads = 2;
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
    return std::unique_ptr<Comm>(new C10dComm(pg, "gloo", prefix, rank, size, o.timeout));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("creating ", backend_, " process group ", prefix, " (rank ",
                                               rank, " of ", size, ") failed: ",
                                               ExceptionText(std::current_exception())));
  }
}

absl::StatusOr<std::unique_ptr<Comm>> DistContext::NewGroup(const std::vector<std::vector<int>>& groups,
                                                            const std::string& tag) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      if (groups[g][i] == rank()) {
        return MakeGroup(absl::StrCat(tag, "/", absl::StrJoin(groups[g], ",")), static_cast<int>(i),
                         static_cast<int>(groups[g].size()));
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("rank ", rank(), " is in no group of ", tag));
}

namespace {

class LocalKeyValueStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    cv_.notify_all();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return absl::DeadlineExceededError(absl::StrCat("waiting for key ", key));
    }
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

class TcpKeyValueStore : public KeyValueStore {
 public:
  TcpKeyValueStore(c10::intrusive_ptr<c10d::Store> store, std::string where)
      : store_(std::move(store)), where_(std::move(where)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    } catch (...) {
      return absl::UnavailableError(absl::StrCat("setting ", key, " in the TCPStore at ", where_, ": ",
                                                 ExceptionText(std::current_exception())));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      store_->wait({key}, timeout);
      const std::vector<uint8_t> v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (...) {
      return absl::DeadlineExceededError(absl::StrCat("waiting for ", key, " in the TCPStore at ", where_, ": ",
                                                      ExceptionText(std::current_exception())));
    }
  }

 private:
  std::mutex mu_;
  c10::intrusive_ptr<c10d::Store> store_;
  const std::string where_;
};

}  // namespace

std::unique_ptr<KeyValueStore> MakeLocalKeyValueStore() { return std::make_unique<LocalKeyValueStore>(); }

absl::StatusOr<std::unique_ptr<KeyValueStore>> DistContext::NewKeyValueStore(const std::string& prefix) {
  const RendezvousOptions& o = options_;
  if (o.world_size == 1) return MakeLocalKeyValueStore();
  const std::string where = absl::StrCat(o.master_addr, ":", o.master_port);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = o.timeout;
    UseClassicTcpStore(so, 0);
    auto client = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    return std::unique_ptr<KeyValueStore>(
        new TcpKeyValueStore(c10::make_intrusive<c10d::PrefixStore>(prefix, client), where));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat("connecting to the TCPStore at ", where, ": ",
                                               ExceptionText(std::current_exception())));
  }
}

}  // namespace llamafleet::trainer
