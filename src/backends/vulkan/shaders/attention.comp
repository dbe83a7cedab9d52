#version 450
// Flash-style attention of one query row and head against its sequence's KV cache, causal
// (keys 0..pos of the row's own slot), GQA (q head h reads kv head h / (Hq / Hkv)). One
// workgroup per (head, row). Keys are taken WG at a time: each invocation scores one key, the
// tile's max comes from subgroup reductions, the running max m and sum l rescale the output
// accumulators (each invocation owns dims d = tid + WG*c), as in FlashAttention.
//   q: [T, *] with q[t*q_rs + h*q_hs + i], i < wa + wb
//   key j = [KA[row(j), kvh*wa ..] , KB[row(j), kvh*wb ..]] (KB optional: MLA's rope part)
//   value j = V[row(j), kvh*dv ..], row(j) = KvRow(slot, j) (kv_addr.glsl: paged; the cache type
//   KV_F32, KV_F16, KV_Q8_0 or KV_Q4_0, kv_type.glsl: block types dequantized as they are loaded)
//   out[t*o_rs + h*o_hs + d] = Σ_j softmax(scale * q·key_j) value_j[d]
// SPLIT (decode, few rows): the keys of a row are split into gl_NumWorkGroups.z contiguous
// chunks, one workgroup each (flash-decoding), so that a handful of heads still fills the GPU;
// each writes its unnormalised accumulators, running max and sum to part[((t*Hq + h)*S + z)*
// (dv + 2) ..] and attention_combine.comp merges them.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 128) in;
const uint WG = 128, MAXC = 8, MAXQ = 1024;
layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer KA { uint ka[]; };
layout(binding = 2) readonly buffer KB { uint kb[]; };
layout(binding = 3) readonly buffer V { uint v[]; };
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 5) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
#include "kv_type.glsl"
#ifdef SPLIT
layout(binding = 6) writeonly buffer Part { float part[]; };
#endif
layout(push_constant) uniform P {
  uint Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs, o_hs;
  float scale;
} p;
// The key caches also seen as uvec4, for the vector score loop.
layout(binding = 1) readonly buffer KA4 { uvec4 ka4[]; };
layout(binding = 2) readonly buffer KB4 { uvec4 kb4[]; };
#if defined(KV_QUANT)
KV_LOADS(ka, KaAt, KaAt2, KaAt4)
KV_LOADS(kb, KbAt, KbAt2, KbAt4)
KV_LOADS(v, VAt, VAt2, VAt4)
const uint EPQ = 4u;
#elif defined(KV_F16)
float LoadKA(uint i) { return unpackHalf2x16(ka[i >> 1])[i & 1u]; }
float LoadKB(uint i) { return unpackHalf2x16(kb[i >> 1])[i & 1u]; }
float LoadV(uint i) { return unpackHalf2x16(v[i >> 1])[i & 1u]; }
const uint EPQ = 8u;  // key elements per uvec4
#else
float LoadKA(uint i) { return uintBitsToFloat(ka[i]); }
float LoadKB(uint i) { return uintBitsToFloat(kb[i]); }
float LoadV(uint i) { return uintBitsToFloat(v[i]); }
const uint EPQ = 4u;
#endif
shared float qs[MAXQ];
// qs[qo .. qo + EPQ) · the EPQ key elements of w.
float DotQ(uint qo, uvec4 w) {
#if defined(KV_F16)
  const vec2 a = unpackHalf2x16(w.x), b = unpackHalf2x16(w.y), c = unpackHalf2x16(w.z),
             d = unpackHalf2x16(w.w);
  return dot(vec4(qs[qo], qs[qo + 1u], qs[qo + 2u], qs[qo + 3u]), vec4(a, b)) +
         dot(vec4(qs[qo + 4u], qs[qo + 5u], qs[qo + 6u], qs[qo + 7u]), vec4(c, d));
#else
  return dot(vec4(qs[qo], qs[qo + 1u], qs[qo + 2u], qs[qo + 3u]), uintBitsToFloat(w));
#endif
}
// q[qo ..] · key elements [r, r + n) of a cache: 2 uvec4 per step, two accumulators, where the
// row is 2-uvec4 aligned; one element at a time otherwise.
#define KEY_DOT(BUF4, LOAD, r, qo, n, out)                                                  \
  {                                                                                       \
    float d0 = 0.0, d1 = 0.0;                                                             \
    if ((r) % EPQ == 0u && (n) % (2u * EPQ) == 0u) {                                      \
      for (uint i = 0; i < (n); i += 2u * EPQ) {                                          \
        d0 += DotQ((qo) + i, BUF4[((r) + i) / EPQ]);                                      \
        d1 += DotQ((qo) + i + EPQ, BUF4[((r) + i) / EPQ + 1u]);                           \
      }                                                                                   \
    } else {                                                                              \
      for (uint i = 0; i < (n); ++i) d0 += qs[(qo) + i] * LOAD((r) + i);                  \
    }                                                                                     \
    out += d0 + d1;                                                                       \
  }
