// Persistent thread pool: threads are created once and reused for every op (no thread creation
// per op). ParallelFor splits [0, n) into contiguous chunks, one per thread index, so that which
// index computes which row is a pure function of (n, threads) — never of timing — and a row's
// result never depends on its neighbours (batch invariance lives in the kernels, not here).
//
// A chunk is claimed before it runs: a worker claims its own; the caller, done with chunk 0,
// claims and runs (with the chunk's own index) every chunk whose worker has not started yet. A
// worker that the OS has not scheduled — another process on the core — then no longer stalls
// the region for a scheduler time slice (decode has ~250 regions a token: on the shared 2-core
// machine such waits made a 1.5B Q4_0 token take 2-4x its usual time).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Chunks are multiples of `grain` (except the last). Returns when all chunks are done. Chunk t
  // always gets thread_index t, though the calling thread may be the one that runs it.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;
  void ParallelFor(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // fn(thread_index, n_threads) once on every thread.
  void RunOnAll(const std::function<void(int thread, int n_threads)>& fn);

 private:
  void WorkerLoop(int index);
  // Publishes `fn` as the next job; claim_count > 0: a ParallelFor job whose chunks
  // 1..claim_count-1 are claimed (workers beyond it skip it); 0: every worker runs it.
  uint64_t Publish(const std::function<void(int, int)>* fn, int claim_count);
  void WaitUntil(const std::atomic<int>& counter, int value) const;
  // Whether chunk t of generation `gen` is now the caller's (exactly one claimant wins).
  bool Claim(int t, uint64_t gen);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* job_ = nullptr;  // not owned; valid during the region
  int claim_count_ = 0;                                 // guarded by mu_, as job_
  uint64_t generation_ = 0;                             // guarded by mu_
  std::atomic<uint64_t> published_{0};                  // generation, for the spin phase
  std::atomic<int> pending_{0};                         // RunOnAll: workers yet to run the job
  std::atomic<int> finished_{0};  // ParallelFor: chunks the workers claimed and finished
  // claimed_[t]: the last generation whose chunk t was claimed (by worker t or the caller).
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;
  bool stop_ = false;
};

}  // namespace es
