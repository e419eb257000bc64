#ifndef LLAMAFLEET_SERVER_HELLO_LIMITS_H_
#define LLAMAFLEET_SERVER_HELLO_LIMITS_H_

// Bounds on WorkerService.Session streams before their hello has presented the join token:
// until then a stream speaks for nobody, so what anyone can open without credentials is
// bounded. The contract:
//   - such streams are a PeerPool (server/peer_pool.h) keyed by the peer's IP address: at
//     most max_per_peer from one address, the next refused RESOURCE_EXHAUSTED at once; at
//     most max_total in all, a newcomer to a full pool taking the place of the oldest
//     stream of the address holding the most (that one ended RESOURCE_EXHAUSTED), or
//     refused when no address holds more than its own;
//   - a stream holding its place for hello_timeout is ended DEADLINE_EXCEEDED;
//   - the place is given back when the join token is accepted or the stream is done.
// A refused or ended stream costs nothing once gRPC has finished it, so hello-less streams
// hold at most max_total streams' memory, however many are opened.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/periodic_thread.h"
#include "server/peer_pool.h"

namespace llamafleet {

struct HelloLimitOptions {
  int max_total = 256;                               // <= 0: no cap
  int max_per_peer = 8;                              // <= 0: no cap
  absl::Duration hello_timeout = absl::Seconds(20);  // zero: none
  // How often waiting streams are checked against hello_timeout.
  absl::Duration sweep_interval = absl::Milliseconds(250);
  Clock* clock = Clock::Real();
};

class HelloLimits {
 public:
  // Ends a stream that lost its place (its hello deadline passed, or a newcomer took it):
  // called at most once, on the limits' thread or the one admitting the newcomer, never
  // after the stream's Waiting is gone. It must not block (it finishes the call).
  using EndFn = std::function<void(const absl::Status& why)>;

  struct Entry;
  // A stream's place; destroy it once the join token is accepted, or in OnDone.
  class Waiting {
   public:
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    friend class HelloLimits;
    Waiting(HelloLimits* limits, std::shared_ptr<Entry> entry)
        : limits_(limits), entry_(std::move(entry)) {}
    HelloLimits* const limits_;
    const std::shared_ptr<Entry> entry_;
  };

  explicit HelloLimits(HelloLimitOptions options);
  // Every Waiting must be gone first.
  ~HelloLimits();

  // A place for a stream from `peer` (an IP address, PeerAddress()). RESOURCE_EXHAUSTED,
  // naming the bound and its flag, when refused.
  absl::StatusOr<std::unique_ptr<Waiting>> Admit(const std::string& peer, EndFn end);

  // Streams waiting now, in all and from `peer`.
  int waiting() const;
  int waiting_from(const std::string& peer) const;
  // Ends every stream past hello_timeout now (tests, with a fake clock).
  void SweepNow();

 private:
  void Release(const std::shared_ptr<Entry>& entry);

  const HelloLimitOptions options_;
  mutable std::mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  PeerPool pool_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);  // the pool's
  // Last: stopped first, while what SweepNow uses exists.
  std::unique_ptr<PeriodicThread> sweeper_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_HELLO_LIMITS_H_
