// Activations to int8 per 32-element block, shared by quantize_q8.comp and matmul_gemv.comp's
// in-workgroup quantization (XLOCAL), so both round alike: d = max|v| / 127, q = roundEven(v / d)
// in [-127, 127] (all 0 when d == 0), element 4j + i in byte i of word j of (lo, hi).

uint Pack4(ivec4 q) {
  const uvec4 b = uvec4(q) & 0xffu;
  return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}

// The block v[0..7] (32 values) as int8 words lo (elements 0-15), hi (16-31); ds = (d, d * Σq).
void QuantizeBlock32(const vec4 v[8], out uvec4 lo, out uvec4 hi, out vec2 ds) {
  float amax = 0.0;
  for (uint i = 0; i < 8u; ++i) {
    const vec4 a = abs(v[i]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  const float d = amax / 127.0, id = d != 0.0 ? 1.0 / d : 0.0;
  uint w[8];
  int sum = 0;
  for (uint i = 0; i < 8u; ++i) {
    const ivec4 q = clamp(ivec4(roundEven(v[i] * id)), ivec4(-127), ivec4(127));
    sum += q.x + q.y + q.z + q.w;
    w[i] = Pack4(q);
  }
  lo = uvec4(w[0], w[1], w[2], w[3]);
  hi = uvec4(w[4], w[5], w[6], w[7]);
  ds = vec2(d, d * float(sum));
}
