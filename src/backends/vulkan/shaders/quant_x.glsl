// Activations to int8 (or int16: X_I16 below) per 32-element block, shared by quantize_q8.comp
// and matmul_gemv.comp's in-workgroup quantization (XLOCAL), so both round alike: d = max|v| /
// 127, q = roundEven(v / d) in [-127, 127] (all 0 when d == 0), element 4j + i in byte i of word
// j of (q[0], q[1]).

uint Pack4(ivec4 q) {
  const uvec4 b = uvec4(q) & 0xffu;
  return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

// X_I16 (x for Q8_0 weights): int16 levels instead, d = max|v| / 32512 (the CPU kernels' Q8_0
// activations), each level q = 256 hi + lo stored as two int8 planes: hi signed, lo in 0..255.
#ifdef X_I16
const uint XB = 4u;  // uvec4 per 32-block: hi of elements 0-15, 16-31, then lo of 0-15, 16-31
const int kXMax = 32512;
#else
const uint XB = 2u;  // uvec4 per 32-block: elements 0-15, 16-31
const int kXMax = 127;
#endif

// The block v[0..7] (32 values) as XB words q (layout above); ds = (d, d * Σq).
void QuantizeBlock32(const vec4 v[8], out uvec4 q[XB], out vec2 ds) {
  float amax = 0.0;
  for (uint i = 0; i < 8u; ++i) {
    const vec4 a = abs(v[i]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  const float d = amax / float(kXMax), id = d != 0.0 ? 1.0 / d : 0.0;
  uint w[8];
#ifdef X_I16
  uint wl[8];
#endif
  int sum = 0;
  for (uint i = 0; i < 8u; ++i) {
    const ivec4 qi = clamp(ivec4(roundEven(v[i] * id)), ivec4(-kXMax), ivec4(kXMax));
    sum += qi.x + qi.y + qi.z + qi.w;
#ifdef X_I16
    const ivec4 lo = qi & 255;
    w[i] = Pack4((qi - lo) >> 8);
    wl[i] = Pack4(lo);
#else
    w[i] = Pack4(qi);
#endif
  }
  q[0] = uvec4(w[0], w[1], w[2], w[3]);
  q[1] = uvec4(w[4], w[5], w[6], w[7]);
#ifdef X_I16
  q[2] = uvec4(wl[0], wl[1], wl[2], wl[3]);
  q[3] = uvec4(wl[4], wl[5], wl[6], wl[7]);
#endif
  ds = vec2(d, d * float(sum));
}

#ifdef QX_X4
// For includers that declare the f32 x as vec4 x4[] and a folded norm's weight as vec4 g4[]:
// the block x4[xo .. xo + 7] quantized into q, ds (QuantizeBlock32). With norm, x ⊙ g4[go ..]
// is quantized and the block's Σx² added to ss (the caller scales ds, or its sums, by 1/rms
// once the row's Σx² is known): quantize_q8.comp and matmul_gemv.comp XLOCAL fold alike.
void QuantizeXBlock(uint xo, uint go, bool norm, inout float ss, out uvec4 q[XB], out vec2 ds) {
  vec4 v[8];
  for (uint i = 0; i < 8u; ++i) {
    v[i] = x4[xo + i];
    if (norm) {
      ss += dot(v[i], v[i]);
      v[i] *= g4[go + i];
    }
  }
  QuantizeBlock32(v, q, ds);
}
#endif
