#version 450
// MLA attention in the absorbed form over the latent cache (ops/mla_attention.cpp), one
// workgroup per (group of G query heads, row, key chunk): every latent row of the chunk is read
// once for the G heads (attention.comp reads it once per head), as the key (latent C_j and its
// rope part PE_j) and as the value (C_j):
//   o[t, h] = Σ_j softmax_j(scale · (qc[t, h]·C_j + qr[t, h]·PE_j)) C_j,  j = 0 .. pos(t)
//   q: [T, *], head h's R latent dims at q[t*q_rs + h*q_hs ..] (the absorbed q_nope); its DR
//   rope dims at qp[t*pq_rs + h*pq_hs + pq_off ..] (the projection's q_pe), ROPE: rotated here
//   (rope.glsl's pairs, cos/sin from the batch buffer's tables at cs_off) — the q rope the
//   builder folds in
//   C: [rows][R], PE: [rows][DR] (KV_F16 or f32, or the block types KV_Q8_0 / KV_Q4_0 of
//   kv_type.glsl: the int8 latent, dequantized as it is loaded); key j of the row's slot at row KvRow(slot, j)
//   (kv_addr.glsl: the paged cache's block tables)
// Per tile of KT keys:
//   scores: LPK = 8 invocations per key, lane s dotting the dim pairs s, s + 8, ... of the key
//     with the G heads' q (shared memory, f32); the 8 partial dots are added by subgroup
//     shuffles (the 8 lanes of a key are adjacent in one subgroup: subgroup size % 8 == 0);
//   online softmax per head (running max m, sum l, as in FlashAttention);
//   values: invocation tid owns the dim pairs tid, tid + WG, ... of all G heads' outputs and
//     adds the tile's rows weighted by the heads' probabilities.
// The keys of a row are split into S = gl_NumWorkGroups.z chunks of max(ceil(n / S), MINCHUNK)
// keys; each workgroup writes per head its unnormalised sums, m and l to
// part[((t*Hq + h)*S + z)*(R + 2) ..] and attention_combine.comp merges them (decode). A chunk
// past the context writes only m = -inf (the combine skips it without reading its sums).
// DIRECT (prefill, S = 1): the normalised output goes straight to o[t*o_rs + h*o_hs + d].
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint R = 512;         // latent dims (even)
layout(constant_id = 1) const uint DR = 64;         // rope dims (even)
layout(constant_id = 2) const uint G = 4;           // query heads per workgroup
layout(constant_id = 3) const uint MINCHUNK = 32;   // fewest keys a chunk takes
layout(constant_id = 4) const uint LB = 4;          // key or value loads issued together
const uint WG = 256u, LPK = 8u, KT = WG / LPK;
const uint R2 = R / 2u, DR2 = DR / 2u, QW2 = R2 + DR2;   // dim pairs
const uint MAXP = (R2 + WG - 1u) / WG;                   // value pairs per invocation
const uint PE_ = (G * KT + WG - 1u) / WG;                // (head, key) entries per invocation
const uint NC = (R2 + LPK - 1u) / LPK;                   // latent pairs per lane and key
const uint QI = (G * QW2 + WG - 1u) / WG;                // q pairs staged per invocation

layout(binding = 0) readonly buffer Q { float q[]; };
#if defined(KV_Q8_0) || defined(KV_Q4_0)
layout(binding = 1) readonly buffer C { uint cq[]; };
layout(binding = 2) readonly buffer PE { uint peq[]; };
#elif defined(KV_F16)
layout(binding = 1) readonly buffer C { uint c2[]; };    // 2 halves
layout(binding = 2) readonly buffer PE { uint pe2[]; };
vec2 LoadC(uint i) { return unpackHalf2x16(c2[i]); }
vec2 LoadPE(uint i) { return unpackHalf2x16(pe2[i]); }
#else
layout(binding = 1) readonly buffer C { vec2 c2[]; };    // 2 floats
layout(binding = 2) readonly buffer PE { vec2 pe2[]; };
vec2 LoadC(uint i) { return c2[i]; }
vec2 LoadPE(uint i) { return pe2[i]; }
#endif
layout(binding = 3) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
#include "rope.glsl"
#include "kv_type.glsl"
// Dim pair i of the latent / rope row of cache row `row`.
#if defined(KV_QUANT)
KV_LOADS(cq, CAt, CAt2, CAt4)
KV_LOADS(peq, PeAt, PeAt2, PeAt4)
#define LOAD_C(row, i) CAt2(row, 2u * (i), R)
#define LOAD_PE(row, i) PeAt2(row, 2u * (i), DR)
#else
#define LOAD_C(row, i) LoadC((row) * R2 + (i))
#define LOAD_PE(row, i) LoadPE((row) * DR2 + (i))
#endif
#ifdef DIRECT
layout(binding = 4) writeonly buffer O { float o[]; };
#else
layout(binding = 4) writeonly buffer Part { float part[]; };
#endif
layout(binding = 5) readonly buffer QP { float qp[]; };
layout(push_constant) uniform P {
  uint Hq, q_rs, q_hs, slot_off, pos_off, o_rs, o_hs;
  float scale;
  uint pq_rs, pq_hs, pq_off, T, half_, neox, cs_off;
} p;

