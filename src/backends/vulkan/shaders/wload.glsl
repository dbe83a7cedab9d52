// Weight element loads by type, from a buffer seen as 32-bit words. Before including, define
// WORD(i) (the i-th 32-bit word) and, for the vector path, QUAD(i) (the i-th uvec4), and one of
// W_F32 / W_F16 / W_BF16 or a block type W_Q8_0 / W_Q4_0 / W_Q4_1 / W_Q5_0 / W_Q5_1 / W_Q4_K /
// W_Q5_K / W_Q6_K. bf16 is read as its 16 bits shifted into an f32's top half; f16 through
// unpackHalf2x16 (no 16-bit storage feature needed).
//
// Block types are repacked at load (weights.cpp RepackQuantRow) into word-aligned rows made of
// sections, each section holding one field of every block of the row in block order and padded
// to a multiple of 4 words (16 bytes), so a row of K elements (nb blocks) is:
//   Q8_0: qs  nb*8 words (int8, K bytes)                 | d  f16 per block
//   Q4_0: qs  nb*4 words (GGUF's 16 bytes: element j < 16 in the low nibble of byte j,
//             element j + 16 in its high nibble)          | d  f16 per block
//   Q4_1: qs  nb*4                                        | dm one word per block: d | m << 16
//   Q5_0: qs  nb*4 | qh  one word per block (bit j: fifth bit of element j) | d f16 per block
//   Q5_1: qs  nb*4 | qh  one word per block               | dm one word per block
//   Q4_K: qs  nb*32 (GGUF's 128 bytes)                    | meta 5 words per block: d | dmin << 16,
//             then per 64-chunk c: sc(2c) | mn(2c) << 8 | sc(2c+1) << 16 | mn(2c+1) << 24 (the
//             6-bit scales and mins of UnpackScaleMinK4, one byte each: 148 B per 256 weights
//             against the file's 144)
//   Q5_K: qs  nb*32 | qh nb*8 (GGUF's 32 bytes) | meta nb*5 as Q4_K
//   Q6_K: ql  nb*32 | qh nb*16 | scales nb*4 (int8) | d f16 per block
//   I4F:  qs  nb*4 (Q4_0's order)                         | two words per block: d (f32 bits), z
// ("f16 per block": two blocks per word, block 2i in the low half.) Values, exactly as
// src/quant's Dequantize (`precise` keeps the compiler from fusing what the reference rounds):
//   Q8_0 d*q; Q4_0 (q-8)*d; Q4_1 q*d + m; Q5_0 (q-16)*d; Q5_1 q*d + m;
//   Q4_K/Q5_K (d*sc)*q - dmin*mn; Q6_K (d*sc)*(q-32); I4F (q-z)*d (q-z exact in the levels).
// Element i = row * K + k needs K: define WCOLS (an expression) before including.
//
// The GEMV and the expert kernels read block types by *slices* of 8 elements (QSlice): slice s
// of a row holds two groups of 4 consecutive elements (k0..k0+3 and k1..k1+3) that share their
// quant words, returned unscaled (levels as floats) with the scale and offset of each group:
//   Σ w·x over the slice = d0 * q0·x[k0..] + m0 * Σx[k0..] + d1 * q1·x[k1..] + m1 * Σx[k1..]
// (m0 = m1 = 0 for the symmetric types: QHAS_MIN undefined; d0 = d1 for the 32-blocks:
// QSAME_D). Slices per row: K / 8, those of one block consecutive.
#if defined(W_Q8_0) || defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || \
    defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K) || defined(W_I4F)
