#version 450
// MoE routing, one invocation per token row, as transformers' DeepSeek-V2/V3 gates compute it
// (and src/backends/cpu/reference.cpp's MoeRoute): scores = softmax or sigmoid of the router
// logits; choice = scores (+ correction bias); group-limited methods keep the topk_group best
// groups (group score: max, or the sum of the top two for noaux_tc) and set the others' choice
// to 0; the top_k choices (lowest index on ties) give experts with their unbiased scores as
// weights, optionally normalised, times routed_scaling_factor.
//   logits: [R, E]; bias: [E]; ids, weights: [R, top_k]
layout(local_size_x = 64) in;
const uint MAXE = 256, MAXG = 64;
layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) readonly buffer Bs { float bias[]; };
layout(binding = 2) writeonly buffer Ids { int ids[]; };
layout(binding = 3) buffer Wt { float wts[]; };
layout(push_constant) uniform P {
  uint R, E, top_k, n_group, topk_group, sigmoid, method, norm, has_bias;
  float scaling;
} p;
void main() {
  const uint r = gl_GlobalInvocationID.x;
  if (r >= p.R) return;
  float scores[MAXE], choice[MAXE];
  const uint base = r * p.E;
  if (p.sigmoid != 0u) {
    for (uint e = 0; e < p.E; ++e) scores[e] = 1.0 / (1.0 + exp(-logits[base + e]));
  } else {
    float mx = logits[base];
    for (uint e = 1; e < p.E; ++e) mx = max(mx, logits[base + e]);
    float sum = 0.0;
    for (uint e = 0; e < p.E; ++e) {
      scores[e] = exp(logits[base + e] - mx);
      sum += scores[e];
    }
    for (uint e = 0; e < p.E; ++e) scores[e] /= sum;
  }
  for (uint e = 0; e < p.E; ++e) choice[e] = scores[e] + (p.has_bias != 0u ? bias[e] : 0.0);
  if (p.method != 0u && p.n_group > 1u) {
    const uint per = p.E / p.n_group;
    float gs[MAXG];
    bool keep[MAXG];
    for (uint g = 0; g < p.n_group; ++g) {
      float a = -1.0 / 0.0, b = -1.0 / 0.0;  // top two
      for (uint e = g * per; e < (g + 1u) * per; ++e) {
        const float c = choice[e];
        if (c > a) { b = a; a = c; } else if (c > b) { b = c; }
      }
      gs[g] = (p.method == 2u) ? a + (per > 1u ? b : 0.0) : a;
      keep[g] = false;
    }
    for (uint k = 0; k < p.topk_group; ++k) {
      uint best = 0xffffffffu;
      for (uint g = 0; g < p.n_group; ++g)
        if (!keep[g] && (best == 0xffffffffu || gs[g] > gs[best])) best = g;
      keep[best] = true;
    }
    for (uint e = 0; e < p.E; ++e)
      if (!keep[e / per]) choice[e] = 0.0;
  }
  uint taken[MAXE / 32];
  for (uint i = 0; i < MAXE / 32; ++i) taken[i] = 0u;
  float wsum = 0.0;
  for (uint k = 0; k < p.top_k; ++k) {
    uint best = 0xffffffffu;
    for (uint e = 0; e < p.E; ++e) {
      if ((taken[e >> 5] & (1u << (e & 31u))) != 0u) continue;
      if (best == 0xffffffffu || choice[e] > choice[best]) best = e;
    }
    taken[best >> 5] |= 1u << (best & 31u);
    ids[r * p.top_k + k] = int(best);
    wts[r * p.top_k + k] = scores[best];
    wsum += scores[best];
  }
  for (uint k = 0; k < p.top_k; ++k) {
    float w = wts[r * p.top_k + k];
    if (p.norm != 0u) w = w / (wsum + 1e-20);
    wts[r * p.top_k + k] = w * p.scaling;
  }
}
