#ifndef LLAMAFLEET_SERVER_WEBHOOKS_H_
#define LLAMAFLEET_SERVER_WEBHOOKS_H_

// Webhooks: URLs an admin configures on the coordinator (never taken from a job spec)
// receive a JSON POST when a job reaches a terminal state ("job.finished") and when the
// last unfinished job of a sweep ends ("sweep.finished"; docs/operations.md#webhooks).
//
// Contract:
//   - Every body is signed with the shared secret: header X-Llamafleet-Signature:
//     sha256=<hex HMAC-SHA256 of the exact body bytes>; X-Llamafleet-Event names the
//     type and X-Llamafleet-Delivery a unique id (the same on every retry).
//   - Nothing blocks the coordinator: the store's writer only appends the committed
//     event to a bounded list (max_pending); one thread reads each job and makes its
//     bodies, another posts them.
//   - Fair between owners (server/webhook_queue.h): deliveries wait per job owner and are
//     posted round robin, so one owner's flood (a cancelled sweep of 1,000 points) delays
//     another owner's delivery by at most one post. At most max_pending_per_owner wait
//     per owner and max_pending in all; at a bound the owner's (or the fullest owner's)
//     delivery due soonest is dropped, counted (dropped(), dropped_counter) and logged
//     with the owner.
//   - Each POST has `timeout`; an answer other than 2xx, or no answer, is retried after
//     first_backoff, doubling, up to max_attempts tries. The outcome is recorded as an
//     event of type "webhook" on the job ("delivered to http://h:8080 (HTTP 200, try 2)",
//     "not delivered to https://h after 5 tries: connection refused"). Events and log
//     lines name a URL by its scheme, host and port only (WebhookUrlForDisplay): its path
//     and query may hold a secret (a Slack-style URL is its own credential), and every
//     viewer reads events.
//   - At most once across a coordinator restart: what was queued and not yet delivered
//     when it stopped is not sent again. Receivers dedupe on the delivery id.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/prometheus.h"

namespace llamafleet {

class JobStore;

struct WebhookOptions {
  std::vector<std::string> urls;  // http://host[:port]/path or https://... (certificate checked)
  std::string secret;             // the HMAC key; required
  int max_attempts = 5;
  absl::Duration first_backoff = absl::Seconds(1);
  absl::Duration timeout = absl::Seconds(5);
  size_t max_pending = 10000;           // waiting deliveries, all owners together
  size_t max_pending_per_owner = 2500;  // waiting deliveries of one job owner
  // Also counts every dropped delivery (llamafleet_webhook_deliveries_dropped_total;
  // server/metrics.h). Not owned; must outlive the notifier. Null: dropped() only.
  metrics::Counter* dropped_counter = nullptr;
};

// INVALID_ARGUMENT naming `url` unless it is http:// or https:// with a host (and an
// optional port and path).
absl::Status ValidateWebhookUrl(const std::string& url);

// `url` as events and logs show it: "scheme://host[:port]", without its path, query,
// fragment or credentials, which may hold a secret. "(an invalid webhook URL)" when it
// does not parse.
std::string WebhookUrlForDisplay(const std::string& url);

// "sha256=<64 lowercase hex digits>": HMAC-SHA256 of `body` keyed with `secret`.
std::string WebhookSignature(const std::string& secret, const std::string& body);

class WebhookNotifier {
 public:
  // Checks the options (URLs, a secret, bounds), subscribes to `store`'s committed events
  // and starts the delivery thread. `store` must outlive the notifier.
  static absl::StatusOr<std::unique_ptr<WebhookNotifier>> Start(JobStore* store,
                                                                WebhookOptions options);
  // Unsubscribes and stops the thread; deliveries still waiting are dropped (logged).
  ~WebhookNotifier();

  // Deliveries that gave up after max_attempts, and those dropped at a bound of the queue.
  int64_t failed() const;
  int64_t dropped() const;

  class Impl;

 private:
  explicit WebhookNotifier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_WEBHOOKS_H_