// Rope dim e of head h's q (row t), rotated with ROPE.
float QPe(uint t, uint h, uint e) {
  const uint b = t * p.pq_rs + h * p.pq_hs + p.pq_off;
#ifdef ROPE
  uint partner, i;
  bool first;
  if (RopePair(e, 0u, p.half_, p.neox != 0u, partner, i, first)) {
    const float cs = intBitsToFloat(bt[p.cs_off + t * p.half_ + i]);
    const float sn = intBitsToFloat(bt[p.cs_off + p.T * p.half_ + t * p.half_ + i]);
    return RopeRotate(qp[b + e], qp[b + partner], cs, sn, first);
  }
#endif
  return qp[b + e];
}

shared vec2 qs[G * QW2];      // the G heads' q, f32
shared float ps[G * KT];      // scores, then probabilities: [head][key]
shared float mh[G], lh[G], corr[G];
shared uint rows[KT];         // the tile's cache rows (the values' loads need no table read)

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint h0 = gl_WorkGroupID.x * G, t = gl_WorkGroupID.y;
  const uint slot = uint(bt[p.slot_off + t]);
  const uint n_ctx = uint(bt[p.pos_off + t]) + 1u;
#ifdef DIRECT
  const uint S = 1u, z = 0u;
#else
  const uint S = gl_NumWorkGroups.z, z = gl_WorkGroupID.z;
#endif
  const uint chunk = max((n_ctx + S - 1u) / S, MINCHUNK);
  const uint jbeg = min(n_ctx, z * chunk), jend = min(n_ctx, jbeg + chunk);
#ifndef DIRECT
  if (jbeg == jend) {  // past the context: only "no keys" for the combine, which then skips it
    if (tid < G && h0 + tid < p.Hq) part[((t * p.Hq + h0 + tid) * S + z) * (R + 2u) + R] = -1.0 / 0.0;
    return;
  }
