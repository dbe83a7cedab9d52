// Per-thread scratch memory for the CPU kernels: packed activation blocks, f32 weight panels and
// vector accumulators. Each pool thread owns one buffer that grows to the largest request and is
// reused across calls, so kernels allocate nothing in steady state.
#pragma once

#include <cstddef>

#include "hwy/aligned_allocator.h"

namespace es::cpu {

class Scratch {
 public:
  // At least n floats, 64-byte aligned (hwy::AllocateAligned); valid until the next Floats() call
  // on this thread with a larger n.
  float* Floats(size_t n) {
    if (n > size_) {
      buf_ = hwy::AllocateAligned<float>(n);
      size_ = n;
    }
    return buf_.get();
  }

 private:
  hwy::AlignedFreeUniquePtr<float[]> buf_;  // owned
  size_t size_ = 0;
};

// The calling thread's scratch; slot 0 and 1 are independent buffers (e.g. padded x and panels).
inline Scratch& ThreadScratch(int slot) {
  thread_local Scratch scratch[2];
  return scratch[slot];
}

}  // namespace es::cpu