#define W_QUANT 1
#ifndef WCOLS
#error "define WCOLS (the weight row length) for quantized weights"
#endif
#if defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
#define QK_SUPER 1
const uint kQBlock = 256u;  // elements per block
#else
#define QSAME_D 1
const uint kQBlock = 32u;
#endif
#if defined(W_Q4_1) || defined(W_Q5_1) || defined(W_Q4_K) || defined(W_Q5_K)
#define QHAS_MIN 1
#endif
// Quant words per block (the first section).
#if defined(W_Q8_0)
const uint kQWordsPerBlock = 8u;
#elif defined(QK_SUPER)
const uint kQWordsPerBlock = 32u;
#else
const uint kQWordsPerBlock = 4u;
#endif
uint QPad4(uint w) { return (w + 3u) & ~3u; }
// Word offsets (from the row's first word) of the sections after the quants.
uint QHighOff(uint K) { return (K / kQBlock) * kQWordsPerBlock; }  // qh (Q5_*, Q5_K, Q6_K)
uint QMetaOff(uint K) {  // scales: d / dm / meta / Q6_K's int8 scales
  const uint nb = K / kQBlock;
#if defined(W_Q5_0) || defined(W_Q5_1)
  return QHighOff(K) + QPad4(nb);
#elif defined(W_Q5_K)
  return QHighOff(K) + nb * 8u;
#elif defined(W_Q6_K)
  return QHighOff(K) + nb * 16u;
#else
  return QHighOff(K);
#endif
}
// Words of one repacked row of K elements (a multiple of 4).
uint QRowWords(uint K) {
  const uint nb = K / kQBlock;
#if defined(W_Q8_0) || defined(W_Q4_0) || defined(W_Q5_0)
  return QMetaOff(K) + QPad4((nb + 1u) / 2u);
#elif defined(W_Q4_1) || defined(W_Q5_1)
  return QMetaOff(K) + QPad4(nb);
#elif defined(W_I4F)
  return QMetaOff(K) + QPad4(2u * nb);
#elif defined(W_Q6_K)
  return QMetaOff(K) + nb * 4u + QPad4((nb + 1u) / 2u);
#else
  return QMetaOff(K) + QPad4(nb * 5u);
#endif
}
// The f16 scale of block b (Q8_0, Q4_0, Q5_0, Q6_K) of the row at word `base`.
float QScale(uint base, uint K, uint b) {
#if defined(W_Q6_K)
  const uint off = QMetaOff(K) + (K / kQBlock) * 4u;
#else
  const uint off = QMetaOff(K);
#endif
  return unpackHalf2x16(WORD(base + off + (b >> 1)))[b & 1u];
}

// Levels as floats: bit patterns 0x4B000000 | n are the floats 2^23 + n (n < 2^23), so one OR
// and one subtraction replace an int-to-float conversion (a quarter-rate instruction on many
// GPUs); both are exact. `bias` is subtracted from the level (8 for Q4_0, ...).
// A shader may define QMAGIC (a bool expression, e.g. a specialization constant) to choose;
// false: plain conversions.
#ifndef QMAGIC
#define QMAGIC true
#endif
vec4 QLevels(uvec4 n, float bias) {
  return QMAGIC ? uintBitsToFloat(n | 0x4B000000u) - (8388608.0 + bias) : vec4(n) - bias;
}
// Nibbles at bits sh..sh+3 of each byte of w.
uvec4 QNib(uint w, uint sh) { return (uvec4(w) >> uvec4(sh, sh + 8u, sh + 16u, sh + 24u)) & 15u; }
// The 4 bits at positions p, p+8, p+16, p+24 of h, each shifted to bit `to`.
uvec4 QBits(uint h, uint p, uint to) {
  return ((uvec4(h) >> uvec4(p, p + 8u, p + 16u, p + 24u)) & 1u) << to;
}

