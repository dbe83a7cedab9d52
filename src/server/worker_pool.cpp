// WorkerPool (worker_pool.h). Each worker waits on its own condition variable, so Enqueue can
// choose which one wakes: the top of the idle stack.
#include "worker_pool.h"

#include <algorithm>

namespace es::server {

WorkerPool::WorkerPool(size_t threads) {
  for (size_t i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>());
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

WorkerPool::~WorkerPool() { Shutdown(); }

void WorkerPool::Enqueue(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(std::move(job));
  if (idle_.empty()) return;  // all busy: the next to finish takes it
  Worker& w = *workers_[idle_.back()];
  idle_.pop_back();
  w.signaled = true;
  w.cv.notify_one();
}

void WorkerPool::Loop(size_t i) {
  Worker& self = *workers_[i];
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!jobs_.empty()) {
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      self.used = true;
      lock.unlock();
      job();
      job = nullptr;  // its captures are released outside the lock too
      lock.lock();
      continue;
    }
    if (shutdown_) return;
    self.signaled = false;
    idle_.push_back(i);
    self.cv.wait(lock, [&] { return self.signaled || shutdown_; });
    if (!self.signaled) idle_.erase(std::find(idle_.begin(), idle_.end(), i));  // shutdown
  }
}

void WorkerPool::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (auto& w : workers_) w->cv.notify_one();
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

size_t WorkerPool::threads_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_t(
      std::count_if(workers_.begin(), workers_.end(), [](const auto& w) { return w->used; }));
}

}  // namespace es::server
