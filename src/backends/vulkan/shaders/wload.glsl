// Weight element loads by type, from a buffer seen as 32-bit words. Before including, define
// WORD(i) (the i-th 32-bit word) and, for the vector path, QUAD(i) (the i-th uvec4), and one of
// W_F32 / W_F16 / W_BF16 / W_Q8_0 / W_Q4_0. bf16 is read as its 16 bits shifted into an f32's
// top half; f16 through unpackHalf2x16 (no 16-bit storage feature needed).
//
// Quantized types are repacked at load (weights.cpp) into word-aligned rows: a row of K
// elements (K % 32 == 0) holds its quants first, then its K/32 f16 block scales padded to a
// multiple of 16 bytes:
//   Q8_0: K bytes of int8 quants (K/4 words) | scales      x = d[b] * q
//   Q4_0: per block of 32, 16 bytes as GGUF's qs (element j < 16: low nibble of byte j,
//         element j + 16: its high nibble) (K/8 words) | scales      x = d[b] * (nibble - 8)
// so element i = row * K + k needs K: define WCOLS (an expression) before including.
#if defined(W_Q8_0) || defined(W_Q4_0)
#define W_QUANT 1
#ifndef WCOLS
#error "define WCOLS (the weight row length) for quantized weights"
#endif
#if defined(W_Q8_0)
const uint kQWordsPerBlock = 8u;
#else
const uint kQWordsPerBlock = 4u;
#endif
// Words of one repacked row of K elements.
uint QRowWords(uint K) { return (K / 32u) * kQWordsPerBlock + ((K / 32u + 7u) / 8u) * 4u; }
float QScale(uint base, uint K, uint b) {
  return unpackHalf2x16(WORD(base + (K / 32u) * kQWordsPerBlock + (b >> 1)))[b & 1u];
}
#endif

float wload(uint i) {
#if defined(W_F32)
  return uintBitsToFloat(WORD(i));
#elif defined(W_F16)
  return unpackHalf2x16(WORD(i >> 1))[i & 1u];
#elif defined(W_BF16)
  const uint w = WORD(i >> 1);
  return uintBitsToFloat((i & 1u) == 0u ? (w << 16) : (w & 0xffff0000u));
#elif defined(W_QUANT)
  const uint K = WCOLS, row = i / K, k = i % K, b = k / 32u, j = k % 32u;
  const uint base = row * QRowWords(K);
#if defined(W_Q8_0)
  const int q = int(WORD(base + k / 4u) << (24u - 8u * (k & 3u))) >> 24;
  return QScale(base, K, b) * float(q);
#else
  const uint byte = (WORD(base + b * 4u + (j & 15u) / 4u) >> (8u * (j & 3u))) & 0xffu;
  return QScale(base, K, b) * (float(j < 16u ? (byte & 15u) : (byte >> 4)) - 8.0);
#endif
#else
#error "define W_F32, W_F16, W_BF16, W_Q8_0 or W_Q4_0"
#endif
}

#ifdef QUAD
// Elements [8 q, 8 q + 8) (q = element index / 8; rows must start on 8-element boundaries).
void wload8(uint q, out float v[8]) {
#if defined(W_F32)
  const uvec4 a = QUAD(2u * q), b = QUAD(2u * q + 1u);
  v[0] = uintBitsToFloat(a.x); v[1] = uintBitsToFloat(a.y); v[2] = uintBitsToFloat(a.z); v[3] = uintBitsToFloat(a.w);
  v[4] = uintBitsToFloat(b.x); v[5] = uintBitsToFloat(b.y); v[6] = uintBitsToFloat(b.z); v[7] = uintBitsToFloat(b.w);
#elif defined(W_F16)
  const uvec4 a = QUAD(q);
  vec2 t;
  t = unpackHalf2x16(a.x); v[0] = t.x; v[1] = t.y;
  t = unpackHalf2x16(a.y); v[2] = t.x; v[3] = t.y;
  t = unpackHalf2x16(a.z); v[4] = t.x; v[5] = t.y;
  t = unpackHalf2x16(a.w); v[6] = t.x; v[7] = t.y;
#elif defined(W_BF16)
  const uvec4 a = QUAD(q);
  v[0] = uintBitsToFloat(a.x << 16); v[1] = uintBitsToFloat(a.x & 0xffff0000u);
  v[2] = uintBitsToFloat(a.y << 16); v[3] = uintBitsToFloat(a.y & 0xffff0000u);
  v[4] = uintBitsToFloat(a.z << 16); v[5] = uintBitsToFloat(a.z & 0xffff0000u);
  v[6] = uintBitsToFloat(a.w << 16); v[7] = uintBitsToFloat(a.w & 0xffff0000u);
#elif defined(W_QUANT)
  const uint K = WCOLS, e = q * 8u, row = e / K, k = e % K, b = k / 32u, j = k % 32u;
  const uint base = row * QRowWords(K);
  const float d = QScale(base, K, b);
#if defined(W_Q8_0)
  const uint w0 = WORD(base + k / 4u), w1 = WORD(base + k / 4u + 1u);
  for (uint t = 0; t < 4u; ++t) {
    v[t] = d * float(int(w0 << (24u - 8u * t)) >> 24);
    v[t + 4u] = d * float(int(w1 << (24u - 8u * t)) >> 24);
  }
#else
  const uint o = base + b * 4u + (j & 15u) / 4u, sh = j < 16u ? 0u : 4u;
  const uint w0 = WORD(o), w1 = WORD(o + 1u);
  for (uint t = 0; t < 4u; ++t) {
    v[t] = d * (float((w0 >> (8u * t + sh)) & 15u) - 8.0);
    v[t + 4u] = d * (float((w1 >> (8u * t + sh)) & 15u) - 8.0);
  }
#endif
#endif
}
#endif