#endif
  // Unrolled: every invocation's q loads are issued before the first is stored (a loop of
  // load-then-store waits out the memory latency once per pair).
  [[unroll]] for (uint c = 0u; c < QI; ++c) {
    const uint i = tid + c * WG;
    const uint hh = i / QW2, d = i % QW2, h = h0 + hh;
    vec2 v = vec2(0.0);
    if (i < G * QW2 && h < p.Hq && d < R2) {
      const uint qo = t * p.q_rs + h * p.q_hs + 2u * d;
      v = vec2(q[qo], q[qo + 1u]);
    } else if (i < G * QW2 && h < p.Hq) {
      const uint e = 2u * (d - R2);
      v = vec2(QPe(t, h, e), QPe(t, h, e + 1u));
    }
    if (i < G * QW2) qs[i] = v;
  }
  if (tid < G) {
    mh[tid] = -1.0 / 0.0;
    lh[tid] = 0.0;
  }
  vec2 acc[G * MAXP];
  [[unroll]] for (uint i = 0u; i < G * MAXP; ++i) acc[i] = vec2(0.0);
  barrier();

  const uint kj = tid / LPK, s = tid % LPK;
  for (uint j0 = jbeg; j0 < jend; j0 += KT) {
    // Scores of the tile's keys.
    const uint j = j0 + kj;
    float dots[G];
    [[unroll]] for (uint hh = 0u; hh < G; ++hh) dots[hh] = 0.0;
    if (j < jend) {
      const uint row = KvRow(slot, j);
      if (s == 0u) rows[kj] = row;
      // LB key pairs loaded together, then used (LB = 1: one load per use).
      [[unroll]] for (uint i0 = 0u; i0 < NC; i0 += LB) {
        vec2 k[LB];
        [[unroll]] for (uint b = 0u; b < LB; ++b) {
          const uint i = s + (i0 + b) * LPK;
          k[b] = i0 + b < NC && i < R2 ? LOAD_C(row, i) : vec2(0.0);
        }
        [[unroll]] for (uint b = 0u; b < LB; ++b) {
          const uint i = min(s + (i0 + b) * LPK, R2 - 1u);  // past R2: k is 0
          [[unroll]] for (uint hh = 0u; hh < G; ++hh) dots[hh] += dot(qs[hh * QW2 + i], k[b]);
        }
      }
      [[unroll]] for (uint i = s; i < DR2; i += LPK) {
        const vec2 k = LOAD_PE(row, i);
        [[unroll]] for (uint hh = 0u; hh < G; ++hh) dots[hh] += dot(qs[hh * QW2 + R2 + i], k);
      }
    }
    [[unroll]] for (uint hh = 0u; hh < G; ++hh) {
      float d = dots[hh];
      d += subgroupShuffleXor(d, 1u);
      d += subgroupShuffleXor(d, 2u);
      d += subgroupShuffleXor(d, 4u);
      dots[hh] = d;
    }
    [[unroll]] for (uint hh = 0u; hh < G; ++hh)
      if (s == hh % LPK) ps[hh * KT + kj] = j < jend ? dots[hh] * p.scale : -1.0 / 0.0;
    barrier();
    // Running max per head, and the rescale of the sums so far.
    if (tid < G) {
      float mt = mh[tid];
      for (uint jj = 0u; jj < KT; ++jj) mt = max(mt, ps[tid * KT + jj]);
      corr[tid] = mh[tid] == -1.0 / 0.0 ? 0.0 : exp(mh[tid] - mt);
      mh[tid] = mt;
    }
    barrier();
    [[unroll]] for (uint c = 0u; c < PE_; ++c) {
      const uint e = tid + WG * c;
      if (e < G * KT) {
        const float sc = ps[e];
        ps[e] = sc == -1.0 / 0.0 ? 0.0 : exp(sc - mh[e / KT]);
      }
    }
    barrier();
    if (tid < G) {
      float l = lh[tid] * corr[tid];
      for (uint jj = 0u; jj < KT; ++jj) l += ps[tid * KT + jj];
      lh[tid] = l;
    }
    // Values: the tile's latent rows weighted by each head's probabilities.
    const uint nt = min(KT, jend - j0);
    [[unroll]] for (uint hh = 0u; hh < G; ++hh)
      [[unroll]] for (uint c = 0u; c < MAXP; ++c) acc[hh * MAXP + c] *= corr[hh];
    for (uint jj = 0u; jj < nt; jj += LB) {  // LB rows loaded together (past the chunk: p = 0)
      [[unroll]] for (uint c = 0u; c < MAXP; ++c) {
        const uint i = tid + WG * c;
        if (i < R2) {
          vec2 v[LB];
          [[unroll]] for (uint b = 0u; b < LB; ++b) v[b] = LOAD_C(rows[min(jj + b, nt - 1u)], i);
          [[unroll]] for (uint b = 0u; b < LB; ++b)
            [[unroll]] for (uint hh = 0u; hh < G; ++hh)
              acc[hh * MAXP + c] += ps[hh * KT + min(jj + b, KT - 1u)] * (jj + b < nt ? v[b] : vec2(0.0));
        }
      }
    }
    barrier();  // ps, corr and lh are rewritten by the next tile
  }

  [[unroll]] for (uint hh = 0u; hh < G; ++hh) {
    const uint h = h0 + hh;
    if (h >= p.Hq) continue;
#ifdef DIRECT
    const float inv = lh[hh] > 0.0 ? 1.0 / lh[hh] : 0.0;
    [[unroll]] for (uint c = 0u; c < MAXP; ++c) {
      const uint i = tid + WG * c;
      if (i < R2) {
        const uint oo = t * p.o_rs + h * p.o_hs + 2u * i;
        o[oo] = acc[hh * MAXP + c].x * inv;
        o[oo + 1u] = acc[hh * MAXP + c].y * inv;
      }
    }
#else
    const uint pb = ((t * p.Hq + h) * S + z) * (R + 2u);
    [[unroll]] for (uint c = 0u; c < MAXP; ++c) {
      const uint i = tid + WG * c;
      if (i < R2) {
        part[pb + 2u * i] = acc[hh * MAXP + c].x;
        part[pb + 2u * i + 1u] = acc[hh * MAXP + c].y;
      }
    }
    if (tid == 0u) {
      part[pb + R] = mh[hh];  // -inf for an empty chunk
      part[pb + R + 1u] = lh[hh];
    }
#endif
  }
}
