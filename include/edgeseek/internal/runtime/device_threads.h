// One thread per device of a split: fn(d) for every device d at once, device 0 on the calling
// thread (head_split.cpp's shards of a block, the layer split's stages of a micro-batch wave).
// Unlike core's ThreadPool (kernels' parallel loops, spinning between short tasks), workers block
// between calls: on a small CPU a spinning worker would take a core from the CPU device's own
// pool. An exception a device throws comes back from Run, the first device's first.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace es {

class DeviceThreads {
 public:
  explicit DeviceThreads(size_t n);  // n devices: n - 1 threads
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

  // fn(d) for every device d, returning when all have; rethrows the first device's error.
  void Run(const std::function<void(size_t)>& fn);

 private:
  void Loop(size_t d);

  std::mutex mu_;
  std::condition_variable go_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;  // guarded by mu_; valid during Run
  uint64_t generation_ = 0;                          // guarded by mu_
  size_t pending_ = 0;                               // guarded by mu_
  bool stop_ = false;                                // guarded by mu_
  std::vector<std::exception_ptr> errors_;           // [device]: 0 written by Run, d by worker d
  std::vector<std::thread> threads_;
};

}  // namespace es
