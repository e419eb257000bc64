#ifndef LLAMAFLEET_SERVER_WEBHOOK_QUEUE_H_
#define LLAMAFLEET_SERVER_WEBHOOK_QUEUE_H_

// The webhook deliveries waiting to be posted (server/webhooks.h), kept per job owner so
// that one owner's flood neither delays nor drops another owner's deliveries:
//
//   - Fair: PopDue serves owners round robin (one delivery each, in name order after the
//     owner served last), so an owner's delivery waits behind at most one delivery of
//     each other owner with something due, however many those owners have waiting.
//   - Bounded: at most max_pending_per_owner waiting per owner and max_pending in all.
//     At a bound, Push first drops the waiting delivery due soonest of the owner at its
//     bound, or, when all owners together are at max_pending, of the owner with the most
//     waiting; Push says what it dropped so that the caller counts and logs it.
//
// Not thread-safe: the caller serialises (server/webhooks.cc holds its mutex). Time is
// passed in, so tests need no clock.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace llamafleet {

// A body waiting to be posted to one URL.
struct WebhookDelivery {
  std::string id;    // X-Llamafleet-Delivery: the same on every try
  std::string type;  // X-Llamafleet-Event
  std::string body;
  size_t url = 0;      // index into the notifier's URLs
  int64_t job_id = 0;  // where the outcome is recorded
  std::string owner;   // the job's owner: whose share of the queue it takes
  int tries = 0;
};

struct WebhookQueueBounds {
  size_t max_pending = 10000;           // all owners together; >= 1
  size_t max_pending_per_owner = 2500;  // >= 1
};

class WebhookQueue {
 public:
  explicit WebhookQueue(WebhookQueueBounds bounds) : bounds_(bounds) {}

  // What Push dropped to make room: whose it was, and which bound was reached.
  struct Dropped {
    WebhookDelivery delivery;
    bool owner_bound = false;  // true: its owner's max_pending_per_owner; false: max_pending
  };

  // Queues `d`, due at `due` (a first try: now; a retry: after its backoff). When a bound
  // is reached, one waiting delivery is dropped first (see above) and returned.
  std::optional<Dropped> Push(WebhookDelivery d, absl::Time due);

  // The next delivery due at `now`, taken out of the queue, from the next owner in turn
  // that has one due; nullopt when none is due yet.
  std::optional<WebhookDelivery> PopDue(absl::Time now);

  // When the earliest waiting delivery is due; InfiniteFuture() when none waits.
  absl::Time NextDue() const;

  size_t size() const { return size_; }
  size_t waiting(const std::string& owner) const;

 private:
  using Waiting = std::multimap<absl::Time, WebhookDelivery>;  // by due time, FIFO among equals

  // Removes the delivery due soonest of `owner` (who has one) and returns it.
  WebhookDelivery DropFirst(std::map<std::string, Waiting>::iterator owner);

  const WebhookQueueBounds bounds_;
  std::map<std::string, Waiting> owners_;  // only owners with something waiting
  size_t size_ = 0;
  std::string last_served_;  // PopDue continues after this owner
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_WEBHOOK_QUEUE_H_
