// How the CPU GEMMs cut their output y [R, N] into tasks for the thread pool — the quantized row
// kernels (matmul_quant-inl.h), the x86 column-lane kernels (matmul_lanes-inl.h) and the ARM64
// kernels (matmul_quant_arm.cpp): blocks of kRows × kCols outputs, numbered row block fastest,
// so that the consecutive tasks a thread takes from ParallelFor share their weight columns (and
// whatever was decoded or interleaved from them). Work is never split along K, which is what
// keeps every output's reduction order independent of the split (matmul.h). The block shape is a
// template argument so that the arithmetic per task stays the shifts and masks of constants.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/kernels/matmul.h"
#include "edgeseek/internal/core/thread_pool.h"

namespace es::cpu {

// Outputs [r0, r1) × [n0, n1) of one task.
struct TaskRange {
  size_t r0, r1, n0, n1;
};

template <size_t kRows, size_t kCols>
class TaskGrid {
 public:
  TaskGrid(size_t R, size_t N)
      : R_(R),
        N_(N),
        row_blocks_((R + kRows - 1) / kRows),
        count_(row_blocks_ * ((N + kCols - 1) / kCols)) {}

  size_t Count() const { return count_; }

  // Task t < Count(): column block t / row_blocks, row block t % row_blocks; the last block of
  // each clipped to R or N.
  TaskRange operator[](size_t t) const {
    const size_t n0 = (t / row_blocks_) * kCols, r0 = (t % row_blocks_) * kRows;
    return {r0, std::min(R_, r0 + kRows), n0, std::min(N_, n0 + kCols)};
  }

 private:
  size_t R_, N_;
  size_t row_blocks_;  // ceil(R / kRows)
  size_t count_;
};

// The epilogue (matmul.h MatMulEpilogue) of a path that has none in its own regions: after the
// matmul, one region over ranges of 64 columns (all R rows), as a separate pass over y would be.
inline void EpilogueRegion(size_t R, size_t N, const MatMulEpilogue& epi, ThreadPool& pool) {
  constexpr int64_t kCols = 64;
  pool.ParallelFor((int64_t(N) + kCols - 1) / kCols, [&](int64_t c0, int64_t c1, int) {
    epi(0, int64_t(R), c0 * kCols, std::min(int64_t(N), c1 * kCols));
  });
}

}  // namespace es::cpu
