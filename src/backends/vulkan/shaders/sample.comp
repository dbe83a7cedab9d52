#version 450
// Sampling on the device: one workgroup per output row picks the next token id from the row's
// logits, so only the id comes back to the host. The distribution is the CPU sampler's
// (src/runtime/sampler.cpp; the host twin is SampleRowHost in src/backends/sampling.cpp):
//   penalties (per id of the history: repeat l > 0 ? l / rp : l * rp, then - (presence +
//   frequency * count); banned ids -inf) -> x = l / T -> keep the top_k by (x desc, id asc) ->
//   p = exp(x - max) / Z over them -> min_p: keep p >= p_max * min_p -> top_p: keep the prefix of
//   the (x desc, id asc) order whose mass before each kept id is < top_p -> draw ∝ p.
// The top-k cut is an exact radix select on (order-preserving key of x, then id); top-p is
// rejection sampling: draw j ∝ p among the candidates (a prefix sum over ids), accept if the
// mass ranked above j is < top_p, else keep only candidates ranked above j and draw again (the
// accepted id is distributed ∝ p over the top-p set). Draws come from a hash of the row's seed
// (the host sampler's generator) and the round, so a seed gives the same id every time.
//   x: [R, C] logits (penalties are applied in place); ids: [R];
//   sp: per row r a header of 12 words at 12 r (temperature, top_k, top_p, min_p, seed,
//   repeat, presence, frequency (floats but top_k, seed as uint), n_pen, has_mask), then at
//   12 R + 2 cap r n_pen entries (id, count; count < 0: banned), then at 12 R + 2 cap R + W r
//   (W = ceil(C / 32)) the row's allow-mask when has_mask: id is banned unless bit id % 32 of
//   word id / 32 is set (constrained decoding: the grammar's mask, made on the host).
// A greedy row (temperature <= 0) skips the cut and the draw: one pass over its (penalized,
// masked) logits for the largest key, lowest id on ties, the same pick as the top-1 cut; without
// penalties in the masking pass itself. The radix select took ~1.3 ms a row of 151,936 logits on
// an H100 (one workgroup a row): a greedy schema-constrained stream's inter-token time went
// 3.28 -> 4.64 ms (session 38).
// Over a long vocabulary (p.parts != 0: more than 4,096 ids) such a row is not scanned here: the
// PARTIAL variant, dispatched first on a grid of (parts, R) workgroups, gives each part of about
// 1,024 ids its best allowed (key, id) and non-finite flag (pp: [R, parts] pairs of words; id
// kBad: a non-finite logit, p.C: none allowed), and this workgroup reduces the parts. One
// workgroup scanning a row of 151,936 logits took 0.42 ms on an H100 (a constrained greedy
// stream's step 3.91 -> 4.33 ms of shader time, session 39), as argmax.comp's unsplit pass did.
// A row holding a NaN or infinite logit (before penalties) gets ids[r] = -1, which the host turns
// into an error for that request (issue 23: NaN logits must not decode as some token forever).
#include "common.glsl"
layout(local_size_x = 256) in;
#if defined(PARTIAL)
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer PP { uint pp[]; };
#else
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) writeonly buffer I { int ids[]; };
layout(binding = 3) readonly buffer PP { uint pp[]; };
#endif
layout(binding = 2) readonly buffer S { uint sp[]; };
layout(push_constant) uniform P { uint C, R, cap, parts, chunk; } p;
const uint WG = 256u;
const uint kBad = 0xfffffffeu;
const float kNegInf = -1.0 / 0.0;

shared float sf[WG];
shared uint su[WG];
shared uint hist[256];
shared uint s_val, s_need, s_idk, s_pick, s_thread;
shared float s_total;

// Order-preserving unsigned key of a float (larger float, larger key).
uint Key(float v) {
  const uint b = floatBitsToUint(v);
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}
// (key a, id ia) ranks above (key b, id ib): larger key, then lower id.
bool Above(uint a, uint ia, uint b, uint ib) { return a > b || (a == b && ia < ib); }
// (k, c) replaces the best (bk, bi) when it ranks above it (bi == none: anything does). Each
// invocation walks its ids in ascending order, so a tie keeps the lower id.
void TakeTop(uint k, uint c, inout uint bk, inout uint bi) {
  if (bi == p.C || k > bk) {
    bk = k;
    bi = c;
  }
}
// The workgroup's top (key, id) of each invocation's (bk, bi; bi == p.C: none) into
// (su[0], hist[0]).
void TopReduce(uint bk, uint bi) {
  const uint tid = gl_LocalInvocationID.x;
  barrier();
  su[tid] = bk;
  hist[tid] = bi;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) {
      const uint ob = su[tid + s], oi = hist[tid + s];
      if (oi != p.C && (hist[tid] == p.C || Above(ob, oi, su[tid], hist[tid]))) {
        su[tid] = ob;
        hist[tid] = oi;
      }
    }
    barrier();
  }
}
float U01(uint seed, uint round) {  // uniform in [0, 1), 24 bits
  uint h = seed ^ (round * 0x9E3779B9u);
  h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
  return float(h >> 8) * (1.0 / 16777216.0);
}

