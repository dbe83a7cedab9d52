// Thread pool: workers spin briefly on a generation counter (decode issues hundreds of small
// parallel regions per token, and a condition-variable wake-up costs tens of microseconds), then
// sleep on a condition variable. The caller waits for the workers the same way: a bounded spin,
// then yielding, so that on an oversubscribed machine a preempted worker gets the core back
// instead of the caller burning its whole time slice (decode has ~200 regions per token).
#include "edgeseek/core/thread_pool.h"

#include <algorithm>

namespace es {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin phase.
    for (int spin = 0; spin < 20000; ++spin) {
      if (published_.load(std::memory_order_acquire) != seen) break;
      if (spin >= 2000) {  // past a short busy spin, let runnable threads have the core
        std::this_thread::yield();
        continue;
      }
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    const std::function<void(int, int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      job = job_;
    }
    (*job)(index, size());
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::RunOnAll(const std::function<void(int, int)>& fn) {
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  pending_.store(int(workers_.size()), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, size());
  constexpr int kSpinBeforeYield = 4000;
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin >= kSpinBeforeYield) {
      std::this_thread::yield();
      continue;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void ThreadPool::ParallelFor(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int nt = int(std::min<int64_t>(size(), units));
  if (nt <= 1) {
    fn(0, n, 0);
    return;
  }
  RunOnAll([&](int t, int) {
    if (t >= nt) return;
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e, t);
  });
}

}  // namespace es
