// kv_type.glsl: how a KV cache row of the cache type is laid out and read (docs/kv_cache.md,
// "KV types"). The includer defines one of KV_F32, KV_F16, KV_Q8_0, KV_Q4_0; a row is addressed
// by its cache row R (kv_addr.glsl's KvRow), a column and the part's width W (elements).
//   f32 / f16: element (R, col) is element R * W + col of the part (one float, or half of a word).
//   q8_0 / q4_0 (KV_QUANT, W % 32 == 0): GGUF's blocks of 32 with one f16 scale each, arranged per
//   16-row block of the cache so that every load is aligned: the 16 rows' quants (q8_0: W int8
//   per row; q4_0: W / 2 bytes, element j of a block in the low nibble of its byte j, j + 16 in
//   the high one, as GGUF) then the 16 rows' scales (W / 32 halves per row). The bytes per row
//   are GGUF's (34 or 18 per 32 elements); an f16 scale d gives element d * q (q8_0) or
//   d * (q - 8) (q4_0).
// KV_LOADS(BUF, L1, L2, L4) defines float L1(R, col, W), vec2 L2(R, col, W) (col even) and vec4
// L4(R, col, W) (col % 4 == 0): one, two or four adjacent elements (one quant word and one scale)
// of the uint buffer BUF; the writer is kv_write.glsl.
#if defined(KV_Q8_0) || defined(KV_Q4_0)
#define KV_QUANT 1
#endif

#if defined(KV_Q8_0)
uint KvQuantWords(uint W) { return W / 4u; }          // per row
uint KvQuantWord(uint col) { return col / 4u; }       // within a row's quants
uint KvQuantShift(uint col) { return 8u * (col & 3u); }
#elif defined(KV_Q4_0)
uint KvQuantWords(uint W) { return W / 8u; }
uint KvQuantWord(uint col) { return (col / 32u) * 4u + (col & 15u) / 4u; }
uint KvQuantShift(uint col) { return 8u * (col & 3u) + ((col & 16u) != 0u ? 4u : 0u); }
#endif

#ifdef KV_QUANT
// Words of one 16-row block: the quants, then 16 x W / 32 halves of scales (W / 4 words).
uint KvBlockWords(uint W) { return 16u * KvQuantWords(W) + W / 4u; }
uint KvQuantBase(uint R, uint W) { return (R >> 4) * KvBlockWords(W) + (R & 15u) * KvQuantWords(W); }
// The scale of the 32-block of (R, col): half `KvScaleIndex & 1` of word KvScaleWord.
uint KvScaleIndex(uint R, uint col, uint W) { return (R & 15u) * (W / 32u) + col / 32u; }
uint KvScaleWord(uint R, uint col, uint W) {
  return (R >> 4) * KvBlockWords(W) + 16u * KvQuantWords(W) + KvScaleIndex(R, col, W) / 2u;
}
#if defined(KV_Q8_0)
float KvQ(uint w, uint col) { return float(bitfieldExtract(int(w), int(KvQuantShift(col)), 8)); }
vec4 KvQ4(uint w, uint col) {
  return vec4(bitfieldExtract(int(w), 0, 8), bitfieldExtract(int(w), 8, 8), bitfieldExtract(int(w), 16, 8),
              bitfieldExtract(int(w), 24, 8));
}
#else
float KvQ(uint w, uint col) { return float(int((w >> KvQuantShift(col)) & 15u) - 8); }
vec4 KvQ4(uint w, uint col) {
  const uint s = (col & 16u) != 0u ? 4u : 0u;
  return vec4(ivec4((w >> s) & 15u, (w >> (s + 8u)) & 15u, (w >> (s + 16u)) & 15u, (w >> (s + 24u)) & 15u) - 8);
}
#endif
#define KV_LOADS(BUF, L1, L2, L4)                                                            \
  float L1(uint R, uint col, uint W) {                                                       \
    const float d = unpackHalf2x16(BUF[KvScaleWord(R, col, W)])[KvScaleIndex(R, col, W) & 1u]; \
    return d * KvQ(BUF[KvQuantBase(R, W) + KvQuantWord(col)], col);                          \
  }                                                                                          \
  vec2 L2(uint R, uint col, uint W) {                                                        \
    const float d = unpackHalf2x16(BUF[KvScaleWord(R, col, W)])[KvScaleIndex(R, col, W) & 1u]; \
    const uint w = BUF[KvQuantBase(R, W) + KvQuantWord(col)];                                \
    return d * vec2(KvQ(w, col), KvQ(w, col + 1u));                                          \
  }                                                                                          \
  vec4 L4(uint R, uint col, uint W) {                                                        \
    const float d = unpackHalf2x16(BUF[KvScaleWord(R, col, W)])[KvScaleIndex(R, col, W) & 1u]; \
    return d * KvQ4(BUF[KvQuantBase(R, W) + KvQuantWord(col)], col);                         \
  }
#elif defined(KV_F16)
#define KV_LOADS(BUF, L1, L2, L4)                                                            \
  float L1(uint R, uint col, uint W) {                                                       \
    const uint e = R * W + col;                                                              \
    return unpackHalf2x16(BUF[e >> 1])[e & 1u];                                              \
  }                                                                                          \
  vec2 L2(uint R, uint col, uint W) { return unpackHalf2x16(BUF[(R * W + col) >> 1]); }     \
  vec4 L4(uint R, uint col, uint W) {                                                        \
    const uint e = (R * W + col) >> 1;                                                       \
    return vec4(unpackHalf2x16(BUF[e]), unpackHalf2x16(BUF[e + 1u]));                        \
  }
#else
#define KV_LOADS(BUF, L1, L2, L4)                                                            \
  float L1(uint R, uint col, uint W) { return uintBitsToFloat(BUF[R * W + col]); }           \
  vec2 L2(uint R, uint col, uint W) {                                                        \
    const uint e = R * W + col;                                                              \
    return uintBitsToFloat(uvec2(BUF[e], BUF[e + 1u]));                                      \
  }                                                                                          \
  vec4 L4(uint R, uint col, uint W) {                                                        \
    const uint e = R * W + col;                                                              \
    return uintBitsToFloat(uvec4(BUF[e], BUF[e + 1u], BUF[e + 2u], BUF[e + 3u]));            \
  }
#endif
