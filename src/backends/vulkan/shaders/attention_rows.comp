#version 450
#extension GL_EXT_control_flow_attributes : require
// Prefill attention with multi-row tiles: one workgroup computes QR = 8 query rows t0..t0+7 of
// one head h (causal, GQA, the rows' own slots), so every key/value tile loaded into shared
// memory serves 8 rows instead of 1. Same inputs and layout as attention.comp without the MLA
// part (wb == 0), head dims dk <= MAXDK and dv <= MAXD (both 128, or 64 in the small variant;
// MAXDK 192 in the wide-key variants for MLA's non-absorbed heads; host-checked).
//   q: q[t*q_rs + h*q_hs + i]; key j of slot s = KA[KvRow(s, j)*a_w + kvh*dk ..],
//   value j = V[KvRow(s, j)*v_w + kvh*dv ..] (kv_addr.glsl); caches of the cache type (KV_F32,
//   KV_F16, KV_Q8_0, KV_Q4_0: kv_type.glsl, dequantized by the tile loads)
//   out[t*o_rs + h*o_hs + d] = Σ_{j <= pos_t} softmax_j(scale * q_t·key_j) value_j[d]
// Keys go KT (32 or 16) at a time: invocation (r, jj) = (tid / 32, tid % 32), jj < KT, scores
// row r against key jj of the tile; the running max m and sum l of each row rescale the row's
// accumulators, of which invocation (r, lane) owns dims 4 lane .. 4 lane + 3. q, key and value
// rows sit in shared memory as vec4 (zero-padded to a multiple of 4; key rows padded by one vec4
// so the 32 lanes' 16-byte reads of 32 different keys hit distinct banks): a score is dk / 4
// vec4 dot products, an accumulator update one vec4 read per key. Rows of one group may belong
// to different sequences (slots): the group makes one pass over the keys per distinct slot, rows
// of other slots masked out of that pass. With tiles_off (mixed steps), a workgroup takes the
// rows of one tile of the batch buffer's table instead: at most 8 rows of one sequence.
layout(local_size_x = 256) in;
#ifndef KT
#define KT 32  // keys per tile: 32 needs ~38 KiB of shared memory, 16 ~21 KiB
#endif
#ifndef MAXD
#define MAXD 128  // largest head dim (dk, dv); 64 halves the tiles
#endif
#ifndef MAXDK
#define MAXDK MAXD  // largest key width (192: 32-key tiles need ~48 KiB of shared memory)
#endif
const uint QR = 8, MAXD4 = MAXD / 4, MAXDK4 = MAXDK / 4;
layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer KA { uint ka[]; };
layout(binding = 2) readonly buffer KB { uint kb[]; };  // unused (MLA's rope part)
layout(binding = 3) readonly buffer V { uint v[]; };
layout(binding = 4) writeonly buffer O { float o[]; };
layout(binding = 5) readonly buffer B { int bt[]; };
#include "kv_addr.glsl"
#include "kv_type.glsl"
layout(push_constant) uniform P {
  uint Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs, o_hs;
  float scale;
  uint T;
  uint tiles_off;  // mixed steps: bt[tiles_off] tiles, (first row, rows) pairs after it; 0: 8 rows from 8y
} p;
#if defined(KV_QUANT)
KV_LOADS(ka, KaAt, KaAt2, KaAt4)
KV_LOADS(v, VAt, VAt2, VAt4)
#elif defined(KV_F16)
float LoadKA(uint i) { return unpackHalf2x16(ka[i >> 1])[i & 1u]; }
float LoadV(uint i) { return unpackHalf2x16(v[i >> 1])[i & 1u]; }
#else
float LoadKA(uint i) { return uintBitsToFloat(ka[i]); }
float LoadV(uint i) { return uintBitsToFloat(v[i]); }
#endif
shared vec4 qs4[QR][MAXDK4];
shared vec4 ks4[KT][MAXDK4 + 1];
shared vec4 vs4[KT][MAXD4];
shared float ps[QR][KT];
shared int row_slot[QR];
shared uint row_ctx[QR];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x;
  uint t0 = gl_WorkGroupID.y * QR, tend = min(p.T, t0 + QR);
  if (p.tiles_off != 0u) {  // uniform: the whole workgroup leaves or stays
    const uint y = gl_WorkGroupID.y;
    if (y >= uint(bt[p.tiles_off])) return;
    t0 = uint(bt[p.tiles_off + 1u + 2u * y]);
    tend = min(p.T, t0 + uint(bt[p.tiles_off + 2u + 2u * y]));
  }
  const uint kvh = h / (p.Hq / p.Hkv);
  const uint r = tid / 32u, lane = tid % 32u;
  const uint dk = p.wa, nk4 = (dk + 3u) / 4u, nv4 = (p.dv + 3u) / 4u;
  for (uint e = tid; e < QR * nk4; e += 256u) {
    const uint rr = e / nk4, i4 = e % nk4;
    vec4 v = vec4(0.0);
    for (uint c = 0; c < 4u; ++c)
      if (t0 + rr < tend && 4u * i4 + c < dk) v[c] = q[(t0 + rr) * p.q_rs + h * p.q_hs + 4u * i4 + c];
    qs4[rr][i4] = v;
  }
  if (tid < QR) {
    const bool live = t0 + tid < tend;
    row_slot[tid] = live ? bt[p.slot_off + t0 + tid] : -1;
    row_ctx[tid] = live ? uint(bt[p.pos_off + t0 + tid]) + 1u : 0u;
  }
  barrier();
  const bool live = t0 + r < tend;
  const int my_slot = row_slot[r];
  float m = -1.0 / 0.0, l = 0.0;
  vec4 acc = vec4(0.0);

  for (uint pass = 0; pass < QR; ++pass) {
    // One pass per distinct slot among the live rows (uniform: shared values only).
    const int slot = row_slot[pass];
    if (slot < 0) continue;
    bool seen = false;
    for (uint e = 0; e < pass; ++e) seen = seen || row_slot[e] == slot;
    if (seen) continue;
    uint n_ctx = 0;
    for (uint e = 0; e < QR; ++e)
      if (row_slot[e] == slot) n_ctx = max(n_ctx, row_ctx[e]);
    const bool mine = live && my_slot == slot;
    const uint my_ctx = mine ? row_ctx[r] : 0u;
    for (uint j0 = 0; j0 < n_ctx; j0 += KT) {
      for (uint e = tid; e < KT * nk4; e += 256u) {
        const uint jj = e / nk4, i4 = e % nk4;
        vec4 v = vec4(0.0);
        const uint row = j0 + jj < n_ctx ? KvRow(uint(slot), j0 + jj) : 0u;
#if defined(KV_QUANT)
        if (j0 + jj < n_ctx) v = KaAt4(row, kvh * dk + 4u * i4, p.a_w);  // dk % 32 == 0
#else
        for (uint c = 0; c < 4u; ++c)
          if (j0 + jj < n_ctx && 4u * i4 + c < dk) v[c] = LoadKA(row * p.a_w + kvh * dk + 4u * i4 + c);
#endif
        ks4[jj][i4] = v;
      }
      for (uint e = tid; e < KT * nv4; e += 256u) {
        const uint jj = e / nv4, i4 = e % nv4;
        vec4 v = vec4(0.0);
        const uint row = j0 + jj < n_ctx ? KvRow(uint(slot), j0 + jj) : 0u;
#if defined(KV_QUANT)
        if (j0 + jj < n_ctx) v = VAt4(row, kvh * p.dv + 4u * i4, p.v_w);  // dv % 32 == 0
#else
        for (uint c = 0; c < 4u; ++c)
          if (j0 + jj < n_ctx && 4u * i4 + c < p.dv) v[c] = LoadV(row * p.v_w + kvh * p.dv + 4u * i4 + c);
#endif
        vs4[jj][i4] = v;
      }
      barrier();
      // Score of row r against key lane of the tile.
      const uint j = j0 + lane;
      float s = -1.0 / 0.0;
      if (lane < KT && j < my_ctx) {
        float dsum = 0.0;
        for (uint i4 = 0; i4 < nk4; ++i4) dsum += dot(qs4[r][i4], ks4[lane][i4]);
        s = dsum * p.scale;
      }
      if (lane < KT) ps[r][lane] = s;
      barrier();
      float tmax = -1.0 / 0.0;
      [[unroll]] for (uint jj = 0; jj < KT; ++jj) tmax = max(tmax, ps[r][jj]);
      const float m_new = max(m, tmax);
      // Rows without any key so far keep m = -inf: no rescaling, no weight.
      const float corr = m_new == -1.0 / 0.0 ? 1.0 : exp(m - m_new);
      barrier();  // every invocation of the row has read the scores
      const float pj = s == -1.0 / 0.0 ? 0.0 : exp(s - m_new);
      if (lane < KT) ps[r][lane] = pj;
      barrier();
      float tsum = 0.0;
      [[unroll]] for (uint jj = 0; jj < KT; ++jj) tsum += ps[r][jj];
      l = l * corr + tsum;
      if (lane < nv4) {
        vec4 a = acc * corr;
        [[unroll]] for (uint jj = 0; jj < KT; ++jj) a += ps[r][jj] * vs4[jj][lane];
        acc = a;
      }
      m = m_new;
      barrier();  // ks, vs and ps are rewritten by the next tile
    }
  }
  if (live && lane < nv4) {
    for (uint c = 0; c < 4u; ++c) {
      const uint d = 4u * lane + c;
      if (d < p.dv) o[(t0 + r) * p.o_rs + h * p.o_hs + d] = acc[c] / l;
    }
  }
}
