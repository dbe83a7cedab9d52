// One thread per device of a split (device_threads.h).
#include "edgeseek/internal/runtime/device_threads.h"

#include <utility>

namespace es {

DeviceThreads::DeviceThreads(size_t n) {
  errors_.resize(n);
  for (size_t d = 1; d < n; ++d) threads_.emplace_back([this, d] { Loop(d); });
}

DeviceThreads::~DeviceThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  go_.notify_all();
  for (auto& t : threads_) t.join();
}

void DeviceThreads::Run(const std::function<void(size_t)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = threads_.size();
    ++generation_;
  }
  go_.notify_all();
  errors_[0] = nullptr;
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  for (auto& e : errors_)
    if (e) std::rethrow_exception(std::exchange(e, nullptr));
}

void DeviceThreads::Loop(size_t d) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    go_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<void(size_t)>* fn = fn_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*fn)(d);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[d] = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace es
