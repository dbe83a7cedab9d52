// The ARM64 quantized matmul kernels of one path, included by matmul_quant_arm.cpp three times,
// each time inside its own namespace and `#pragma GCC target` region (no include guard):
//   ES_ARM_DOT  = 0: plain NEON, 16 int8 products as vmull_s8 + vpadalq_s16 into int32 lanes
//               = 1: SDOT (vdotq_s32, ARMv8.2 dotprod), 4 products per int32 lane
//   ES_ARM_MMLA = 1: also the SMMLA tile (vmmlaq_s32, i8mm) for R > 1
// Expects the common part of matmul_quant_arm.cpp (ActRow, Scalars, GroupQ, GroupQuants,
// DecodeScalars, ArmTraits) to be visible. Every function here ends in the same float
// operations per output element (see the header comment of matmul_quant_arm.cpp); only the way
// the exact int32 group sums are formed differs between paths.

// acc + 16 products q·x spread over 4 int32 lanes (which lane holds which products differs by
// path; the lanes' total is the exact integer dot either way).
ES_ARM_INLINE int32x4_t Dot16(int32x4_t acc, int8x16_t q, int8x16_t x) {
#if ES_ARM_DOT
  return vdotq_s32(acc, q, x);
#else
  // |q·x| <= 128 · 128 = 16384 fits the int16 products; vpadal adds pairs into int32 exactly.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(q), vget_low_s8(x)));
  return vpadalq_s16(acc, vmull_high_s8(q, x));
#endif
}

// The integer part of group g as 4 int32 lanes whose total is sA·Σ_{j<16} q_j x_j +
// sB·Σ_{j>=16} q_j x_j exactly. xg: the group's activations ([32] int8, or for Q8_0 [32] high
// bytes then [32] low bytes, x = 256·xh + xl).
template <class Block>
ES_ARM_INLINE int32x4_t GroupPartials(const GroupQ& q, const int8_t* xg, int32_t sa, int32_t sb) {
  const int32x4_t zero = vdupq_n_s32(0);
  if constexpr (ArmTraits<Block>::kWide) {
    const int32x4_t h = Dot16(Dot16(zero, q.lo, vld1q_s8(xg)), q.hi, vld1q_s8(xg + 16));
    const int32x4_t l = Dot16(Dot16(zero, q.lo, vld1q_s8(xg + 32)), q.hi, vld1q_s8(xg + 48));
    return vaddq_s32(vshlq_n_s32(h, 8), l);
  } else if constexpr (ArmTraits<Block>::kHalfScales) {
    const int32x4_t lo = Dot16(zero, q.lo, vld1q_s8(xg));
    const int32x4_t hi = Dot16(zero, q.hi, vld1q_s8(xg + 16));
    return vmlaq_n_s32(vmulq_n_s32(lo, sa), hi, sb);
  } else if constexpr (ArmTraits<Block>::kGroupScale) {
    return vmulq_n_s32(Dot16(Dot16(zero, q.lo, vld1q_s8(xg)), q.hi, vld1q_s8(xg + 16)), sa);
  } else {
    return Dot16(Dot16(zero, q.lo, vld1q_s8(xg)), q.hi, vld1q_s8(xg + 16));
  }
}

// Row kernel: 4 weight columns (rows w, w + stride, ...) against RT activation rows, the 4
// columns in the 4 f32 lanes of one accumulator per row: acc = fma(fd · dx, float(isum), acc)
// per group in order. RT = 1 is the GEMV; RT = 4 the GEMM of the NEON and dotprod paths, which
// decodes each weight group once for 4 rows and gives each row the operations of RT = 1.
// out: [RT rows][4 columns].
template <int RT, class Block>
ES_ARM_NOINLINE void DotRows4(const ActRow* x, size_t nb, const Block* w, size_t stride,
                              float* out) {
  using T = ArmTraits<Block>;
  float32x4_t acc[RT], mins[RT];
  for (int r = 0; r < RT; ++r) acc[r] = mins[r] = vdupq_n_f32(0.0f);
  for (size_t b = 0; b < nb; ++b) {
    const Block& b0 = w[b];
    const Block& b1 = w[stride + b];
    const Block& b2 = w[2 * stride + b];
    const Block& b3 = w[3 * stride + b];
    Scalars<Block> s0, s1, s2, s3;
    DecodeScalars(b0, &s0);
    DecodeScalars(b1, &s1);
    DecodeScalars(b2, &s2);
    DecodeScalars(b3, &s3);
    const float fd_arr[4] = {s0.fd, s1.fd, s2.fd, s3.fd};
    const float32x4_t fd = vld1q_f32(fd_arr);
    for (int g = 0; g < T::kGroups; ++g) {
      const size_t xg = b * T::kGroups + size_t(g);
      const GroupQ q0 = GroupQuants(b0, g), q1 = GroupQuants(b1, g), q2 = GroupQuants(b2, g),
                   q3 = GroupQuants(b3, g);
      const float fm_arr[4] = {s0.fm[g], s1.fm[g], s2.fm[g], s3.fm[g]};
      for (int r = 0; r < RT; ++r) {
        const int8_t* xp = x[r].q + xg * T::kActBytes;
        const int32x4_t p0 = GroupPartials<Block>(q0, xp, s0.sa[g], s0.sb[g]);
        const int32x4_t p1 = GroupPartials<Block>(q1, xp, s1.sa[g], s1.sb[g]);
        const int32x4_t p2 = GroupPartials<Block>(q2, xp, s2.sa[g], s2.sb[g]);
        const int32x4_t p3 = GroupPartials<Block>(q3, xp, s3.sa[g], s3.sb[g]);
        const int32x4_t isum = vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3));
        acc[r] = vfmaq_f32(acc[r], vmulq_n_f32(fd, x[r].d[xg]), vcvtq_f32_s32(isum));
        if constexpr (T::kMins) mins[r] = vfmaq_n_f32(mins[r], vld1q_f32(fm_arr), x[r].s[xg]);
      }
    }
  }
  for (int r = 0; r < RT; ++r) vst1q_f32(out + 4 * r, vsubq_f32(acc[r], mins[r]));
}