shared float ps[WG];
void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint kvh = h / (p.Hq / p.Hkv);
  const uint dq = p.wa + p.wb;
  for (uint i = tid; i < dq; i += WG) qs[i] = q[t * p.q_rs + h * p.q_hs + i];
  barrier();
  const uint slot = uint(bt[p.slot_off + t]);
  const uint n_ctx = uint(bt[p.pos_off + t]) + 1u;
  float m = -1.0 / 0.0, l = 0.0;
  float acc[MAXC];
  [[unroll]] for (uint c = 0; c < MAXC; ++c) acc[c] = 0.0;
#ifdef SPLIT
  const uint S = gl_NumWorkGroups.z, z = gl_WorkGroupID.z;
  const uint chunk = (n_ctx + S - 1u) / S;
  const uint jbeg = min(n_ctx, z * chunk), jend = min(n_ctx, jbeg + chunk);
#else
  const uint jbeg = 0u, jend = n_ctx;
#endif
  for (uint j0 = jbeg; j0 < jend; j0 += WG) {
    const uint j = j0 + tid;
    float s = -1.0 / 0.0;
    if (j < jend) {
      float d = 0.0;
      const uint row = KvRow(slot, j);
#if defined(KV_QUANT)
      // Head dims are whole 32-blocks (host-checked): four elements per load.
      for (uint i = 0; i < p.wa; i += 4u)
        d += dot(vec4(qs[i], qs[i + 1u], qs[i + 2u], qs[i + 3u]), KaAt4(row, kvh * p.wa + i, p.a_w));
      for (uint i = 0; i < p.wb; i += 4u) {
        const uint qo = p.wa + i;
        d += dot(vec4(qs[qo], qs[qo + 1u], qs[qo + 2u], qs[qo + 3u]), KbAt4(row, kvh * p.wb + i, p.b_w));
      }
#else
      const uint ra = row * p.a_w + kvh * p.wa;
      KEY_DOT(ka4, LoadKA, ra, 0u, p.wa, d)
      const uint rb = row * p.b_w + kvh * p.wb;
      KEY_DOT(kb4, LoadKB, rb, p.wa, p.wb, d)
#endif
      s = d * p.scale;
    }
    const float m_new = max(m, WgMax(s));
    const float corr = exp(m - m_new);
    const float pj = j < jend ? exp(s - m_new) : 0.0;
    ps[tid] = pj;
    l = l * corr + WgSum(pj);  // WgSum's barriers also publish ps
    const uint nt = min(WG, jend - j0);
    [[unroll]] for (uint c = 0; c < MAXC; ++c) {
      const uint d = tid + WG * c;
      if (d < p.dv) {
        float a = acc[c] * corr;
#if defined(KV_QUANT)
        for (uint jj = 0; jj < nt; ++jj) a += ps[jj] * VAt(KvRow(slot, j0 + jj), kvh * p.dv + d, p.v_w);
#else
        for (uint jj = 0; jj < nt; ++jj) a += ps[jj] * LoadV(KvRow(slot, j0 + jj) * p.v_w + kvh * p.dv + d);
#endif
        acc[c] = a;
      }
    }
    m = m_new;
    barrier();  // ps is rewritten by the next tile
  }
#ifdef SPLIT
  const uint pb = ((t * p.Hq + h) * S + z) * (p.dv + 2u);
  [[unroll]] for (uint c = 0; c < MAXC; ++c) {
    const uint d = tid + WG * c;
    if (d < p.dv) part[pb + d] = acc[c];
  }
  if (tid == 0u) {
    part[pb + p.dv] = m;   // -inf for an empty chunk
    part[pb + p.dv + 1u] = l;
  }
#else
  [[unroll]] for (uint c = 0; c < MAXC; ++c) {
    const uint d = tid + WG * c;
    if (d < p.dv) o[t * p.o_rs + h * p.o_hs + d] = acc[c] / l;
  }
#endif
}
