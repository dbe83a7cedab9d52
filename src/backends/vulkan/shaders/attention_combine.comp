#version 450
// Merges the split-key partials of attention.comp (SPLIT without FOLD) for one (head, row) per
// workgroup: attention_merge.glsl's MergeSplits over the S chunks of part[((t*Hq + h)*S + s)*(dv + 2) ..].
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer Part { float part[]; };
layout(binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint Hq, S, dv, o_rs, o_hs; } p;
#include "attention_merge.glsl"
void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  MergeSplits((t * p.Hq + h) * p.S * (p.dv + 2u), p.S, p.dv, t * p.o_rs + h * p.o_hs,
              gl_LocalInvocationID.x, 128u);
}
