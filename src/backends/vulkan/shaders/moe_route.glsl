// MoE routing of one token row by one workgroup, as transformers' DeepSeek-V2/V3 gates compute it
// (and src/backends/cpu/reference.cpp's MoeRoute): scores = softmax or sigmoid of the router
// logits; choice = scores (+ correction bias); group-limited methods keep the topk_group best
// groups (group score: max, or the sum of the top two for noaux_tc) and set the others' choice
// to 0 (group_limited_greedy) or -inf (noaux_tc: sigmoid scores plus a negative bias can fall
// below 0, and a kept expert must still beat every masked one); the top_k choices (lowest index
// on ties) give experts with their unbiased scores as weights, optionally normalised, times
// routed_scaling_factor.
// A head split's expert range (n_local > 0: this device holds experts [e0, e0 + n_local) of the
// E the router scores): a choice in the range gets its local index, one outside it local expert
// 0 with weight 0, so the expert kernels add nothing for it (0 times a finite output).
// Each invocation holds experts tid, tid + RT_WG, ... (E <= 256, RT_WG >= 64: at most RT_PER);
// the softmax sums and every top-k step are workgroup reductions (common.glsl), so a step costs a
// few barriers instead of one invocation's serial pass over all experts (26 us a token on the
// H200 for 64 experts).
// The includer defines, before this file and after common.glsl: RT_WG, the workgroup size
// (every invocation calls MoeRouteRow: it has barriers); RT_P, its RouteParams
// (moe_route_params.glsl, a push-constant member); RT_LOGIT(r, e), row r's logit of expert e;
// RT_BIAS(e), the correction bias; RT_STORE(r, j, id, w), row r's choice j. Users:
// moe_route.comp (a dispatch of its own) and matmul_gemv.comp ROUTE (the router GEMV's last
// workgroup of a row group).
const uint RT_MAXE = 256u, RT_PER = RT_MAXE / 64u, RT_MAXG = 64u;
shared float rt_choice_s[RT_MAXE];
shared float rt_gscore[RT_MAXG];
shared bool rt_gkeep[RT_MAXG];
shared float rt_best_v[64];
shared uint rt_best_i[64];

// The largest v over the workgroup and its lowest index (ties: lowest index), to everyone.
void WgArgMax(inout float v, inout uint idx) {
  const float m = subgroupMax(v);
  uint i = subgroupMin(v == m ? idx : 0xffffffffu);
  if (subgroupElect()) {
    rt_best_v[gl_SubgroupID] = m;
    rt_best_i[gl_SubgroupID] = i;
  }
  barrier();
  v = rt_best_v[0];
  idx = rt_best_i[0];
  for (uint s = 1u; s < gl_NumSubgroups; ++s)
    if (rt_best_v[s] > v || (rt_best_v[s] == v && rt_best_i[s] < idx)) {
      v = rt_best_v[s];
      idx = rt_best_i[s];
    }
  barrier();
}

void MoeRouteRow(uint r, uint tid) {
  float score[RT_PER];
  float mx = -1.0 / 0.0;
  for (uint c = 0u; c < RT_PER; ++c) {
    const uint e = tid + RT_WG * c;
    score[c] = e < RT_P.E ? RT_LOGIT(r, e) : -1.0 / 0.0;
    mx = max(mx, score[c]);
  }
  if (RT_P.sigmoid != 0u) {
    for (uint c = 0u; c < RT_PER; ++c) score[c] = 1.0 / (1.0 + exp(-score[c]));
  } else {
    mx = WgMax(mx);
    float sum = 0.0;
    for (uint c = 0u; c < RT_PER; ++c) {
      const uint e = tid + RT_WG * c;
      score[c] = e < RT_P.E ? exp(score[c] - mx) : 0.0;
      sum += score[c];
    }
    sum = WgSum(sum);
    for (uint c = 0u; c < RT_PER; ++c) score[c] /= sum;
  }
  float choice[RT_PER];
  for (uint c = 0u; c < RT_PER; ++c) {
    const uint e = tid + RT_WG * c;
    choice[c] = score[c] + (RT_P.has_bias != 0u && e < RT_P.E ? RT_BIAS(e) : 0.0);
    if (e < RT_P.E) rt_choice_s[e] = choice[c];
  }
  barrier();
  if (RT_P.method != 0u && RT_P.n_group > 1u) {
    const uint per = RT_P.E / RT_P.n_group;
    if (tid < RT_P.n_group) {
      float a = -1.0 / 0.0, b = -1.0 / 0.0;  // top two of the group
      for (uint e = tid * per; e < (tid + 1u) * per; ++e) {
        const float c = rt_choice_s[e];
        if (c > a) { b = a; a = c; } else if (c > b) { b = c; }
      }
      rt_gscore[tid] = (RT_P.method == 2u) ? a + (per > 1u ? b : 0.0) : a;
    }
    barrier();
    if (tid == 0u) {  // topk_group best groups, lowest index on ties (n_group <= 64)
      for (uint g = 0u; g < RT_P.n_group; ++g) rt_gkeep[g] = false;
      for (uint k = 0u; k < RT_P.topk_group; ++k) {
        uint best = 0xffffffffu;
        for (uint g = 0u; g < RT_P.n_group; ++g)
          if (!rt_gkeep[g] && (best == 0xffffffffu || rt_gscore[g] > rt_gscore[best])) best = g;
        rt_gkeep[best] = true;
      }
    }
    barrier();
    const float masked = RT_P.method == 2u ? -1.0 / 0.0 : 0.0;
    for (uint c = 0u; c < RT_PER; ++c) {
      const uint e = tid + RT_WG * c;
      if (e < RT_P.E && !rt_gkeep[e / per]) choice[c] = masked;
    }
  }
  float wsum = 0.0, w_mine = 0.0;
  uint id_mine = 0u;
  // Taken experts leave the running by a flag, not by a -inf choice: noaux_tc's masked experts
  // hold -inf too, and where top_k exceeds the kept experts they follow in index order, as the
  // reference's stable sort has them.
  bool taken[RT_PER];
  for (uint c = 0u; c < RT_PER; ++c) taken[c] = false;
  for (uint k = 0u; k < RT_P.top_k; ++k) {
    float v = -1.0 / 0.0;
    uint idx = 0xffffffffu;
    for (uint c = 0u; c < RT_PER; ++c) {
      const uint e = tid + RT_WG * c;
      if (e < RT_P.E && !taken[c] && (idx == 0xffffffffu || choice[c] > v)) {
        v = choice[c];
        idx = e;
      }
    }
    WgArgMax(v, idx);
    // The winner's owner takes it out of the running and publishes its score.
    if (idx % RT_WG == tid) {
      const uint c = idx / RT_WG;
      for (uint cc = 0u; cc < RT_PER; ++cc)
        if (cc == c) {
          taken[cc] = true;
          rt_best_v[0] = score[cc];
        }
    }
    barrier();
    const float s = rt_best_v[0];
    barrier();
    wsum += s;
    if (tid == k) {
      id_mine = idx;
      w_mine = s;
    }
  }
  if (tid < RT_P.top_k) {
    float w = w_mine;
    if (RT_P.norm != 0u) w = w / (wsum + 1e-20);
    w *= RT_P.scaling;
    int id = int(id_mine);
    if (RT_P.n_local != 0u) {
      const bool here = id_mine >= RT_P.e0 && id_mine < RT_P.e0 + RT_P.n_local;
      id = here ? int(id_mine - RT_P.e0) : 0;
      w = here ? w : 0.0;
    }
    RT_STORE(r, tid, id, w);
  }
}
