// WorkerPool: the HTTP worker threads, handing each job to the thread that went idle last
// (LIFO), where httplib's ThreadPool wakes any waiter of one condition variable.
//
// Why: with a shared condition variable the kernel wakes waiters roughly in turn, so even one
// client at a time walks through all http_threads (128) threads; each first use grows the
// process by that thread's touched stack and malloc arena, and RSS climbed for ~100 rounds of
// tests/server/hostile_probe.py (15.6 -> 24.1 MB; with 4 threads: flat). LIFO keeps the working
// set to the concurrency the load really has, and its stacks warm in cache.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace es::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t threads);
  ~WorkerPool();  // Shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Enqueue(std::function<void()> job);
  // Runs the jobs already queued, then joins the threads. Idempotent.
  void Shutdown();
  // Threads that have run at least one job (for tests).
  size_t threads_used() const;

 private:
  struct Worker {
    std::condition_variable cv;
    bool signaled = false;  // the pool popped this worker off idle_ for a job
    bool used = false;
  };
  void Loop(size_t i);

  mutable std::mutex mu_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<size_t> idle_;  // a stack: back() went idle last
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace es::server
