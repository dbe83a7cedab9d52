#version 450
// MoE routing, one workgroup per token row, as transformers' DeepSeek-V2/V3 gates compute it
// (and src/backends/cpu/reference.cpp's MoeRoute): scores = softmax or sigmoid of the router
// logits; choice = scores (+ correction bias); group-limited methods keep the topk_group best
// groups (group score: max, or the sum of the top two for noaux_tc) and set the others' choice
// to 0 (group_limited_greedy) or -inf (noaux_tc: sigmoid scores plus a negative bias can fall
// below 0, and a kept expert must still beat every masked one); the top_k choices (lowest index
// on ties) give experts with their unbiased scores as weights, optionally normalised, times
// routed_scaling_factor.
//   logits: [R, E]; bias: [E]; ids, weights: [R, top_k]
// A head split's expert range (n_local > 0: this device holds experts [e0, e0 + n_local) of the
// E the router scores): a choice in the range gets its local index, one outside it local expert
// 0 with weight 0, so the expert kernels add nothing for it (0 times a finite output).
// Each invocation holds experts tid, tid + WG, ... (E <= 256 = 4 WG); the softmax sums and every
// top-k step are workgroup reductions (common.glsl), so a step costs a few barriers instead of
// one invocation's serial pass over all experts (26 µs a token on the H200 for 64 experts).
#include "common.glsl"
layout(local_size_x = 64) in;
const uint WG = 64u, MAXE = 256u, PER = MAXE / WG, MAXG = 64u;
layout(binding = 0) readonly buffer L { float logits[]; };
layout(binding = 1) readonly buffer Bs { float bias[]; };
layout(binding = 2) writeonly buffer Ids { int ids[]; };
layout(binding = 3) writeonly buffer Wt { float wts[]; };
layout(push_constant) uniform P {
  uint R, E, top_k, n_group, topk_group, sigmoid, method, norm, has_bias;
  float scaling;
  uint e0, n_local;
} p;
shared float choice_s[MAXE];
shared float gscore[MAXG];
shared bool gkeep[MAXG];
shared float best_v[64];
shared uint best_i[64];

// The largest v over the workgroup and its lowest index (ties: lowest index), to everyone.
void WgArgMax(inout float v, inout uint idx) {
  const float m = subgroupMax(v);
  uint i = subgroupMin(v == m ? idx : 0xffffffffu);
  if (subgroupElect()) {
    best_v[gl_SubgroupID] = m;
    best_i[gl_SubgroupID] = i;
  }
  barrier();
  v = best_v[0];
  idx = best_i[0];
  for (uint s = 1u; s < gl_NumSubgroups; ++s)
    if (best_v[s] > v || (best_v[s] == v && best_i[s] < idx)) {
      v = best_v[s];
      idx = best_i[s];
    }
  barrier();
}

void main() {
  const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  if (r >= p.R) return;
  const uint base = r * p.E;
  float score[PER];
  float mx = -1.0 / 0.0;
  for (uint c = 0u; c < PER; ++c) {
    const uint e = tid + WG * c;
    score[c] = e < p.E ? logits[base + e] : -1.0 / 0.0;
    mx = max(mx, score[c]);
  }
  if (p.sigmoid != 0u) {
    for (uint c = 0u; c < PER; ++c) score[c] = 1.0 / (1.0 + exp(-score[c]));
  } else {
    mx = WgMax(mx);
    float sum = 0.0;
    for (uint c = 0u; c < PER; ++c) {
      const uint e = tid + WG * c;
      score[c] = e < p.E ? exp(score[c] - mx) : 0.0;
      sum += score[c];
    }
    sum = WgSum(sum);
    for (uint c = 0u; c < PER; ++c) score[c] /= sum;
  }
  float choice[PER];
  for (uint c = 0u; c < PER; ++c) {
    const uint e = tid + WG * c;
    choice[c] = score[c] + (p.has_bias != 0u && e < p.E ? bias[e] : 0.0);
    if (e < p.E) choice_s[e] = choice[c];
  }
  barrier();
  if (p.method != 0u && p.n_group > 1u) {
    const uint per = p.E / p.n_group;
    if (tid < p.n_group) {
      float a = -1.0 / 0.0, b = -1.0 / 0.0;  // top two of the group
      for (uint e = tid * per; e < (tid + 1u) * per; ++e) {
        const float c = choice_s[e];
        if (c > a) { b = a; a = c; } else if (c > b) { b = c; }
      }
      gscore[tid] = (p.method == 2u) ? a + (per > 1u ? b : 0.0) : a;
    }
    barrier();
    if (tid == 0u) {  // topk_group best groups, lowest index on ties (n_group <= 64)
      for (uint g = 0u; g < p.n_group; ++g) gkeep[g] = false;
      for (uint k = 0u; k < p.topk_group; ++k) {
        uint best = 0xffffffffu;
        for (uint g = 0u; g < p.n_group; ++g)
          if (!gkeep[g] && (best == 0xffffffffu || gscore[g] > gscore[best])) best = g;
        gkeep[best] = true;
      }
    }
    barrier();
    const float masked = p.method == 2u ? -1.0 / 0.0 : 0.0;
    for (uint c = 0u; c < PER; ++c) {
      const uint e = tid + WG * c;
      if (e < p.E && !gkeep[e / per]) choice[c] = masked;
    }
  }
  float wsum = 0.0, w_mine = 0.0;
  uint id_mine = 0u;
  // Taken experts leave the running by a flag, not by a -inf choice: noaux_tc's masked experts
  // hold -inf too, and where top_k exceeds the kept experts they follow in index order, as the
  // reference's stable sort has them.
  bool taken[PER];
  for (uint c = 0u; c < PER; ++c) taken[c] = false;
  for (uint k = 0u; k < p.top_k; ++k) {
    float v = -1.0 / 0.0;
    uint idx = 0xffffffffu;
    for (uint c = 0u; c < PER; ++c) {
      const uint e = tid + WG * c;
      if (e < p.E && !taken[c] && (idx == 0xffffffffu || choice[c] > v)) {
        v = choice[c];
        idx = e;
      }
    }
    WgArgMax(v, idx);
    // The winner's owner takes it out of the running and publishes its score.
    if (idx % WG == tid) {
      const uint c = idx / WG;
      for (uint cc = 0u; cc < PER; ++cc)
        if (cc == c) {
          taken[cc] = true;
          best_v[0] = score[cc];
        }
    }
    barrier();
    const float s = best_v[0];
    barrier();
    wsum += s;
    if (tid == k) {
      id_mine = idx;
      w_mine = s;
    }
  }
  if (tid < p.top_k) {
    float w = w_mine;
    if (p.norm != 0u) w = w / (wsum + 1e-20);
    w *= p.scaling;
    int id = int(id_mine);
    if (p.n_local != 0u) {
      const bool here = id_mine >= p.e0 && id_mine < p.e0 + p.n_local;
      id = here ? int(id_mine - p.e0) : 0;
      w = here ? w : 0.0;
    }
    ids[r * p.top_k + tid] = id;
    wts[r * p.top_k + tid] = w;
  }
}
