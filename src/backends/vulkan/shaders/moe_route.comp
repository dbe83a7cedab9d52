#version 450
// MoE routing, one workgroup per token row (moe_route.glsl): the dispatch of its own, where the
// router GEMV does not route in its last workgroup (ops/moe.cpp RouteInRouterGemv).
//   logits: [R, E]; bias: [E]; ids, weights: [R, top_k]
#include "common.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) readonly buffer Bs { float bias[]; };
layout(binding = 2) writeonly buffer Ids { int ids[]; };
layout(binding = 3) writeonly buffer Wt { float wts[]; };
#define RT_WG 64u
#define RT_P p.rt
#define RT_LOGIT(r, e) logits[(r) * p.rt.E + (e)]
#define RT_BIAS(e) bias[e]
#define RT_STORE(r, j, id, w) \
  ids[(r) * p.rt.top_k + (j)] = (id);   \
  wts[(r) * p.rt.top_k + (j)] = (w)
#include "moe_route_params.glsl"
layout(push_constant) uniform P {
  uint R;
  RouteParams rt;
} p;
#include "moe_route.glsl"

void main() {
  const uint r = gl_WorkGroupID.x;
  if (r >= p.R) return;
  MoeRouteRow(r, gl_LocalInvocationID.x);
}
