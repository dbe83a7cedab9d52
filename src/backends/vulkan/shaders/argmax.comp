#version 450
// Greedy sampling on the device: ids[r] = argmax_c x[r, c] (lowest index on ties), so only one
// token id per row comes back to the host. One workgroup per row; or, for long rows (a real
// vocabulary: 152k logits were ~70 µs for one workgroup on an H200), two dispatches:
//   PARTIAL: workgroup (part, r) takes columns [part * chunk, +chunk) of row r and writes its
//            best (value, index) to pv/pi[r * gl_NumWorkGroups.x + part];
//   FINAL:   one workgroup per row reduces those P = p.parts pairs.
// A row holding a NaN or infinite logit gets ids[r] = -1 (the host fails that request naming the
// row): a max over NaNs took the first column, and greedy decoding emitted token 0 forever
// (issue 23). The flag travels through the partial pairs as the index kBad.
#include "common.glsl"
layout(local_size_x = 256) in;
#if defined(FINAL)
layout(binding = 0) readonly buffer PV { float pv[]; };
layout(binding = 1) writeonly buffer I { int ids[]; };
layout(binding = 2) readonly buffer PI { uint pi[]; };
layout(push_constant) uniform P { uint parts; } p;
#else
layout(binding = 0) readonly buffer X { float x[]; };
#if defined(PARTIAL)
layout(binding = 1) writeonly buffer PV { float pv[]; };
layout(binding = 2) writeonly buffer PI { uint pi[]; };
layout(push_constant) uniform P { uint C, chunk; } p;
#else
layout(binding = 1) writeonly buffer I { int ids[]; };
layout(push_constant) uniform P { uint C; } p;
#endif
#endif
const uint kNone = 0xffffffffu, kBad = 0xfffffffeu;
shared float bv[256];
shared uint bi[256];
// (v, i) replaces (best, besti) when it is larger, or equal with a lower index; kNone loses,
// kBad wins and stays.
void Take(float v, uint i, inout float best, inout uint besti) {
  if (besti == kBad || i == kNone) return;
  if (i == kBad || besti == kNone || v > best || (v == best && i < besti)) {
    best = v;
    besti = i;
  }
}
// The workgroup's best of each invocation's (best, besti), in bv[0], bi[0].
void Reduce(uint tid, float best, uint besti) {
  bv[tid] = best;
  bi[tid] = besti;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (tid < s) {
      float b = bv[tid];
      uint i = bi[tid];
      Take(bv[tid + s], bi[tid + s], b, i);
      bv[tid] = b;
      bi[tid] = i;
    }
    barrier();
  }
}
void main() {
  const uint tid = gl_LocalInvocationID.x;
  float best = -1.0 / 0.0;
  uint besti = kNone;
#if defined(FINAL)
  const uint r = FlatGroup();
  for (uint k = tid; k < p.parts; k += 256u) Take(pv[r * p.parts + k], pi[r * p.parts + k], best, besti);
  Reduce(tid, best, besti);
  if (tid == 0u) ids[r] = bi[0] == kBad ? -1 : int(bi[0]);
#else
#if defined(PARTIAL)
  const uint r = gl_WorkGroupID.y, part = gl_WorkGroupID.x;
  const uint c0 = part * p.chunk, c1 = min(p.C, c0 + p.chunk);
#else
  const uint r = FlatGroup(), c0 = 0u, c1 = p.C;
#endif
  for (uint c = c0 + tid; c < c1; c += 256u) {
    const float v = x[r * p.C + c];
    if (isnan(v) || isinf(v)) {
      besti = kBad;
    } else if (besti != kBad && (v > best || besti == kNone)) {
      best = v;
      besti = c;
    }
  }
  Reduce(tid, best, besti);
#if defined(PARTIAL)
  if (tid == 0u) {
    pv[r * gl_NumWorkGroups.x + part] = bv[0];
    pi[r * gl_NumWorkGroups.x + part] = bi[0];
  }
#else
  if (tid == 0u) ids[r] = bi[0] == kBad ? -1 : int(bi[0]);
#endif
#endif
}
