#version 450
// Decode attention (up to kDecodeMaxRows rows, FUSED at most MAXNEW; keys split into chunks; or
// the decode rows of a mixed step, listed in the batch buffer at list_off), one workgroup per (kv head,
// row, key chunk) serving all G = Hq / Hkv query heads of that kv head: each key and value row
// is read once for the G heads (attention.comp reads it once per query head). Causal over the
// row's own slot (keys 0..pos); written to be latency-bound rather than load-bound, as decode is:
// per tile of KT keys every invocation issues all its loads at once —
//   scores: LPK = WG / KT invocations per key, each dotting DPL = DK / LPK dims of the key with
//     the G heads' q (shared memory); the LPK partial dots are added through shared memory;
//   values: VL = DV / 4 invocations per key (4 dims each, one 8- or 16-byte load per key), the
//     NG = WG / VL groups taking every NG-th key of the tile; loaded before the softmax so that
//     their latency overlaps the scores';
//   online softmax per head between the two (running max m, sum l, as in FlashAttention).
// The key chunks: chunk = max(ceil(n / S), MINCHUNK) keys, S = gl_NumWorkGroups.z (chunks past
// the context are empty). Each workgroup writes, per head h, its unnormalised sums, m and l to
// part[((t*Hq + h)*S + z)*(DV + 2) ..] (attention.comp SPLIT's layout); attention_combine.comp
// merges the chunks.
//   q: [T, *], head h at q[t*q_rs + h*DK ..]; caches paged (kv_addr.glsl; KV_F16 or KV_F32, or
//   the block types KV_Q8_0 / KV_Q4_0 of kv_type.glsl, dequantized as they are loaded; not FUSED),
//   key j of kv head kvh at KA[KvRow(slot, j)*a_w + kvh*DK ..], value at V[.. v_w, DV].
// FUSED (the rope of q and k and both cache stores folded in, vulkan_backend.cpp): q, kr, vr are
// the projections' raw rows; q is rotated here, and so are the step's new keys (rope.glsl, the
// batch buffer's cos/sin tables at cs_off, kv_store.comp's ROPE). A key at a position this step
// writes (a row of the same slot at that position, this row included) is taken from the step's
// rows, rounded as the cache stores it, instead of from the cache; the workgroup whose chunk
// holds its own row's position writes that row's key and value into the caches.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint DK = 128;       // key head dim: % 32 == 0, <= 256
layout(constant_id = 1) const uint DV = 128;       // value head dim: 4 * a power of two, 16..256
layout(constant_id = 2) const uint G = 1;          // query heads per kv head (<= 8)
layout(constant_id = 3) const uint MINCHUNK = 32;  // fewest keys a chunk takes
const uint WG = 128u, KT = 32u, LPK = WG / KT, DPL = DK / LPK;
const uint VL = DV / 4u, NG = WG / VL, KPG = KT / NG;
const uint MAXNEW = 8u;  // rows of a FUSED step (kDecodeFusedMaxRows)
const uint SLOTS = (G * KT + WG - 1u) / WG;  // (head, key) pairs of a tile per invocation

