#version 450
// Elementwise binary ops over n floats: ADD (a + b), SWIGLU (silu(a) * b).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer Bb { float b[]; };
layout(binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
  const uint i = FlatGroup() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
#if defined(ADD)
  o[i] = a[i] + b[i];
#elif defined(SWIGLU)
  const float g = a[i];
  o[i] = g / (1.0 + exp(-g)) * b[i];
#else
#error "define ADD or SWIGLU"
#endif
}