// Slice s (8 elements) of the row at word `base`: see the header comment. dm = (d0, m0, d1, m1).
void QSlice(uint base, uint K, uint s, out vec4 q0, out vec4 q1, out uint k0, out uint k1,
            out vec4 dm) {
#if defined(QK_SUPER)
  const uint nb = K / 256u, sb = s >> 5, u = s & 31u;
#else
  const uint b = s >> 2, t = s & 3u;
#endif
#if defined(W_Q8_0)
  const uint w0 = WORD(base + b * 8u + 2u * t), w1 = WORD(base + b * 8u + 2u * t + 1u);
  // int8 + 128 as an unsigned byte (one XOR flips the 4 sign bits), then the float trick.
  q0 = QLevels((uvec4(w0 ^ 0x80808080u) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu, 128.0);
  q1 = QLevels((uvec4(w1 ^ 0x80808080u) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu, 128.0);
  k0 = b * 32u + 8u * t;
  k1 = k0 + 4u;
  const float d = QScale(base, K, b);
  dm = vec4(d, 0.0, d, 0.0);
#elif defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_I4F)
  const uint qw = WORD(base + b * 4u + t);
  k0 = b * 32u + 4u * t;
  k1 = k0 + 16u;
#if defined(W_I4F)
  // The zero point as the levels' bias: (2^23 + q) - (2^23 + z) = q - z exactly.
  const uint mo = base + QMetaOff(K) + 2u * b;
  const float z = float(WORD(mo + 1u));
  q0 = QLevels(QNib(qw, 0u), z);
  q1 = QLevels(QNib(qw, 4u), z);
  const float d = uintBitsToFloat(WORD(mo));
  dm = vec4(d, 0.0, d, 0.0);
#elif defined(W_Q4_0)
  q0 = QLevels(QNib(qw, 0u), 8.0);
  q1 = QLevels(QNib(qw, 4u), 8.0);
  const float d = QScale(base, K, b);
  dm = vec4(d, 0.0, d, 0.0);
#elif defined(W_Q4_1)
  q0 = QLevels(QNib(qw, 0u), 0.0);
  q1 = QLevels(QNib(qw, 4u), 0.0);
  const vec2 f = unpackHalf2x16(WORD(base + QMetaOff(K) + b));
  dm = vec4(f.x, f.y, f.x, f.y);
#else
  // Bit j of qh is the fifth bit of element j: elements 4t.. take bits 4t.., the high
  // nibbles (elements 16 + 4t..) bits 16 + 4t...
  const uint h = WORD(base + QHighOff(K) + b);
  const uvec4 hl = ((uvec4(h) >> (uvec4(4u * t) + uvec4(0u, 1u, 2u, 3u))) & 1u) << 4;
  const uvec4 hh = ((uvec4(h) >> (uvec4(16u + 4u * t) + uvec4(0u, 1u, 2u, 3u))) & 1u) << 4;
#if defined(W_Q5_0)
  q0 = QLevels(QNib(qw, 0u) | hl, 16.0);
  q1 = QLevels(QNib(qw, 4u) | hh, 16.0);
  const float d = QScale(base, K, b);
  dm = vec4(d, 0.0, d, 0.0);
#else
  q0 = QLevels(QNib(qw, 0u) | hl, 0.0);
  q1 = QLevels(QNib(qw, 4u) | hh, 0.0);
  const vec2 f = unpackHalf2x16(WORD(base + QMetaOff(K) + b));
  dm = vec4(f.x, f.y, f.x, f.y);
#endif
#endif
#elif defined(W_Q4_K) || defined(W_Q5_K)
  // u = 8 c + t: chunk c of 64 elements, quant word t: elements 64c + 4t.. (low nibbles,
  // sub-block 2c) and 64c + 32 + 4t.. (high nibbles, sub-block 2c + 1).
  const uint c = u >> 3, t = u & 7u;
  const uint qw = WORD(base + sb * 32u + u);
  k0 = sb * 256u + c * 64u + 4u * t;
  k1 = k0 + 32u;
#if defined(W_Q4_K)
  q0 = QLevels(QNib(qw, 0u), 0.0);
  q1 = QLevels(QNib(qw, 4u), 0.0);
#else
  // qh byte l (l < 32) holds bit 2c (element l of chunk c) and 2c + 1 (element 32 + l).
  const uint h = WORD(base + QHighOff(K) + sb * 8u + t);
  q0 = QLevels(QNib(qw, 0u) | QBits(h, 2u * c, 4u), 0.0);
  q1 = QLevels(QNib(qw, 4u) | QBits(h, 2u * c + 1u, 4u), 0.0);
#endif
  const uint mo = base + QMetaOff(K) + sb * 5u;
  const vec2 dd = unpackHalf2x16(WORD(mo));
  const uint sm = WORD(mo + 1u + c);
  dm = vec4(dd.x * float(sm & 63u), -(dd.y * float((sm >> 8) & 63u)),
            dd.x * float((sm >> 16) & 63u), -(dd.y * float((sm >> 24) & 63u)));
#elif defined(W_Q6_K)
  // u = 16 hf + w: half hf of 128 elements, ql word wi: for wi < 8 the low nibbles are elements
  // 4wi.. (k = 0) and the high nibbles 64 + 4wi.. (k = 2); for wi >= 8, 32 + 4(wi-8).. (k = 1)
  // and 96 + 4(wi-8).. (k = 3). The two high bits of element 32k + l sit at bit 2k of qh[32 hf + l].
  const uint hf = u >> 4, wi = u & 15u, kk = wi >> 3, l0 = 4u * (wi & 7u);
  const uint ql = WORD(base + sb * 32u + u);
  const uint h = WORD(base + QHighOff(K) + sb * 16u + hf * 8u + (wi & 7u));
  const uvec4 hb = uvec4(h) >> uvec4(0u, 8u, 16u, 24u);
  q0 = QLevels(QNib(ql, 0u) | (((hb >> (2u * kk)) & 3u) << 4), 32.0);
  q1 = QLevels(QNib(ql, 4u) | (((hb >> (2u * kk + 4u)) & 3u) << 4), 32.0);
  k0 = sb * 256u + hf * 128u + kk * 32u + l0;
  k1 = k0 + 64u;
  const uint so = base + QMetaOff(K) + sb * 4u;
  const uint j0 = 8u * hf + 2u * kk + l0 / 16u, j1 = j0 + 4u;  // int8 scale indices
  const float s0 = float(int(WORD(so + (j0 >> 2)) << (24u - 8u * (j0 & 3u))) >> 24);
  const float s1 = float(int(WORD(so + (j1 >> 2)) << (24u - 8u * (j1 & 3u))) >> 24);
  const float d = unpackHalf2x16(WORD(base + QMetaOff(K) + nb * 4u + (sb >> 1)))[sb & 1u];
  dm = vec4(d * s0, 0.0, d * s1, 0.0);
#endif
}

// The slice holding element k of a row, and the element's place in it (group g: 0 = q0, 1 = q1;
// index e inside the group).
void QSliceOf(uint k, out uint s, out uint g, out uint e) {
  e = k & 3u;
#if defined(W_Q8_0)
  s = k / 8u;
  g = (k >> 2) & 1u;
#elif defined(QK_SUPER)
  const uint sb = k / 256u, j = k % 256u;
#if defined(W_Q6_K)
  const uint hf = j / 128u, jj = j % 128u, kq = jj / 32u, l = jj % 32u;  // element 32 kq + l
  s = sb * 32u + hf * 16u + (kq & 1u) * 8u + l / 4u;
  g = kq >> 1;
#else
  const uint c = j / 64u, jj = j % 64u;
  s = sb * 32u + c * 8u + (jj & 31u) / 4u;
  g = jj >> 5;
#endif
#else
  const uint j = k % 32u;
  s = (k / 32u) * 4u + (j & 15u) / 4u;
  g = j >> 4;
#endif
}

// Elements k..k+3 (k % 4 == 0) of the row at word `base`, dequantized exactly as src/quant's
// Dequantize rounds them.
vec4 QGroup4(uint base, uint K, uint k) {
  uint s, g, e, k0, k1;
  QSliceOf(k, s, g, e);
  vec4 q0, q1, dm;
  QSlice(base, K, s, q0, q1, k0, k1, dm);
  const vec4 q = g == 0u ? q0 : q1;
  const float d = g == 0u ? dm.x : dm.z, m = g == 0u ? dm.y : dm.w;
#if defined(QK_SUPER) && defined(QHAS_MIN)
  precise vec4 v = d * q + m;  // (d*sc)*q - dmin*mn: m holds -(dmin*mn)
#elif defined(QK_SUPER) || defined(W_Q8_0)
  precise vec4 v = d * q;      // (d*sc)*(q-32); d*q
#elif defined(QHAS_MIN)
  precise vec4 v = q * d + m;
#else
  precise vec4 v = q * d;
#endif
  return v;
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
  const uint K = WCOLS, row = i / K, k = i % K;
  return QGroup4(row * QRowWords(K), K, k & ~3u)[k & 3u];
#else
#error "define W_F32, W_F16, W_BF16 or a block type W_Q*"
#endif
}

#if defined(QUAD) && !defined(W_QUANT)
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
#endif
}
#endif
