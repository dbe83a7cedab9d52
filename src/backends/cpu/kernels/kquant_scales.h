// The 6-bit scales and minimums of Q4_K and Q5_K blocks (12 bytes `scales`, 8 groups of 32),
// unpacked by UnpackScaleMinK4 (edgeseek/internal/quant/blocks.h, the quantizers' own), for the
// block decoders of the quantized matmul kernels: x86 and portable (BlockScalars,
// matmul_quant-inl.h) and ARM64 (Scalars, matmul_quant_arm.cpp). Always inlined: it runs once per
// weight block inside their loops.
#pragma once

#include <cstdint>
#include <type_traits>

#include "edgeseek/internal/quant/blocks.h"

namespace es::cpu {

// Group g of a block with scale bytes q and minimum multiplier dmin:
//   s->sa[g] = s->sb[g] = scale_g,  s->fm[g] = dmin · min_g      (scale_g, min_g in 0..63)
// Scalars: any struct with integer arrays sa, sb and a float array fm of at least 8 groups.
template <class Scalars>
[[gnu::always_inline]] inline void UnpackScaleMinK(int g, const uint8_t* q, float dmin,
                                                   Scalars* s) {
  using Int = std::remove_reference_t<decltype(s->sa[0])>;
  uint8_t scale, min;
  UnpackScaleMinK4(g, q, &scale, &min);
  s->sa[g] = s->sb[g] = Int(scale);
  s->fm[g] = dmin * float(min);
}

// All 8 groups. Two loops, for the two halves of the layout: the loops need not unroll (-O2
// does not) for UnpackScaleMinK4's branch on g to fold away in each.
template <class Scalars>
[[gnu::always_inline]] inline void UnpackScalesMinsK(const uint8_t* q, float dmin, Scalars* s) {
  for (int g = 0; g < 4; ++g) UnpackScaleMinK(g, q, dmin, s);
  for (int g = 4; g < 8; ++g) UnpackScaleMinK(g, q, dmin, s);
}

}  // namespace es::cpu
