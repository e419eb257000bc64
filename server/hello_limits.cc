#include "server/hello_limits.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace llamafleet {

struct HelloLimits::Entry {
  uint64_t id = 0;
  std::string peer;
  absl::Time opened;
  // Recursive: a stream's end may, in principle, give its place back inline.
  std::recursive_mutex end_mu;
  EndFn end;           // guarded by end_mu; cleared when the Waiting goes
  bool ended = false;  // guarded by end_mu
};

namespace {

// Runs `entry`'s end once, unless its Waiting is gone.
void End(HelloLimits::Entry& entry, const absl::Status& why) {
  std::lock_guard<std::recursive_mutex> lock(entry.end_mu);
  if (entry.ended || !entry.end) return;
  entry.ended = true;
  HelloLimits::EndFn end = entry.end;  // a copy: the Waiting may go while it runs
  end(why);
}

}  // namespace

HelloLimits::Waiting::~Waiting() {
  {
    std::lock_guard<std::recursive_mutex> lock(entry_->end_mu);
    entry_->end = nullptr;
  }
  limits_->Release(entry_);
}

HelloLimits::HelloLimits(HelloLimitOptions options)
    : options_(std::move(options)), pool_(options_.max_total, options_.max_per_peer) {
  if (options_.hello_timeout > absl::ZeroDuration()) {
    sweeper_ = std::make_unique<PeriodicThread>("lf-hellos", options_.sweep_interval,
                                                [this] { SweepNow(); });
  }
}

HelloLimits::~HelloLimits() = default;

absl::StatusOr<std::unique_ptr<HelloLimits::Waiting>> HelloLimits::Admit(const std::string& peer,
                                                                         EndFn end) {
  auto entry = std::make_shared<Entry>();
  entry->peer = peer;
  entry->opened = options_.clock->Now();
  entry->end = std::move(end);
  std::shared_ptr<Entry> evicted;
  int waiting_now = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entry->id = next_id_++;
    const PeerPool::Admission admission = pool_.Admit(entry->id, peer);
    if (admission.verdict == PeerPool::Verdict::kPeerFull) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "worker session refused: ", pool_.held_by(peer), " sessions from ", peer,
          " already wait for their hello, the most one address may "
          "(--max-unauthenticated-sessions-per-address ",
          options_.max_per_peer, "); a worker sends its hello as soon as its session opens"));
    }
    if (admission.verdict == PeerPool::Verdict::kPoolFull) {
      return absl::ResourceExhaustedError(
          absl::StrCat("worker session refused: ", pool_.size(),
                       " sessions already wait for their hello, the most the coordinator holds "
                       "(--max-unauthenticated-sessions ",
                       options_.max_total, "), and no address holds more of them than ", peer));
    }
    if (admission.evicted.has_value()) {
      auto it = entries_.find(*admission.evicted);
      evicted = std::move(it->second);
      entries_.erase(it);
    }
    entries_[entry->id] = entry;
    waiting_now = pool_.size();
  }
  if (evicted != nullptr) {
    End(*evicted,
        absl::ResourceExhaustedError(absl::StrCat(
            "worker session from ", evicted->peer, " ended before its hello: ", waiting_now,
            " sessions wait for theirs, the most the coordinator holds "
            "(--max-unauthenticated-sessions ",
            options_.max_total, "), and its place went to one from an address holding fewer")));
  }
  return std::unique_ptr<Waiting>(new Waiting(this, std::move(entry)));
}

void HelloLimits::Release(const std::shared_ptr<Entry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(entry->id);
  if (it == entries_.end() || it->second != entry) return;  // evicted or expired before
  pool_.Remove(entry->id);
  entries_.erase(it);
}

int HelloLimits::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.size();
}

int HelloLimits::waiting_from(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_.held_by(peer);
}

void HelloLimits::SweepNow() {
  if (options_.hello_timeout <= absl::ZeroDuration()) return;
  const absl::Time now = options_.clock->Now();
  std::vector<std::shared_ptr<Entry>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (now - it->second->opened < options_.hello_timeout) {
        ++it;
        continue;
      }
      pool_.Remove(it->first);
      due.push_back(std::move(it->second));
      it = entries_.erase(it);
    }
  }
  for (const std::shared_ptr<Entry>& e : due) {
    End(*e, absl::DeadlineExceededError(absl::StrCat("worker session from ", e->peer,
                                                     " ended: no hello within ",
                                                     absl::FormatDuration(options_.hello_timeout),
                                                     " of its opening (--worker-hello-timeout)")));
  }
}


}  // namespace llamafleet
