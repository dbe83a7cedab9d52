// Element types. Dense types (F32, F16, BF16, F8_E4M3, I32) and block-quantized types (GGUF's
// Q8_0 … Q6_K and edgeseek's INT4 group format) are all first-class: a tensor row of n elements
// occupies RowBytes(type, n) bytes, n a multiple of BlockElems(type). Kernels are chosen by
// (op, weight type, activation type, backend); the block layouts live in src/quant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace es {

enum class DType : uint8_t {
  kF32 = 0,
  kF16,
  kBF16,
  kF8E4M3,  // weights only; converted at load (DeepSeek-V3's FP8 release)
  kI32,
  kI8,
  // block-quantized (formats: src/quant/blocks.h)
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,  // activations for K-quant dot products
  kI4G,   // edgeseek INT4 group-wise: 128 weights, one f16 scale, symmetric
  kI4F,   // edgeseek INT4 with an f32 scale and a 4-bit zero point per 32 (MatMulNBits of f32)
  kCount
};

struct DTypeInfo {
  std::string_view name;
  int block_elems;  // elements per block (1 for dense types)
  int block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& Info(DType t);
inline std::string_view Name(DType t) { return Info(t).name; }
inline int BlockElems(DType t) { return Info(t).block_elems; }
inline bool IsQuantized(DType t) { return Info(t).quantized; }
// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers that
// take user input, asserted otherwise).
size_t RowBytes(DType t, int64_t n);
// Parses "f32", "F16", "bf16", "q8_0", … (case-insensitive); throws es::Error naming the text.
DType ParseDType(std::string_view s);

}  // namespace es
