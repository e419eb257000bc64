#ifndef LLAMAFLEET_SERVER_PERIODIC_THREAD_H_
#define LLAMAFLEET_SERVER_PERIODIC_THREAD_H_

// A named thread that calls `tick` every `interval` until the object is destroyed. The
// destructor stops it and waits for a running tick to return, so an owner declares it
// last among its members: it goes first, while everything a tick uses still exists.
// `tick` runs without any lock of the owner's held.

#include <pthread.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/time/time.h"

namespace llamafleet {

class PeriodicThread {
 public:
  // `name`: the thread's name (at most 15 characters, as ps shows it).
  PeriodicThread(std::string name, absl::Duration interval, std::function<void()> tick)
      : interval_(interval), tick_(std::move(tick)) {
    thread_ = std::thread([this, name = std::move(name)] {
      pthread_setname_np(pthread_self(), name.c_str());
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [&] { return stopping_; })) {
        lock.unlock();
        tick_();
        lock.lock();
      }
    });
  }
  ~PeriodicThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  const absl::Duration interval_;
  const std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_PERIODIC_THREAD_H_
