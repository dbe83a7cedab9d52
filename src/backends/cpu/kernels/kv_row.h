// One KV cache row of type T on the CPU: the writer (quantize / convert a row of f32 into the
// cache) and the two reads attention makes of it, a dot with a query head and an axpy into an
// output head, which dequantize block by block on the way (never an f32 copy of the cache).
// Types: f32, f16, and GGUF's q8_0 / q4_0 blocks (an f16 scale per 32 elements; q8_0: 32 int8,
// q4_0: 32 nibbles, element j low / j + 16 high of byte j), the exact bytes es::Quantize writes.
// A head of a quantized row starts on a block (the runner checks head dims % 32 == 0), so a
// head's pointer is KvAt(row, type, first column).
#pragma once

#include <cstdint>

#include "edgeseek/internal/core/dtype.h"

namespace es::cpu {

// The cache types the CPU backend stores (f32, f16, q8_0, q4_0).
bool KvTypeSupported(DType t);
// Writes n floats x into a cache row of type t (RowBytes(t, n) bytes; n % 32 == 0 for blocks).
void KvStoreRow(const float* x, int64_t n, DType t, void* row);
// Element `col` of a row (a block boundary for block types) as a pointer.
inline const uint8_t* KvAt(const uint8_t* row, DType t, int64_t col) {
  return row + RowBytes(t, col);
}
// Σ q[i]·row[i] over n elements of a row of type t. For f32 exactly cpu::Dot.
float KvDot(const float* q, const uint8_t* row, DType t, int64_t n);
// y[i] += w·row[i] over n elements. For f32 exactly cpu::Axpy.
void KvAxpy(float w, const uint8_t* row, DType t, float* y, int64_t n);

}  // namespace es::cpu
