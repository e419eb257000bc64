#include "server/stream_limits.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace llamafleet {

struct StreamLimits::Entry {
  std::string user;
  std::string what;
  absl::Time opened;
  // Unix microseconds when the outstanding write started; 0: none outstanding.
  std::atomic<int64_t> write_started_us{0};
  // Recursive: a stream's end may, in principle, release its slot inline.
  std::recursive_mutex end_mu;
  EndFn end;           // guarded by end_mu; cleared when the slot goes
  bool ended = false;  // guarded by end_mu
};

StreamLimits::Slot::~Slot() {
  {
    std::lock_guard<std::recursive_mutex> lock(entry_->end_mu);
    entry_->end = nullptr;
  }
  limits_->Release(entry_);
}

void StreamLimits::Slot::WriteStarted() {
  entry_->write_started_us.store(absl::ToUnixMicros(limits_->options_.clock->Now()));
}

void StreamLimits::Slot::WriteDone() { entry_->write_started_us.store(0); }

StreamLimits::StreamLimits(StreamLimitOptions options) : options_(std::move(options)) {
  if (options_.idle_timeout > absl::ZeroDuration() ||
      options_.max_lifetime > absl::ZeroDuration()) {
    sweeper_ = std::make_unique<PeriodicThread>("lf-streams", options_.sweep_interval,
                                                [this] { SweepNow(); });
  }
}

StreamLimits::~StreamLimits() = default;

absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> StreamLimits::Acquire(const std::string& user,
                                                                          const std::string& what,
                                                                          EndFn end) {
  auto entry = std::make_shared<Entry>();
  entry->user = user;
  entry->what = what;
  entry->opened = options_.clock->Now();
  entry->end = std::move(end);
  std::lock_guard<std::mutex> lock(mu_);
  int& held = per_user_[user];
  if (options_.max_per_user > 0 && held >= options_.max_per_user) {
    if (held == 0) per_user_.erase(user);
    return absl::ResourceExhaustedError(
        absl::StrCat("user ", user, " already holds ", held,
                     " open streams (event and log follows, gRPC and HTTP together), "
                     "the most one user may (--max-streams-per-user ",
                     options_.max_per_user, "); close one, or poll without follow"));
  }
  ++held;
  open_.insert(entry);
  return std::unique_ptr<Slot>(new Slot(this, std::move(entry)));
}

void StreamLimits::Release(const std::shared_ptr<Entry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.erase(entry) == 0) return;
  auto it = per_user_.find(entry->user);
  if (it != per_user_.end() && --it->second <= 0) per_user_.erase(it);
}

int StreamLimits::Open(const std::string& user) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_user_.find(user);
  return it == per_user_.end() ? 0 : it->second;
}

void StreamLimits::SweepNow() {
  const absl::Time now = options_.clock->Now();
  struct Due {
    std::shared_ptr<Entry> entry;
    absl::Status why;
    bool write_pending;
  };
  std::vector<Due> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::shared_ptr<Entry>& e : open_) {
      const int64_t started_us = e->write_started_us.load();
      const bool pending = started_us != 0;
      if (options_.idle_timeout > absl::ZeroDuration() && pending &&
          now - absl::FromUnixMicros(started_us) >= options_.idle_timeout) {
        due.push_back(
            {e,
             absl::DeadlineExceededError(absl::StrCat(
                 e->what, " stream ended: its client took no message for ",
                 absl::FormatDuration(options_.idle_timeout), " (--stream-idle-timeout)")),
             true});
      } else if (options_.max_lifetime > absl::ZeroDuration() &&
                 now - e->opened >= options_.max_lifetime) {
        due.push_back(
            {e,
             absl::UnavailableError(absl::StrCat(e->what, " stream ended after its longest life, ",
                                                 absl::FormatDuration(options_.max_lifetime),
                                                 " (--stream-max-lifetime); reconnect to go on")),
             pending});
      }
    }
  }
  for (Due& d : due) {
    std::lock_guard<std::recursive_mutex> lock(d.entry->end_mu);
    if (d.entry->ended || !d.entry->end) continue;
    d.entry->ended = true;
    spdlog::info("user {}: {}", d.entry->user, std::string(d.why.message()));
    EndFn end = d.entry->end;  // a copy: the slot may go while it runs
    end(d.why, d.write_pending);
  }
}


}  // namespace llamafleet
