// kv_write.glsl: writes one KV cache row of the cache type (kv_type.glsl's layout), the one
// place that knows how a row is stored, for every shader that writes the cache (kv_store.comp,
// fused stores). The includer declares the cache as `uint KV_OUT[]` (#define KV_OUT to its name;
// not writeonly for the block types: their scales are set with atomics) and defines
// `float KvSrc(uint t, uint col)`, element col of the t-th row it writes. A row is written in
// KvWriteUnits(W) units, each by one invocation, in any order:
//   f32: one element; f16: two (one word); q8_0 / q4_0: one 32-element block, quantized as GGUF's
//   reference (q8_0: d = amax / 127, q = round(x / d) half away from zero; q4_0: d = m / -8, m
//   the element of largest magnitude, the first of equals, q = min(15, trunc(x / d + 8.5))).
// A block's scale shares its word with the next block's (possibly the next row's), so it is
// merged in with atomicAnd / atomicOr rather than stored.
uint KvWriteUnits(uint W) {
#if defined(KV_QUANT)
  return W / 32u;
#elif defined(KV_F16)
  return W / 2u;
#else
  return W;
#endif
}

void KvWriteUnit(uint t, uint R, uint u, uint W) {
#if defined(KV_QUANT)
  const uint c0 = 32u * u;
  float x[32];
  float amax = 0.0, m = 0.0;
  [[unroll]] for (uint j = 0u; j < 32u; ++j) {
    x[j] = KvSrc(t, c0 + j);
    if (amax < abs(x[j])) {
      amax = abs(x[j]);
      m = x[j];
    }
  }
#if defined(KV_Q8_0)
  const float d = amax / 127.0;
  const float id = d != 0.0 ? 1.0 / d : 0.0;
  const uint qb = KvQuantBase(R, W) + c0 / 4u;
  [[unroll]] for (uint k = 0u; k < 8u; ++k) {
    uint w = 0u;
    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
      const float v = x[4u * k + e] * id;
      const int q = int(sign(v) * floor(abs(v) + 0.5));
      w |= (uint(q) & 255u) << (8u * e);
    }
    KV_OUT[qb + k] = w;
  }
#else
  const float d = m / -8.0;
  const float id = d != 0.0 ? 1.0 / d : 0.0;
  const uint qb = KvQuantBase(R, W) + u * 4u;
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    uint w = 0u;
    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
      const uint j = 4u * k + e;
      const uint lo = uint(min(15, int(x[j] * id + 8.5)));
      const uint hi = uint(min(15, int(x[j + 16u] * id + 8.5)));
      w |= (lo | (hi << 4)) << (8u * e);
    }
    KV_OUT[qb + k] = w;
  }
#endif
  const uint si = KvScaleIndex(R, c0, W), sw = KvScaleWord(R, c0, W);
  const uint sh = 16u * (si & 1u);
  const uint bits = (packHalf2x16(vec2(d, 0.0)) & 0xffffu) << sh;
  atomicAnd(KV_OUT[sw], ~(0xffffu << sh));
  atomicOr(KV_OUT[sw], bits);
#elif defined(KV_F16)
  KV_OUT[(R * W) / 2u + u] = packHalf2x16(vec2(KvSrc(t, 2u * u), KvSrc(t, 2u * u + 1u)));
#else
  KV_OUT[R * W + u] = floatBitsToUint(KvSrc(t, u));
#endif
}
