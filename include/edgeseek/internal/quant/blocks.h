// Block-quantized tensor formats: the exact binary layouts of GGUF/llama.cpp's Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K and edgeseek's own I4G, with scalar reference
// quantize/dequantize. These structs are the contract the CPU and Vulkan kernels build on; every
// SIMD or shader path is tested against Dequantize/Quantize here.
//
// A row of n elements of a block type is n / BlockElems(t) consecutive blocks (no padding).
// All multi-byte fields are little-endian; "f16" fields are IEEE binary16 bit patterns.
// Value formulas (x = the reconstructed float; q, qh, scales as stored):
//   Q8_0  (32/34 B):  x[j] = d * qs[j]
//   Q4_0  (32/18 B):  x[j] = d * ((qs[j] & 0xF) - 8),  x[j+16] = d * ((qs[j] >> 4) - 8),  j < 16
//   Q4_1  (32/20 B):  x[j] = d * (qs[j] & 0xF) + m,    x[j+16] = d * (qs[j] >> 4) + m
//   Q5_0  (32/22 B):  5-bit q = low nibble as Q4_0 | bit j (resp. j+16) of the u32 qh << 4;
//                     x = d * (q - 16)
//   Q5_1  (32/24 B):  same 5-bit q;  x = d * q + m
//   Q4_K  (256/144 B): 8 sub-blocks of 32, 6-bit scale sc[s] and min mn[s] packed in scales[12]
//                     (see UnpackScaleMinK4); x = d * sc[s] * q - dmin * mn[s];
//                     in each 64-chunk c, sub-block 2c takes the low nibbles of qs[32c..32c+31]
//                     and sub-block 2c+1 the high nibbles.
//   Q5_K  (256/176 B): as Q4_K plus a fifth bit: element l of 64-chunk c has bit (2c) of qh[l]
//                     (first 32) or bit (2c+1) of qh[l] (second 32) as bit 4.
//   Q6_K  (256/210 B): 16 sub-blocks of 16 with int8 scales; x = d * scales[s] * (q - 32), q
//                     6-bit from ql (4 low bits) and qh (2 high bits); see DequantizeQ6K.
//   Q8_K  (256/292 B): x[j] = d * qs[j], d an f32; bsums[g] = sum of qs[16g..16g+15].
//   I4G   (128/66 B):  edgeseek's INT4 group format: one f16 scale d for 128 weights,
//                     symmetric: x[j] = d * (nibble(j) - 8), nibble in [0, 15]. Nibbles are
//                     packed low-first: element j lives in byte j/2, in the low nibble when j is
//                     even and in the high nibble when j is odd (unlike Q4_0's split halves, so
//                     that a kernel unpacks adjacent pairs).
//   I4F   (32/24 B):   edgeseek's INT4 with an f32 scale d and a zero point z (0..15) per 32
//                     weights, nibbles in Q4_0's order: x[j] = float((qs[j] & 0xF) - z) * d,
//                     x[j+16] = float((qs[j] >> 4) - z) * d (the integer q - z, exact in f32,
//                     times d: one rounding). It holds onnxruntime's MatMulNBits 4-bit weights
//                     of f32 models (f32 scales, 4-bit zero points, blocks of 32..256) bit for
//                     bit (src/quant/nbits.cpp). The 3 pad bytes are zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/dtype.h"

namespace es {

inline constexpr int kQK = 32;    // elements per legacy block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
inline constexpr int kQKK = 256;  // elements per K-quant super-block
inline constexpr int kQKI4G = 128;

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // element j: low nibble of qs[j]; element j+16: high nibble of qs[j]
};
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 min (added)
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // u32 (little-endian): bit j = fifth bit of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;          // f16 super-block scale for the 6-bit scales
  uint16_t dmin;       // f16 super-block scale for the 6-bit mins
  uint8_t scales[12];  // 8 scales + 8 mins, 6 bits each (UnpackScaleMinK4)
  uint8_t qs[128];     // 4-bit quants
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];   // fifth bits
  uint8_t qs[128];  // low 4 bits
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // per 16-element sub-block
  uint16_t d;         // f16 super-block scale
};
struct BlockQ8_K {
  float d;  // f32 scale
  int8_t qs[256];
  int16_t bsums[16];  // sums of qs over groups of 16 (K-quant dot products use them for mins)
};
struct BlockI4G {
  uint16_t d;      // f16 scale
  uint8_t qs[64];  // element j in byte j/2: low nibble for even j, high nibble for odd j
};
struct BlockI4F {
  float d;         // f32 scale
  uint8_t qs[16];  // element j: low nibble of qs[j]; element j+16: high nibble of qs[j]
  uint8_t z;       // zero point, 0..15
  uint8_t pad[3];  // zero
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockI4G) == 66);
static_assert(sizeof(BlockI4F) == 24);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block:
//   j < 4: sc = scales[j] & 63,  mn = scales[j+4] & 63
//   j >= 4: sc = (scales[j+4] & 0xF) | ((scales[j-4] >> 6) << 4),
//           mn = (scales[j+4] >> 4)  | ((scales[j]   >> 6) << 4)
// Inline: the CPU matmul kernels decode every weight block with it (kquant_scales.h), in two
// loops over j < 4 and j >= 4, where the branch folds away.
[[gnu::always_inline]] inline void UnpackScaleMinK4(int j, const uint8_t* scales, uint8_t* sc,
                                                    uint8_t* mn) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *mn = scales[j + 4] & 63;
  } else {
    *sc = uint8_t((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *mn = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// True for the types Quantize/Dequantize handle: F32, F16, BF16 and every block type above.
bool CanQuantize(DType t);

// Converts n elements of type t at src to f32. Dense types (F32, F16, BF16, F8E4M3, I32, I8)
// are converted elementwise. n must be a multiple of BlockElems(t) (es::Error otherwise).
void Dequantize(DType t, const void* src, float* dst, int64_t n);

// Encodes n floats as type t (F32, F16, BF16 or any block type above) into dst, which holds
// RowBytes(t, n) bytes. Deterministic: the same input always gives the same bytes (no threads,
// no SIMD, no data-dependent iteration order). The scale searches follow llama.cpp's reference
// quantizers (Q4_K/Q5_K: weighted min+scale search; Q6_K: signed scale search), so files match
// llama.cpp's quality; Q8_0..Q5_1 use the plain formulas of llama.cpp's references.
void Quantize(DType t, const float* src, void* dst, int64_t n);

}  // namespace es