layout(binding = 0) readonly buffer Q { float q[]; };
#ifdef FUSED
layout(binding = 1) buffer KA { uint ka[]; };
layout(binding = 2) buffer V { uint v[]; };
#endif
layout(binding = 1) readonly buffer KA4 { uvec4 ka4[]; };
#if defined(KV_Q8_0) || defined(KV_Q4_0)
layout(binding = 1) readonly buffer KA { uint ka[]; };
layout(binding = 2) readonly buffer V { uint v[]; };
const uint EPQ = 4u;  // key elements per load
#elif defined(KV_F16)
layout(binding = 2) readonly buffer V4 { uvec2 v4[]; };  // 4 halves
const uint EPQ = 8u;                                     // key elements per uvec4
vec4 V4At(uint i) { const uvec2 w = v4[i]; return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
#else
layout(binding = 2) readonly buffer V4 { uvec4 v4[]; };  // 4 floats
const uint EPQ = 4u;
vec4 V4At(uint i) { return uintBitsToFloat(v4[i]); }
#endif
layout(binding = 3) writeonly buffer Part { float part[]; };
layout(binding = 4) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
#include "kv_type.glsl"
#if defined(KV_QUANT)
KV_LOADS(ka, KaAt, KaAt2, KaAt4)
KV_LOADS(v, VAt, VAt2, VAt4)
#endif
#ifdef FUSED
layout(binding = 5) readonly buffer KR { float kr[]; };
layout(binding = 6) readonly buffer VR { float vr[]; };
#include "rope.glsl"
#endif
layout(push_constant) uniform P {
  uint Hq, q_rs, capacity, a_w, v_w, slot_off, pos_off, T, k_rs, v_rs, rope_off, rope_half, neox, cs_off;
  float scale;
  uint list_off;  // mixed steps: bt[list_off] rows, their indices after it; 0: row = y
} p;

// q as vec4s in the order the score loop reads them: (head g, dims 4c.. of part pp of the key) at
// (g * DPL / 4 + c) * LPK + pp, so that the LPK parts of a warp read LPK adjacent vec4s (each
// broadcast to the warp's keys) with one 16-byte load; a [head][dim] layout put the parts DPL
// words apart, in one bank: four-way conflicts on every scalar load.
shared vec4 qs4[G * DK / 4u];
// Partial dots, [part of the key][head][key], each part's plane RS words apart so that the LPK
// parts' writes fall in different banks.
const uint RS = G * KT + 8u;
shared float red[LPK * RS];
shared float ps[G * KT];         // scores, then probabilities: [head][key]
shared float corr[G];            // per head: this tile's rescale of the running sums
shared float mh[G];              // per head: the running max at the end
shared vec4 vred[(NG - 1u) * G * VL + 1u];  // value sums of key groups 1.. at the end
#ifdef FUSED
shared float nk[MAXNEW * DK];
shared float nv[MAXNEW * DV];
shared uint npos[MAXNEW];
#endif

#ifdef FUSED
// As the cache keeps it.
float Stored(float x) {
#if defined(KV_F16)
  return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x;
#else
  return x;
#endif
}
// Element d of the head at BUF[o ..] of row t, rotated.
#define ROTATED(BUF, o, d, t, res)                                                        \
  {                                                                                       \
    uint pr_, fi_;                                                                        \
    bool first_;                                                                          \
    res = BUF[(o) + (d)];                                                                 \
    if (RopePair(d, p.rope_off, p.rope_half, p.neox != 0u, pr_, fi_, first_)) {           \
      const float c_ = intBitsToFloat(bt[p.cs_off + (t) * p.rope_half + fi_]);            \
      const float s_ = intBitsToFloat(bt[p.cs_off + (p.T + (t)) * p.rope_half + fi_]);    \
      res = RopeRotate(res, BUF[(o) + pr_], c_, s_, first_);                              \
    }                                                                                     \
  }
#endif
// The index of key j among this step's new keys of the chunk (nn of them), or -1.
int NewKey(uint j, uint nn) {
  int r = -1;
#ifdef FUSED
  for (uint n = 0u; n < nn; ++n)
    if (npos[n] == j) r = int(n);
#endif
  return r;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint kvh = gl_WorkGroupID.x, z = gl_WorkGroupID.z;
  uint t = gl_WorkGroupID.y;
  if (p.list_off != 0u) {  // uniform: the whole workgroup leaves or stays
    if (t >= uint(bt[p.list_off])) return;
    t = uint(bt[p.list_off + 1u + t]);
  }
  const uint S = gl_NumWorkGroups.z;
  const uint slot = uint(bt[p.slot_off + t]), pos = uint(bt[p.pos_off + t]);
  const uint n_ctx = pos + 1u;
  const uint chunk = max((n_ctx + S - 1u) / S, MINCHUNK);
  const uint jbeg = min(n_ctx, z * chunk), jend = min(n_ctx, jbeg + chunk);

  // A fixed trip count, unrolled: every q load of the invocation is issued at once; 4 dims each.
  [[unroll]] for (uint i = 0u; i < (G * DK / 4u + WG - 1u) / WG; ++i) {
    const uint e = tid + WG * i;
    if (e < G * DK / 4u) {
      const uint g = e / (DK / 4u), d0 = 4u * (e % (DK / 4u));
      const uint qo = t * p.q_rs + (kvh * G + g) * DK;
      vec4 x;
#ifdef FUSED
      [[unroll]] for (uint c = 0u; c < 4u; ++c) ROTATED(q, qo, d0 + c, t, x[c])
#else
      x = vec4(q[qo + d0], q[qo + d0 + 1u], q[qo + d0 + 2u], q[qo + d0 + 3u]);
#endif
      qs4[(g * (DPL / 4u) + (d0 % DPL) / 4u) * LPK + d0 / DPL] = x;
    }
  }
  uint nn = 0u;
#ifdef FUSED
  // The keys of this chunk written by this step: rows of this slot at positions in the chunk.
  uint self_n = MAXNEW;
  for (uint r = 0u; r < p.T; ++r) {
    const uint pr = uint(bt[p.pos_off + r]);
    if (uint(bt[p.slot_off + r]) != slot || pr < jbeg || pr >= jend) continue;
    if (r == t) self_n = nn;
    if (tid == 0u) npos[nn] = pr;
    for (uint d = tid; d < DK; d += WG) {
      float x;
      ROTATED(kr, r * p.k_rs + kvh * DK, d, r, x)
      nk[nn * DK + d] = Stored(x);
    }
    for (uint d = tid; d < DV; d += WG) nv[nn * DV + d] = Stored(vr[r * p.v_rs + kvh * DV + d]);
    ++nn;
  }
#endif
  barrier();
#ifdef FUSED
  if (self_n < MAXNEW) {  // this row's key and value go into the caches (read by later steps)
    const uint row = KvRow(slot, pos);
    const uint rk = row * p.a_w + kvh * DK, rv = row * p.v_w + kvh * DV;
#if defined(KV_F16)
    for (uint e = tid; e < DK / 2u; e += WG)
      ka[rk / 2u + e] = packHalf2x16(vec2(nk[self_n * DK + 2u * e], nk[self_n * DK + 2u * e + 1u]));
    for (uint e = tid; e < DV / 2u; e += WG)
      v[rv / 2u + e] = packHalf2x16(vec2(nv[self_n * DV + 2u * e], nv[self_n * DV + 2u * e + 1u]));
#else
    for (uint e = tid; e < DK; e += WG) ka[rk + e] = floatBitsToUint(nk[self_n * DK + e]);
    for (uint e = tid; e < DV; e += WG) v[rv + e] = floatBitsToUint(nv[self_n * DV + e]);
#endif
  }
#endif

  const uint kk = tid / LPK, pp = tid % LPK;  // scores: key kk of a tile, dims [pp*DPL, +DPL)
  const uint vl = tid % VL, kg = tid / VL;     // values: dims [4 vl, +4), keys kg + NG i
  float m[SLOTS], lsum[SLOTS];                 // per (head, key) pair e = tid + WG s of a tile
  [[unroll]] for (uint s = 0u; s < SLOTS; ++s) {
    m[s] = -1.0 / 0.0;
    lsum[s] = 0.0;
  }
  vec4 acc[G];
  [[unroll]] for (uint g = 0u; g < G; ++g) acc[g] = vec4(0.0);

  for (uint j0 = jbeg; j0 < jend; j0 += KT) {
    // Loads first: this invocation's slice of key j0 + kk and its values.
    const uint j = j0 + kk;
    const int jn = j < jend ? NewKey(j, nn) : -1;
#if defined(KV_QUANT)
    vec4 kw[DPL / EPQ];  // dequantized as loaded
    if (j < jend && jn < 0) {
      const uint row = KvRow(slot, j), c0 = kvh * DK + pp * DPL;
      [[unroll]] for (uint u = 0u; u < DPL / EPQ; ++u) kw[u] = KaAt4(row, c0 + EPQ * u, p.a_w);
    }
#else
    uvec4 kw[DPL / EPQ];
    if (j < jend && jn < 0) {
      const uint r4 = (KvRow(slot, j) * p.a_w + kvh * DK + pp * DPL) / EPQ;
      [[unroll]] for (uint u = 0u; u < DPL / EPQ; ++u) kw[u] = ka4[r4 + u];
    }
#endif
    vec4 vv[KPG];
    [[unroll]] for (uint i = 0u; i < KPG; ++i) {
      const uint jv = j0 + kg + NG * i;
      vv[i] = vec4(0.0);
      if (jv < jend) {
        const int vn = NewKey(jv, nn);
#ifdef FUSED
        if (vn >= 0) {
          const uint o = uint(vn) * DV + 4u * vl;
          vv[i] = vec4(nv[o], nv[o + 1u], nv[o + 2u], nv[o + 3u]);
        } else
#endif
#if defined(KV_QUANT)
          vv[i] = VAt4(KvRow(slot, jv), kvh * DV + 4u * vl, p.v_w);
#else
          vv[i] = V4At((KvRow(slot, jv) * p.v_w + kvh * DV) / 4u + vl);
#endif
      }
    }
    float dots[G];
    [[unroll]] for (uint g = 0u; g < G; ++g) dots[g] = 0.0;
    if (j < jend) {
      [[unroll]] for (uint u = 0u; u < DPL / EPQ; ++u) {
        float kx[EPQ];
#ifdef FUSED
        if (jn >= 0) {
          [[unroll]] for (uint e = 0u; e < EPQ; ++e) kx[e] = nk[uint(jn) * DK + pp * DPL + u * EPQ + e];
        } else
#endif
        {
#if defined(KV_QUANT)
          [[unroll]] for (uint e = 0u; e < 4u; ++e) kx[e] = kw[u][e];
#elif defined(KV_F16)
          [[unroll]] for (uint e = 0u; e < 4u; ++e) {
            const vec2 h2 = unpackHalf2x16(kw[u][e]);
            kx[2u * e] = h2.x;
            kx[2u * e + 1u] = h2.y;
          }
#else
          [[unroll]] for (uint e = 0u; e < 4u; ++e) kx[e] = uintBitsToFloat(kw[u][e]);
#endif
        }
        [[unroll]] for (uint g = 0u; g < G; ++g) {
          [[unroll]] for (uint e = 0u; e < EPQ; e += 4u)
            dots[g] += dot(qs4[(g * (DPL / 4u) + (u * EPQ + e) / 4u) * LPK + pp],
                           vec4(kx[e], kx[e + 1u], kx[e + 2u], kx[e + 3u]));
        }
      }
    }
    [[unroll]] for (uint g = 0u; g < G; ++g) red[pp * RS + g * KT + kk] = dots[g];
    barrier();
    // Scores of the tile, then the online softmax per head.
    float sc[SLOTS];
    [[unroll]] for (uint s = 0u; s < SLOTS; ++s) {
      const uint e = tid + WG * s, g = e / KT, k = e % KT;
      sc[s] = -1.0 / 0.0;
      if (e < G * KT && j0 + k < jend) {
        float d = 0.0;
        [[unroll]] for (uint i = 0u; i < LPK; ++i) d += red[i * RS + g * KT + k];
        sc[s] = d * p.scale;
      }
      if (e < G * KT) ps[e] = sc[s];
    }
    barrier();
    float pj[SLOTS];
    [[unroll]] for (uint s = 0u; s < SLOTS; ++s) {
      const uint e = tid + WG * s, g = e / KT;
      pj[s] = 0.0;
      if (e < G * KT) {
        float tmax = ps[g * KT];
        for (uint k = 1u; k < KT; ++k) tmax = max(tmax, ps[g * KT + k]);
        const float m_new = max(m[s], tmax);  // finite: the tile has a key
        const float c = exp(m[s] - m_new);
        pj[s] = exp(sc[s] - m_new);
        lsum[s] = lsum[s] * c + pj[s];
        m[s] = m_new;
        if (e % KT == 0u) corr[g] = c;
      }
    }
    barrier();
    [[unroll]] for (uint s = 0u; s < SLOTS; ++s) {
      const uint e = tid + WG * s;
      if (e < G * KT) ps[e] = pj[s];
    }
    barrier();
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      vec4 a = acc[g] * corr[g];
      [[unroll]] for (uint i = 0u; i < KPG; ++i) a += ps[g * KT + kg + NG * i] * vv[i];
      acc[g] = a;
    }
    barrier();  // red, ps and corr are rewritten by the next tile
  }

  // Per head: l = Σ of the pairs' sums, m (the same in every pair of the head); the key groups'
  // value sums added by group 0.
  [[unroll]] for (uint s = 0u; s < SLOTS; ++s) {
    const uint e = tid + WG * s;
    if (e < G * KT) {
      ps[e] = lsum[s];
      if (e % KT == 0u) mh[e / KT] = m[s];
    }
  }
  if (kg > 0u) {
    [[unroll]] for (uint g = 0u; g < G; ++g) vred[((kg - 1u) * G + g) * VL + vl] = acc[g];
  }
  barrier();
  if (kg == 0u) {
    [[unroll]] for (uint g = 0u; g < G; ++g) {
      vec4 a = acc[g];
      for (uint k = 1u; k < NG; ++k) a += vred[((k - 1u) * G + g) * VL + vl];
      const uint pb = ((t * p.Hq + kvh * G + g) * S + z) * (DV + 2u) + 4u * vl;
      part[pb] = a.x;
      part[pb + 1u] = a.y;
      part[pb + 2u] = a.z;
      part[pb + 3u] = a.w;
    }
  }
  if (tid < G) {
    float l = 0.0;
    for (uint k = 0u; k < KT; ++k) l += ps[tid * KT + k];
    const uint pb = ((t * p.Hq + kvh * G + tid) * S + z) * (DV + 2u);
    part[pb + DV] = mh[tid];  // -inf for an empty chunk
    part[pb + DV + 1u] = l;
  }
}
