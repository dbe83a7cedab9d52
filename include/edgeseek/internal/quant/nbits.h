// Block-quantized weights in onnxruntime's layout (com.microsoft MatMulNBits and
// GatherBlockQuantized): per output row n, ceil(K / block) blocks of `block` columns, each
// element a `bits`-wide unsigned integer q (4 bits: element j of a block in byte j/2, the low
// nibble for even j), one scale s and one zero point z per block (z absent: 2^(bits-1)),
// value = (q - z) * s. Optional g_idx[k] names the block of column k (act-order).
//
// NBitsToTensor maps such a weight onto an edgeseek block type without requantizing wherever the
// values come out bit-exact:
//   Q4_0  4 bits, block a multiple of 32, z = 8 everywhere, s exact in f16 (d = s per 32 columns)
//   Q4_1  4 bits, same blocks, any z, s and m = -s*z exact in f16 and q*s + m == (q - z)*s in f32
//         for every q of the block
//   Q8_0  8 bits, same blocks, z = 128 everywhere, s exact in f16 (qs = q - 128)
//   I4F   4 bits, same blocks, z integers in 0..15 (packed zero points always are), any scales
//         (f32 d and z per 32 columns; the f32 models' weights of onnxruntime's quantizer)
// and dequantizes to F32 (exact, 8x the bytes of 4 bits) otherwise, saying why: block 16,
// act-order g_idx, float zero points off the integers, 8-bit weights with other zero points or
// scales not exact in f16.
#pragma once

#include <cstdint>
#include <string>

#include "edgeseek/internal/core/tensor.h"

namespace es {

struct NBitsWeight {
  std::string name;
  int64_t n = 0, k = 0;  // rows (output features), columns (input features)
  int bits = 4, block = 32;
  const uint8_t* q = nullptr;      // [n][blocks][block * bits / 8]
  DType scale_type = DType::kF32;  // F32, F16 or BF16
  const void* scales = nullptr;    // [n * blocks]
  const uint8_t* zp_packed =
      nullptr;                     // uint8 zero points packed like q: [n][ceil(blocks * bits / 8)]
  const void* zp_float = nullptr;  // or zero points of scale_type: [n * blocks]
  const int32_t* g_idx = nullptr;  // [k], or null
  int64_t blocks() const { return (k + block - 1) / block; }
};

// The weight as an edgeseek tensor [n, k] (see above). `why_f32` (when not null) receives the
// reason a weight was dequantized to F32, empty when a block type fit.
Tensor NBitsToTensor(const NBitsWeight& w, std::string* why_f32 = nullptr);
// The value of element (row, col) as onnxruntime defines it (the reference of the tests).
float NBitsValue(const NBitsWeight& w, int64_t row, int64_t col);

}  // namespace es
