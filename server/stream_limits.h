#ifndef LLAMAFLEET_SERVER_STREAM_LIMITS_H_
#define LLAMAFLEET_SERVER_STREAM_LIMITS_H_

// Bounds on the streams a caller can hold open: WatchJob and StreamJobLogs with follow,
// and through them the HTTP gateway's event and log streams (those are the same calls,
// made under the caller's own credentials, so one user's gRPC and HTTP streams share one
// count). The contract:
//   - a user (the authenticated principal's name) holds at most max_per_user such streams
//     at once; the next is refused RESOURCE_EXHAUSTED naming the cap and its flag (HTTP
//     429). A stream's slot is taken before its first message and given back when the
//     call is done, however it ends.
//   - a stream whose client has not taken a written message for idle_timeout (the write is
//     still pending: the client stopped reading) is cancelled, freeing its slot;
//   - a stream open for max_lifetime is ended with UNAVAILABLE saying so, which clients
//     that resume (llamafleet watch, an EventSource with Last-Event-ID) treat as a
//     reconnect.
// One viewer can therefore hold neither every slot nor one forever.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/periodic_thread.h"

namespace llamafleet {

// Initial metadata a following StreamJobLogs sends as soon as it holds its slot: the HTTP
// gateway opens its event stream only on seeing it, so a refusal is a plain HTTP error.
inline constexpr char kStreamOpenKey[] = "x-llamafleet-stream-open";

struct StreamLimitOptions {
  int max_per_user = 16;                           // <= 0: no cap
  absl::Duration idle_timeout = absl::Minutes(5);  // zero: none
  absl::Duration max_lifetime = absl::Hours(24);   // zero: none
  // How often open streams are checked against the two bounds.
  absl::Duration sweep_interval = absl::Seconds(1);
  Clock* clock = Clock::Real();
};

class StreamLimits {
 public:
  // What a stream must do when a bound ends it: called at most once, on the limits' own
  // thread, never after its slot is gone. `write_pending`: a write is outstanding (the
  // client is not reading), so only cancelling the call ends it; else finish with `why`.
  using EndFn = std::function<void(const absl::Status& why, bool write_pending)>;

  struct Entry;
  // Held by one stream from Acquire until the call is done (destroy it in OnDone).
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // Around each write: a write started and not done for idle_timeout ends the stream.
    void WriteStarted();
    void WriteDone();

   private:
    friend class StreamLimits;
    Slot(StreamLimits* limits, std::shared_ptr<Entry> entry)
        : limits_(limits), entry_(std::move(entry)) {}
    StreamLimits* const limits_;
    const std::shared_ptr<Entry> entry_;
  };

  explicit StreamLimits(StreamLimitOptions options);
  // Open slots must be gone first.
  ~StreamLimits();

  // A slot for one of `user`'s streams (`what` names it in errors and logs: "WatchJob").
  // RESOURCE_EXHAUSTED when the user holds max_per_user already.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& user, const std::string& what,
                                                EndFn end);

  // Streams `user` holds now.
  int Open(const std::string& user) const;
  // Checks every open stream against the bounds now (tests, with a fake clock).
  void SweepNow();

  const StreamLimitOptions& options() const { return options_; }

 private:
  void Release(const std::shared_ptr<Entry>& entry);

  const StreamLimitOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, int> per_user_ ABSL_GUARDED_BY(mu_);
  std::set<std::shared_ptr<Entry>> open_ ABSL_GUARDED_BY(mu_);
  // Last: stopped first, while what SweepNow uses exists.
  std::unique_ptr<PeriodicThread> sweeper_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_STREAM_LIMITS_H_
