#include "server/serial_executor.h"

#include <pthread.h>

namespace llamafleet {

SerialExecutor::SerialExecutor(const char* name) {
  thread_ = std::thread([this, name] {
    pthread_setname_np(pthread_self(), name);
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything queued is done
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  });
}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SerialExecutor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

}  // namespace llamafleet