// One column: the same operations as one lane of DotRows4, in scalar registers.
template <class Block>
ES_ARM_NOINLINE void DotRows1(const ActRow& x, size_t nb, const Block* w, size_t, float* out) {
  using T = ArmTraits<Block>;
  float acc = 0.0f, mins = 0.0f;
  for (size_t b = 0; b < nb; ++b) {
    Scalars<Block> s;
    DecodeScalars(w[b], &s);
    for (int g = 0; g < T::kGroups; ++g) {
      const size_t xg = b * T::kGroups + size_t(g);
      const int32x4_t p =
          GroupPartials<Block>(GroupQuants(w[b], g), x.q + xg * T::kActBytes, s.sa[g], s.sb[g]);
      acc = std::fma(s.fd * x.d[xg], float(vaddvq_s32(p)), acc);
      if constexpr (T::kMins) mins = std::fma(s.fm[g], x.s[xg], mins);
    }
  }
  out[0] = acc - mins;
}

#if ES_ARM_MMLA
// Two 8-byte chunks of two 16-byte rows as SMMLA operands: [a[0..7] b[0..7]], [a[8..15] b[8..15]].
ES_ARM_INLINE void Pair(int8x16_t a, int8x16_t b, int8x16_t* k0, int8x16_t* k1) {
  const int64x2_t a64 = vreinterpretq_s64_s8(a), b64 = vreinterpretq_s64_s8(b);
  *k0 = vreinterpretq_s8_s64(vzip1q_s64(a64, b64));
  *k1 = vreinterpretq_s8_s64(vzip2q_s64(a64, b64));
}

// Σ over 16 elements for 2 rows × 2 columns: lanes (r0,c0), (r0,c1), (r1,c0), (r1,c1).
ES_ARM_INLINE int32x4_t Mmla16(int32x4_t acc, int8x16_t xa0, int8x16_t xa1, int8x16_t wb0,
                               int8x16_t wb1) {
  return vmmlaq_s32(vmmlaq_s32(acc, xa0, wb0), xa1, wb1);
}

