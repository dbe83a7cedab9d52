#version 450
// Block-quantized rows (wload.glsl's repacked layout, every W_Q* type) to f16, for the
// workgroup-scope coopmat GEMM (matmul_gemm_cm2.comp reads f16 weights only):
//   out[n * K + k] = f16(W[n, k]) over the rows of one weight chunk, 4 elements an invocation;
// the f32 value is QGroup4's (exactly src/quant's Dequantize), rounded to nearest even.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer W { uvec4 wq[]; };
layout(binding = 1) writeonly buffer O { uvec2 o2[]; };
layout(push_constant) uniform P { uint K, n4; } p;
#define WORD(i) wq[(i) >> 2][(i) & 3u]
#define WCOLS p.K
#include "wload.glsl"
void main() {
  const uint i = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n4) return;
  const uint row = (4u * i) / p.K, k = (4u * i) % p.K;
  const vec4 v = QGroup4(row * QRowWords(p.K), p.K, k);
  o2[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