float SumReduce(float v) {
  const uint tid = gl_LocalInvocationID.x;
  barrier();
  sf[tid] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) sf[tid] += sf[tid + s];
    barrier();
  }
  return sf[0];
}
float MaxReduce(float v) {
  const uint tid = gl_LocalInvocationID.x;
  barrier();
  sf[tid] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) sf[tid] = max(sf[tid], sf[tid + s]);
    barrier();
  }
  return sf[0];
}
uint CountReduce(uint v) {
  const uint tid = gl_LocalInvocationID.x;
  barrier();
  su[tid] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) su[tid] += su[tid + s];
    barrier();
  }
  return su[0];
}

// Whether row r is greedy without penalties (picked in one pass for its largest allowed key).
bool FastRow(uint r) {
  const uint h = 12u * r;
  return !(uintBitsToFloat(sp[h]) > 0.0) && min(sp[h + 8u], p.cap) == 0u;
}
// Whether row r allows id c (its mask word at m0).
bool Allowed(uint m0, uint c) { return ((sp[m0 + (c >> 5u)] >> (c & 31u)) & 1u) != 0u; }
uint MaskWords(uint r) { return 12u * p.R + 2u * p.cap * p.R + ((p.C + 31u) / 32u) * r; }

#if defined(PARTIAL)
void main() {
  const uint r = gl_WorkGroupID.y, part = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  if (!FastRow(r)) return;
  const bool masked = sp[12u * r + 9u] != 0u;
  const uint base = r * p.C, m0 = MaskWords(r);
  const uint c0 = part * p.chunk, c1 = min(p.C, c0 + p.chunk);
  uint nbad = 0u, bk = 0u, bi = p.C;
  for (uint c = c0 + tid; c < c1; c += WG) {
    const float l = x[base + c];
    if (isnan(l) || isinf(l)) {
      ++nbad;
    } else if (!masked || Allowed(m0, c)) {
      TakeTop(Key(l), c, bk, bi);
    }
  }
  nbad = CountReduce(nbad);
  TopReduce(bk, bi);
  if (tid == 0u) {
    const uint o = 2u * (r * gl_NumWorkGroups.x + part);
    pp[o] = su[0];
    pp[o + 1u] = nbad != 0u ? kBad : hist[0];
  }
}
#else
void main() {
  const uint r = FlatGroup(), tid = gl_LocalInvocationID.x;
  if (r >= p.R) return;
  if (p.parts != 0u && FastRow(r)) {  // the parts' picks (PARTIAL)
    uint nbad = 0u, bk = 0u, bi = p.C;
    for (uint k = tid; k < p.parts; k += WG) {
      const uint o = 2u * (r * p.parts + k), key = pp[o], id = pp[o + 1u];
      if (id == kBad) {
        ++nbad;
      } else if (id != p.C && (bi == p.C || Above(key, id, bk, bi))) {
        bk = key;
        bi = id;
      }
    }
    if (CountReduce(nbad) != 0u) {
      if (tid == 0u) ids[r] = -1;
      return;
    }
    TopReduce(bk, bi);
    if (tid == 0u) ids[r] = int(hist[0] < p.C ? hist[0] : 0u);  // none allowed: the lowest id
    return;
  }
  const uint base = r * p.C, h = 12u * r;
  // Temperature <= 0 is greedy: the top-1 cut at T = 1.
  const bool greedy = !(uintBitsToFloat(sp[h]) > 0.0);
  const float T = greedy ? 1.0 : uintBitsToFloat(sp[h]);
  const uint top_k = greedy ? 1u : sp[h + 1u];
  const float top_p = uintBitsToFloat(sp[h + 2u]), min_p = uintBitsToFloat(sp[h + 3u]);
  const uint seed = sp[h + 4u];
  const float rp = uintBitsToFloat(sp[h + 5u]), pres = uintBitsToFloat(sp[h + 6u]),
              freq = uintBitsToFloat(sp[h + 7u]);
  const uint npen = min(sp[h + 8u], p.cap), e0 = 12u * p.R + 2u * p.cap * r;
  const bool masked = sp[h + 9u] != 0u;
  const uint m0 = MaskWords(r);

  // Non-finite logits flag the row (read before the mask and bans write -inf in place); ids
  // the allow-mask leaves out become -inf, before any penalty, top-k or softmax work. A greedy
  // row without penalties (a schema-constrained greedy request) takes its pick in the same pass.
  const bool fast = greedy && npen == 0u;
  uint nbad = 0u, bk = 0u, bi = p.C;
  for (uint c = tid; c < p.C; c += WG) {
    const float l = x[base + c];
    if (isnan(l) || isinf(l)) {
      ++nbad;
    } else if (masked && !Allowed(m0, c)) {
      if (!fast) x[base + c] = kNegInf;  // a fast row reads x no more
    } else if (fast) {
      TakeTop(Key(l), c, bk, bi);
    }
  }
  memoryBarrierBuffer();
  if (CountReduce(nbad) != 0u) {
    if (tid == 0u) ids[r] = -1;
    return;
  }
  if (fast) {
    TopReduce(bk, bi);
    if (tid == 0u) ids[r] = int(hist[0] < p.C ? hist[0] : 0u);  // none allowed: the lowest id
    return;
  }

  // Penalties and bans, in place (ids are distinct within a row's list).
  for (uint e = tid; e < npen; e += WG) {
    const uint id = sp[e0 + 2u * e];
    const int n = int(sp[e0 + 2u * e + 1u]);
    if (id >= p.C) continue;
    float l = x[base + id];
    if (n < 0) {
      l = kNegInf;
    } else {
      if (rp != 1.0) l = l > 0.0 ? l / rp : l * rp;
      l -= pres + freq * float(n);
    }
    x[base + id] = l;
  }
  memoryBarrierBuffer();
  barrier();

  // Greedy (the top-1 cut at T = 1): the largest (key, then lowest id), one pass.
  if (greedy) {
    bk = 0u;
    bi = p.C;
    for (uint c = tid; c < p.C; c += WG) {
      const float l = x[base + c];
      if (l > kNegInf) TakeTop(Key(l), c, bk, bi);
    }
    TopReduce(bk, bi);
    if (tid == 0u) ids[r] = int(hist[0] < p.C ? hist[0] : 0u);  // everything banned: id 0
    return;
  }

  // Max of x = l / T and the number of finite logits.
  float m = kNegInf;
  uint nf = 0u;
  for (uint c = tid; c < p.C; c += WG) {
    const float l = x[base + c];
    if (l > kNegInf) {
      m = max(m, l / T);
      ++nf;
    }
  }
  m = MaxReduce(m);
  nf = CountReduce(nf);
  if (nf == 0u) {  // everything banned: the lowest id
    if (tid == 0u) ids[r] = 0;
    return;
  }

  // Top-k threshold (key_k, id_k): the k-th largest (key, -id), by radix select on the key
  // (4 passes of 8 bits over the keys of the survivors so far), then the need-th lowest id
  // among the keys equal to key_k (a prefix count over contiguous id chunks).
  uint key_k = 0u, id_k = p.C;  // default: keep every finite logit
  const bool cut = top_k > 0u && top_k < nf;
  if (cut) {
    uint prefix = 0u, need = top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      const uint hi_mask = shift == 24 ? 0u : ~((1u << uint(shift + 8)) - 1u);
      barrier();
      hist[tid] = 0u;
      barrier();
      for (uint c = tid; c < p.C; c += WG) {
        const float l = x[base + c];
        if (!(l > kNegInf)) continue;
        const uint k = Key(l / T);
        if ((k & hi_mask) == (prefix & hi_mask)) atomicAdd(hist[(k >> uint(shift)) & 255u], 1u);
      }
      barrier();
      if (tid == 0u) {
        uint n = need, d = 255u;
        for (;; --d) {
          if (hist[d] >= n || d == 0u) break;
          n -= hist[d];
        }
        s_val = prefix | (d << uint(shift));
        s_need = n;
      }
      barrier();
      prefix = s_val;
      need = s_need;
    }
    key_k = prefix;
    // The need-th lowest id with key == key_k.
    const uint ch = (p.C + WG - 1u) / WG, c0 = min(p.C, tid * ch), c1 = min(p.C, c0 + ch);
    uint ties = 0u;
    for (uint c = c0; c < c1; ++c) {
      const float l = x[base + c];
      if (l > kNegInf && Key(l / T) == key_k) ++ties;
    }
    barrier();
    su[tid] = ties;
    barrier();
    if (tid == 0u) {
      uint before = 0u, t = 0u;
      for (; t < WG; ++t) {
        if (before + su[t] >= need) break;
        before += su[t];
      }
      s_thread = t;
      s_need = need - before;
    }
    barrier();
    if (tid == s_thread) {
      uint left = s_need;
      for (uint c = c0; c < c1; ++c) {
        const float l = x[base + c];
        if (l > kNegInf && Key(l / T) == key_k && --left == 0u) {
          s_idk = c;
          break;
        }
      }
    }
    barrier();
    id_k = s_idk;
  }

  // Z over the top-k set; min_p keeps p >= p_max * min_p (p_max = 1 / Z).
  float z = 0.0;
  for (uint c = tid; c < p.C; c += WG) {
    const float l = x[base + c];
    if (!(l > kNegInf)) continue;
    const float v = l / T;
    if (!cut || !Above(key_k, id_k, Key(v), c)) z += exp(v - m);
  }
  z = SumReduce(z);
  const float pcut = min_p > 0.0 ? (1.0 / z) * min_p : 0.0;

  // Rounds of draw / accept. Candidates: in the top-k set, passing min_p, ranked above (lo, lo_id).
  uint lo = 0u, lo_id = 0xffffffffu;  // nothing excluded yet
  bool bounded = false;
  const uint ch = (p.C + WG - 1u) / WG, c0 = min(p.C, tid * ch), c1 = min(p.C, c0 + ch);
  for (uint round = 0u;; ++round) {
    // Prefix sums of p over contiguous id chunks.
    float part = 0.0;
    for (uint c = c0; c < c1; ++c) {
      const float l = x[base + c];
      if (!(l > kNegInf)) continue;
      const float v = l / T;
      const uint k = Key(v);
      if (cut && Above(key_k, id_k, k, c)) continue;
      const float pr = exp(v - m) / z;
      if (pr < pcut || (bounded && !Above(k, c, lo, lo_id))) continue;
      part += pr;
    }
    barrier();
    sf[tid] = part;
    barrier();
    if (tid == 0u) {
      float total = 0.0;
      for (uint t = 0u; t < WG; ++t) total += sf[t];
      const float target = U01(seed, round) * total;
      float before = 0.0;
      uint t = 0u;
      for (; t < WG - 1u; ++t) {
        if (sf[t] > 0.0 && target < before + sf[t]) break;
        before += sf[t];
      }
      while (t > 0u && sf[t] == 0.0) --t;  // rounding past the end: the last non-empty chunk
      s_thread = t;
      s_total = target - before;  // the draw inside chunk t
    }
    barrier();
    if (tid == s_thread) {
      float acc = 0.0;
      uint last = c0;
      s_pick = 0xffffffffu;
      for (uint c = c0; c < c1; ++c) {
        const float l = x[base + c];
        if (!(l > kNegInf)) continue;
        const float v = l / T;
        const uint k = Key(v);
        if (cut && Above(key_k, id_k, k, c)) continue;
        const float pr = exp(v - m) / z;
        if (pr < pcut || (bounded && !Above(k, c, lo, lo_id))) continue;
        last = c;
        acc += pr;
        if (s_total < acc) {
          s_pick = c;
          break;
        }
      }
      if (s_pick == 0xffffffffu) s_pick = last;
    }
    barrier();
    const uint j = s_pick;
    if (top_p >= 1.0 || round >= 255u) {  // (256 rejections: the last draw; never seen)
      if (tid == 0u) ids[r] = int(j);
      return;
    }
    // Mass ranked above j (within the top-k set and min_p).
    const uint kj = Key(x[base + j] / T);
    float above = 0.0;
    for (uint c = tid; c < p.C; c += WG) {
      const float l = x[base + c];
      if (!(l > kNegInf)) continue;
      const float v = l / T;
      const uint k = Key(v);
      if (!Above(k, c, kj, j)) continue;
      if (cut && Above(key_k, id_k, k, c)) continue;
      const float pr = exp(v - m) / z;
      if (pr >= pcut) above += pr;
    }
    above = SumReduce(above);
    if (above == 0.0 || above < top_p) {
      if (tid == 0u) ids[r] = int(j);
      return;
    }
    lo = kj;
    lo_id = j;
    bounded = true;
  }
}
#endif
