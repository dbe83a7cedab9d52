// Weight element loads by type, from a buffer seen as 32-bit words. Before including, define
// WORD(i) (the i-th 32-bit word) and, for the vector path, QUAD(i) (the i-th uvec4), and one of
// W_F32 / W_F16 / W_BF16. bf16 is read as its 16 bits shifted into an f32's top half; f16
// through unpackHalf2x16 (no 16-bit storage feature needed). Quantized types take new W_* slots.

float wload(uint i) {
#if defined(W_F32)
  return uintBitsToFloat(WORD(i));
#elif defined(W_F16)
  return unpackHalf2x16(WORD(i >> 1))[i & 1u];
#elif defined(W_BF16)
  const uint w = WORD(i >> 1);
  return uintBitsToFloat((i & 1u) == 0u ? (w << 16) : (w & 0xffff0000u));
#else
#error "define W_F32, W_F16 or W_BF16"
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
#endif
}
#endif
