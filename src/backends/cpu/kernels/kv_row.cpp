// KV cache rows of type T (kv_row.h). f32 goes straight to the SIMD dot and axpy (vec.h), so an
// f32 cache computes what it did before there were other types. f16 and the block types are
// decoded 32 elements at a time into a stack tile that stays in L1 and then go through the same
// kernels: per block the scale is applied once to the block's dot (q8_0 / q4_0) rather than per
// element, as the integer-dot GPU kernels do.
#include "cpu/kernels/kv_row.h"

#include <cstring>

#include "cpu/kernels/vec.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::cpu {
namespace {

constexpr int64_t kTile = kQK;  // elements decoded at once (one block)

// Elements [i, i + n) of an f16 row as f32 (n <= kTile).
void F16Tile(const uint8_t* row, int64_t i, int64_t n, float* out) {
  ConvertRowToF32(DType::kF16, row + 2 * i, out, n);
}
// The 32 quants of block b as floats, unscaled; returns the block's scale.
float Q8Tile(const uint8_t* row, int64_t b, float* out) {
  BlockQ8_0 blk;
  std::memcpy(&blk, row + size_t(b) * sizeof(BlockQ8_0), sizeof blk);
  for (int j = 0; j < kQK; ++j) out[j] = float(blk.qs[j]);
  return F16ToF32(blk.d);
}
float Q4Tile(const uint8_t* row, int64_t b, float* out) {
  BlockQ4_0 blk;
  std::memcpy(&blk, row + size_t(b) * sizeof(BlockQ4_0), sizeof blk);
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = float((blk.qs[j] & 0xF) - 8);
    out[j + kQK / 2] = float((blk.qs[j] >> 4) - 8);
  }
  return F16ToF32(blk.d);
}

}  // namespace

bool KvTypeSupported(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kQ4_0;
}

void KvStoreRow(const float* x, int64_t n, DType t, void* row) {
  if (!KvTypeSupported(t))
    Fail("cpu backend: KV cache type ", Name(t), " is not supported (f32, f16, q8_0 or q4_0)");
  ES_ASSERT(!IsQuantized(t) || n % kQK == 0);
  Quantize(t, x, row, n);  // f32: a copy; f16: rounded; q8_0 / q4_0: GGUF's blocks
}

float KvDot(const float* q, const uint8_t* row, DType t, int64_t n) {
  float tile[kTile];
  float sum = 0.0f;
  switch (t) {
    case DType::kF32:
      return Dot(q, reinterpret_cast<const float*>(row), n);
    case DType::kF16:
      for (int64_t i = 0; i < n; i += kTile) {
        const int64_t m = n - i < kTile ? n - i : kTile;
        F16Tile(row, i, m, tile);
        sum += Dot(q + i, tile, m);
      }
      return sum;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float d = Q8Tile(row, b, tile);
        sum += d * Dot(q + b * kQK, tile, kQK);
      }
      return sum;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float d = Q4Tile(row, b, tile);
        sum += d * Dot(q + b * kQK, tile, kQK);
      }
      return sum;
    default:
      Fail("cpu backend: KV cache type ", Name(t), " is not supported (f32, f16, q8_0 or q4_0)");
  }
}

void KvAxpy(float w, const uint8_t* row, DType t, float* y, int64_t n) {
  float tile[kTile];
  switch (t) {
    case DType::kF32:
      Axpy(w, reinterpret_cast<const float*>(row), y, n);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; i += kTile) {
        const int64_t m = n - i < kTile ? n - i : kTile;
        F16Tile(row, i, m, tile);
        Axpy(w, tile, y + i, m);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float d = Q8Tile(row, b, tile);
        Axpy(w * d, tile, y + b * kQK, kQK);
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float d = Q4Tile(row, b, tile);
        Axpy(w * d, tile, y + b * kQK, kQK);
      }
      return;
    default:
      Fail("cpu backend: KV cache type ", Name(t), " is not supported (f32, f16, q8_0 or q4_0)");
  }
}

}  // namespace es::cpu
