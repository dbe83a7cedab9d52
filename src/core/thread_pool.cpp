// Thread pool: workers spin briefly on a generation counter (decode issues hundreds of small
// parallel regions per token, and a condition-variable wake-up costs tens of microseconds), then
// sleep on a condition variable. The caller waits for the workers the same way: a bounded spin,
// then yielding, so that on an oversubscribed machine a preempted worker gets the core back
// instead of the caller burning its whole time slice (decode has ~200 regions per token).
//
// ParallelFor chunks are claimed (thread_pool.h): claimed_[t] holds the last generation whose
// chunk t has an owner, and a claim is one compare-exchange from an older generation to the
// current one, so worker t and the caller cannot both run chunk t. A worker dereferences the job
// only after winning its claim, and the caller returns only after every chunk a worker won is
// finished, so a late worker never sees a job that is gone: when it wakes after the region, its
// chunk is already claimed (by the caller) and it goes back to waiting.
#include "edgeseek/internal/core/thread_pool.h"

#include <algorithm>

namespace es {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  claimed_ = std::make_unique<std::atomic<uint64_t>[]>(size_t(n_threads));
  for (int i = 0; i < n_threads; ++i) claimed_[size_t(i)].store(0, std::memory_order_relaxed);
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

bool ThreadPool::Claim(int t, uint64_t gen) {
  std::atomic<uint64_t>& c = claimed_[size_t(t)];
  uint64_t cur = c.load(std::memory_order_acquire);
  return cur < gen && c.compare_exchange_strong(cur, gen, std::memory_order_acq_rel);
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
    int claim_count;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      job = job_;
      claim_count = claim_count_;
    }
    if (claim_count == 0) {  // RunOnAll: every worker, and the caller waits for each
      (*job)(index, size());
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    } else if (index < claim_count && Claim(index, seen)) {
      (*job)(index, size());
      finished_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

uint64_t ThreadPool::Publish(const std::function<void(int, int)>* fn, int claim_count) {
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = fn;
    claim_count_ = claim_count;
    gen = ++generation_;
    published_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  return gen;
}

void ThreadPool::WaitUntil(const std::atomic<int>& counter, int value) const {
  constexpr int kSpinBeforeYield = 4000;
  for (int spin = 0; counter.load(std::memory_order_acquire) != value; ++spin) {
    if (spin >= kSpinBeforeYield) {
      std::this_thread::yield();
      continue;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void ThreadPool::RunOnAll(const std::function<void(int, int)>& fn) {
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  pending_.store(int(workers_.size()), std::memory_order_release);
  Publish(&fn, 0);
  fn(0, size());
  WaitUntil(pending_, 0);
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
  auto chunk = [&](int t) {
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e, t);
  };
  const std::function<void(int, int)> job = [&](int t, int) { chunk(t); };
  finished_.store(0, std::memory_order_relaxed);  // the last region's workers are all done
  const uint64_t gen = Publish(&job, nt);
  chunk(0);
  // The chunks no worker has started yet: run here, rather than wait for a thread the OS has
  // not scheduled.
  int stolen = 0;
  for (int t = 1; t < nt; ++t)
    if (Claim(t, gen)) {
      chunk(t);
      ++stolen;
    }
  WaitUntil(finished_, nt - 1 - stolen);
}

}  // namespace es
