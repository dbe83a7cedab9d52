// Persistent thread pool: threads are created once and reused for every op (no thread creation
// per op). ParallelFor splits [0, n) into contiguous chunks, one per thread, so that which thread
// computes which row is a pure function of (n, threads) — never of timing — and a row's result
// never depends on its neighbours (batch invariance lives in the kernels, not here).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace es {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // fn(begin, end, thread_index) over contiguous chunks of [0, n); the calling thread takes part.
  // Chunks are multiples of `grain` (except the last). Returns when all chunks are done.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;
  void ParallelFor(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // fn(thread_index, n_threads) once on every thread.
  void RunOnAll(const std::function<void(int thread, int n_threads)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* job_ = nullptr;  // not owned; valid during RunOnAll
  uint64_t generation_ = 0;                             // guarded by mu_
  std::atomic<uint64_t> published_{0};                  // generation, for the spin phase
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace es