// GEMM tile: 4 activation rows × 4 weight columns, each output (r, c) through the very float
// operations of DotRows4's lane c for row r. out: [4 rows][4 columns]. Replaces DotRows4<4>.
template <class Block>
ES_ARM_NOINLINE void MmlaTile4x4(const ActRow* x, size_t nb, const Block* w, size_t stride,
                                 float* out) {
  using T = ArmTraits<Block>;
  constexpr int kPlanes = T::kWide ? 2 : 1;
  // acc[rp][cp]: rows 2rp, 2rp+1 × columns 2cp, 2cp+1 in SMMLA's lane order.
  float32x4_t acc[2][2], mins[2][2];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) acc[i][j] = mins[i][j] = vdupq_n_f32(0.0f);
  }
  for (size_t b = 0; b < nb; ++b) {
    const Block* blk[4] = {&w[b], &w[stride + b], &w[2 * stride + b], &w[3 * stride + b]};
    Scalars<Block> s[4];
    for (int c = 0; c < 4; ++c) DecodeScalars(*blk[c], &s[c]);
    const float fd_arr[2][4] = {{s[0].fd, s[1].fd, s[0].fd, s[1].fd},
                                {s[2].fd, s[3].fd, s[2].fd, s[3].fd}};
    const float32x4_t fd[2] = {vld1q_f32(fd_arr[0]), vld1q_f32(fd_arr[1])};
    for (int g = 0; g < T::kGroups; ++g) {
      const size_t xg = b * T::kGroups + size_t(g);
      // Weight operands: wk[cp][half][chunk].
      int8x16_t wk[2][2][2];
      for (int cp = 0; cp < 2; ++cp) {
        const GroupQ qa = GroupQuants(*blk[2 * cp], g), qb = GroupQuants(*blk[2 * cp + 1], g);
        Pair(qa.lo, qb.lo, &wk[cp][0][0], &wk[cp][0][1]);
        Pair(qa.hi, qb.hi, &wk[cp][1][0], &wk[cp][1][1]);
      }
      int32_t sa_arr[2][4], sb_arr[2][4];
      float fm_arr[2][4];
      for (int cp = 0; cp < 2; ++cp) {
        for (int l = 0; l < 4; ++l) {
          sa_arr[cp][l] = s[2 * cp + (l & 1)].sa[g];
          sb_arr[cp][l] = s[2 * cp + (l & 1)].sb[g];
          fm_arr[cp][l] = s[2 * cp + (l & 1)].fm[g];
        }
      }
      for (int rp = 0; rp < 2; ++rp) {
        const ActRow& x0 = x[2 * rp];
        const ActRow& x1 = x[2 * rp + 1];
        // Activation operands: xk[plane][half][chunk].
        int8x16_t xk[kPlanes][2][2];
        for (int pl = 0; pl < kPlanes; ++pl) {
          for (int h = 0; h < 2; ++h) {
            const size_t off = xg * T::kActBytes + size_t(32 * pl + 16 * h);
            Pair(vld1q_s8(x0.q + off), vld1q_s8(x1.q + off), &xk[pl][h][0], &xk[pl][h][1]);
          }
        }
        const float dx_arr[4] = {x0.d[xg], x0.d[xg], x1.d[xg], x1.d[xg]};
        const float32x4_t dx = vld1q_f32(dx_arr);
        for (int cp = 0; cp < 2; ++cp) {
          const int32x4_t zero = vdupq_n_s32(0);
          int32x4_t isum;
          if constexpr (T::kWide) {
            int32x4_t pl_sum[kPlanes];
            for (int pl = 0; pl < kPlanes; ++pl) {
              pl_sum[pl] =
                  Mmla16(Mmla16(zero, xk[pl][0][0], xk[pl][0][1], wk[cp][0][0], wk[cp][0][1]),
                         xk[pl][1][0], xk[pl][1][1], wk[cp][1][0], wk[cp][1][1]);
            }
            isum = vaddq_s32(vshlq_n_s32(pl_sum[0], 8), pl_sum[kPlanes - 1]);
          } else if constexpr (T::kHalfScales) {
            const int32x4_t lo = Mmla16(zero, xk[0][0][0], xk[0][0][1], wk[cp][0][0], wk[cp][0][1]);
            const int32x4_t hi = Mmla16(zero, xk[0][1][0], xk[0][1][1], wk[cp][1][0], wk[cp][1][1]);
            isum = vmlaq_s32(vmulq_s32(lo, vld1q_s32(sa_arr[cp])), hi, vld1q_s32(sb_arr[cp]));
          } else {
            isum = Mmla16(Mmla16(zero, xk[0][0][0], xk[0][0][1], wk[cp][0][0], wk[cp][0][1]),
                          xk[0][1][0], xk[0][1][1], wk[cp][1][0], wk[cp][1][1]);
            if constexpr (T::kGroupScale) isum = vmulq_s32(isum, vld1q_s32(sa_arr[cp]));
          }
          acc[rp][cp] = vfmaq_f32(acc[rp][cp], vmulq_f32(fd[cp], dx), vcvtq_f32_s32(isum));
          if constexpr (T::kMins) {
            const float xs_arr[4] = {x0.s[xg], x0.s[xg], x1.s[xg], x1.s[xg]};
            mins[rp][cp] = vfmaq_f32(mins[rp][cp], vld1q_f32(fm_arr[cp]), vld1q_f32(xs_arr));
          }
        }
      }
    }
  }
  for (int rp = 0; rp < 2; ++rp) {
    for (int cp = 0; cp < 2; ++cp) {
      float v[4];
      vst1q_f32(v, vsubq_f32(acc[rp][cp], mins[rp][cp]));
      // Lane order (r0,c0), (r0,c1), (r1,c0), (r1,c1).
      out[(2 * rp) * 4 + 2 * cp] = v[0];
      out[(2 * rp) * 4 + 2 * cp + 1] = v[1];
      out[(2 * rp + 1) * 4 + 2 * cp] = v[2];
      out[(2 * rp + 1) * 4 + 2 * cp + 1] = v[3];
    }
  }
}
#endif  // ES_ARM_MMLA

template <class Block>
ArmKernels<Block> KernelsFor() {
  ArmKernels<Block> k;
  k.dot4 = &DotRows4<1, Block>;
  k.dot1 = &DotRows1<Block>;
#if ES_ARM_MMLA
  k.tile4x4 = &MmlaTile4x4<Block>;
#else
  k.tile4x4 = &DotRows4<4, Block>;
#endif
  return k;
}
