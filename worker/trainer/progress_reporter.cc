#include "progress_reporter.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "util.h"
#include "worker/trainer_events.h"

namespace llamafleet::trainer {
namespace {

using Clock = std::chrono::steady_clock;

struct Counters {
  std::atomic<int64_t> step{0};
  std::atomic<int64_t> collectives{0};
  std::atomic<int> depth{0};          // waits the calling threads are in (nested: > 1)
  std::atomic<int64_t> wait_ns{0};    // finished waits' time
  std::atomic<int64_t> wait_start_ns{0};  // the outermost wait in progress began (since start)
  const Clock::time_point start = Clock::now();
};
Counters& C() {
  static Counters* c = new Counters();  // never destroyed: the reporter may outlive statics
  return *c;
}

int64_t SinceStartNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - C().start).count();
}

struct Reporter {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};
Reporter& R() {
  static Reporter* r = new Reporter();
  return *r;
}

trainer_events::Progress Read() {
  Counters& c = C();
  trainer_events::Progress p;
  p.step = c.step.load();
  p.collectives = c.collectives.load();
  p.in_collective = c.depth.load() > 0;
  const int64_t now = SinceStartNs(Clock::now());
  int64_t wait = c.wait_ns.load();
  if (p.in_collective) wait += std::max<int64_t>(0, now - c.wait_start_ns.load());
  p.wait_s = static_cast<double>(wait) / 1e9;
  p.busy_s = static_cast<double>(std::max<int64_t>(0, now - wait)) / 1e9;
  return p;
}

}  // namespace

void NoteStepDone(int64_t step) { C().step.store(step); }

CollectiveWaitScope::CollectiveWaitScope() : start_(Clock::now()) {
  Counters& c = C();
  outer_ = c.depth.fetch_add(1) == 0;
  if (outer_) {
    c.wait_start_ns.store(SinceStartNs(start_));
    c.collectives.fetch_add(1);
  }
}

CollectiveWaitScope::~CollectiveWaitScope() {
  Counters& c = C();
  if (outer_) c.wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
  c.depth.fetch_sub(1);
}

void StartProgressReporter(std::chrono::milliseconds interval) {
  Reporter& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.thread.joinable() || r.stop) return;
  r.thread = std::thread([&r, interval] {
    std::unique_lock<std::mutex> lock(r.mu);
    while (!r.stop) {
      lock.unlock();
      EmitJsonLine(trainer_events::ToLine(Read()));
      lock.lock();
      r.cv.wait_for(lock, interval, [&r] { return r.stop; });
    }
  });
}

void StopProgressReporter() {
  Reporter& r = R();
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.stop = true;
    t = std::move(r.thread);
  }
  r.cv.notify_all();
  if (t.joinable()) t.join();
}

}  // namespace llamafleet::trainer
