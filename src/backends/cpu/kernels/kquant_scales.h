// The 6-bit scales and minimums of Q4_K and Q5_K blocks (12 bytes `scales`, 8 groups of 32),
// unpacked as UnpackScaleMinK4 (src/quant) unpacks them, written once for the block decoders of
// the quantized matmul kernels: x86 and portable (BlockScalars, matmul_quant-inl.h) and ARM64
// (Scalars, matmul_quant_arm.cpp). Always inlined: it runs once per weight block inside their
// loops, and the two decoders compile to the code they had when each carried its own copy.
#pragma once

#include <cstdint>
#include <type_traits>

namespace es::cpu {

// For groups g = 0..7 of a block with scale bytes q and minimum multiplier dmin:
//   s->sa[g] = s->sb[g] = scale_g,  s->fm[g] = dmin · min_g      (scale_g, min_g in 0..63)
// Groups 0..3 are in the low 6 bits of q[g] (scale) and q[g + 4] (min); groups 4..7 in the low
// (scale) and high (min) nibble of q[g + 4], with the top 2 bits of q[g - 4] (scale) and q[g]
// (min) as bits 4 and 5. Scalars: any struct with integer arrays sa, sb and a float array fm of
// at least 8 groups.
template <class Scalars>
[[gnu::always_inline]] inline void UnpackScalesMinsK(const uint8_t* q, float dmin, Scalars* s) {
  using Int = std::remove_reference_t<decltype(s->sa[0])>;
  for (int g = 0; g < 4; ++g) {
    s->sa[g] = s->sb[g] = Int(q[g] & 63);
    s->fm[g] = dmin * float(q[g + 4] & 63);
  }
  for (int g = 4; g < 8; ++g) {
    s->sa[g] = s->sb[g] = Int((q[g + 4] & 0xF) | ((q[g - 4] >> 6) << 4));
    s->fm[g] = dmin * float((q[g + 4] >> 4) | ((q[g] >> 6) << 4));
  }
}

}  // namespace es::cpu
