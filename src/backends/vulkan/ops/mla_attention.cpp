// kMlaAttention, absorbed form over the latent cache (C: [ctx, r], PE: [ctx, dr]); steps of many
// rows take the non-absorbed form instead (ops/mla_non_absorbed.cpp, MlaTakesNonAbsorbed):
//   1. q_lat[t, h] = WukT[h] · q_nope[t, h]         per-head GEMV into qcat[:, h, 0:r]
//   2. mla_attention.comp reads q_pe[t, h] from q itself (rotating it where the builder folded
//      the q rope in: OpContext::attn_rope, MlaFoldsQRope); the fallback kernel gets it copied
//      into qcat[t, h, r:r+dr]
//   3. o_lat[t, h] = Σ_j softmax(scale · qcat·[C_j | PE_j]) C_j   mla_attention.comp: one
//      workgroup per (group of heads, row, key chunk) reading each latent row once for all the
//      group's heads; decode rows split the keys into kMlaSplits chunks merged by
//      attention_combine.comp, prefill rows take one workgroup per (heads, row) (DIRECT).
//      Where that kernel does not fit (odd widths, subgroups under 8), attention.comp with one
//      shared kv head whose key is the latent row plus its rope part and whose value is it.
//   4. out[t, h] = Wuv[h] · o_lat[t, h]              per-head GEMV
// Steps of more than kGemvMaxRows rows (prefill and batched decode), dense WukT/Wuv: steps 1 and 4
// are grouped GEMMs with one group per head (RecordGroupedGemm, on tensor cores where the device
// has them) gathering each head's slices of the rows in place.
// Scratch: qcat [T, H*(r+dr)], o_lat [T, H*r] (f32); split decode: the chunks' partials
// [T, H, kMlaSplits, r + 2].
#include <algorithm>
#include <cstring>

#include "ops/ops.h"

namespace es::vk {

struct CopyPush {
  uint32_t R, H, W, is, ihs, ioff, os, ohs, ooff;
};

namespace {
// y[t, h*y_hs + n] = W[h] · x[t, h*x_hs + k] for T rows as one grouped GEMM with a group per head
// (W: [H*N, K] dense, head h's rows at h*N), in place: with rows H*x_hs (H*y_hs) wide, head h's
// slice of row t is row t*H + h of x_hs (y_hs) elements, so the GEMM gathers head h's rows
// through meta (HeadRowsMeta) and writes y's the same way.
void RecordHeadGemm(OpContext& c, BufRange x, uint32_t x_hs, uint32_t H, uint32_t N, uint32_t K,
                    const DeviceWeight& w, BufRange y, uint32_t y_hs, BufRange meta) {
  const uint32_t T = uint32_t(c.T);
  std::vector<uint32_t> table(size_t(6) * H, 0);
  for (uint32_t h = 0; h < H; ++h) table[6 * h + 1] = h * N * K;  // elements
  Allocation tab = c.host_pool->Alloc(table.size() * 4, c.n.name + " head table");
  std::memcpy(tab.mapped, table.data(), table.size() * 4);
  c.owned->push_back(tab);
  GroupedGemm g{{Range(w.chunks[0].alloc)},
                x,
                meta,
                y,
                Range(tab),
                meta,
                w.dtype,
                N,
                K,
                H,
                T,
                1,
                0,
                false,
                y_hs,
                x_hs};
  RecordGroupedGemm(c, g);
}

// Key chunks of a decode row (mla_attention.comp without DIRECT) and the fewest keys a chunk
// takes. H200, V2-Lite Q4_0 tg128 after a 512-token prompt, one job (t/s): 64 chunks of at
// least 32 keys 161.0; 16 chunks 153.0; 128 chunks 153.7; chunks of at least 64 keys 145.6.
constexpr uint32_t kMlaSplits = 64, kMlaMinChunk = 32;
// Fewer chunks for many heads: the partials of 128 heads (V3) in 64 chunks would take 135 MB at
// 8 rows; 1,024 (head, chunk) workgroups a row are plenty.
// H200, V2-Lite Q4_0, one job (session 12, tg128 from an empty cache / after 4,096 tokens, t/s):
// 32 chunks 270.0 / 210.4, 64 chunks 251.9 / 232.8, 128 chunks 194.6 / 211.1. With 4 heads a
// workgroup (session 24, f16, us a layer of attention + combine after 2,048 tokens): 16 chunks
// 33.1, 32 chunks 27.0, 64 chunks 28.8, 128 chunks 32.5.
// Past 8 rows the rows fill the GPU themselves: fewer chunks (as attention_decode's); there
// ES_VK_MLA_ROWS_SPLITS sets them (an A/B still open: served V2-Lite steps of 32 rows at ~1,000
// keys, issue 17).
uint32_t MlaSplits(const Device& dev, int64_t H, int64_t T) {
  const int64_t s = std::clamp<int64_t>(16 * kMlaSplits / H, 1, kMlaSplits);
  if (T <= kGemvMaxRows) return uint32_t(s);
  const Tuning& tune = dev.tuning();
  if (!tune.IsAuto(Knob::kMlaRowsSplits)) return tune.Uint(Knob::kMlaRowsSplits);
  return uint32_t(std::clamp<int64_t>(s * 8 / T, std::min<int64_t>(s, 4), s));
}
// Key and value loads mla_attention.comp issues together. H200, V2-Lite Q4_0, one job (pp512 /
// tg128 t/s): 1 load per use 5,696 / 168.1; 4 together 7,613 / 176.1; 8 together 3,614 / 170.3
// (the prefill kernel spills); all of a tile's (an earlier job) 5,585 / 161.0.
constexpr uint32_t kMlaLoadBatch = 4;
constexpr uint32_t kMlaKeyTile = 32;  // mla_attention.comp's KT
// Heads per workgroup of mla_attention.comp: the most (up to kMlaMaxHeadsPerGroup) whose q and
// scores fit the device's shared memory; 0 where the kernel does not apply. Fewer heads a
// workgroup give a decode row more workgroups, each a shorter chain of loads (the latent rows a
// group reads again come from L2). H200, V2-Lite shapes, f16 (session 24, 2026-12-04, one job,
// `bench --profile` of a 4-layer V2-Lite-shaped model: us per mla_attention dispatch after 16 /
// 2,048 tokens): 16 heads 42 / 47 (the kernel before this change: 126 / 39), 8 heads 21 / 26,
// 4 heads 12.7 / 17.3, 2 heads 15.4 / 25.6; the full V2-Lite f16 tg128 after a 512-token prompt
// 245.3 t/s with 4 heads against 214.3 before (unprofiled).
// Steps of 9-64 rows: ES_VK_MLA_ROWS_HEADS at most (an A/B still open, as the chunks above).
constexpr uint32_t kMlaMaxHeadsPerGroup = 4;
uint32_t MlaHeadsPerGroup(const Device& dev, int64_t r, int64_t dr, int64_t T = 1) {
  const auto& info = dev.info();
  if (r % 2 != 0 || dr % 2 != 0 || info.min_subgroup_size < 8) return 0;
  const uint32_t most =
      T > kGemvMaxRows ? dev.tuning().Uint(Knob::kMlaRowsHeads) : kMlaMaxHeadsPerGroup;
  for (uint32_t G = most; G >= 1; G /= 2) {
    const uint64_t bytes = 4ull * G * uint64_t(r + dr) + 4ull * G * kMlaKeyTile + 12ull * G + 1024;
    if (bytes <= info.max_shared_memory) return G;
  }
  return 0;
}
}  // namespace

namespace {
// Whether steps 1 and 4 take the grouped head GEMMs: float, single-chunk WukT and Wuv whose
// inputs' head slices (q: dn + dr, the latent: r) start on 4-element boundaries, in steps of more
// than kGemvMaxRows rows. Up to 8 rows the per-head GEMVs read each head's matrix once for all
// rows; past them the GEMM wins (H100, V2-Lite Q4_0 steps of 16 / 32 rows: 9.7 / 13.8 ms from 9
// rows, 10.0 / 13.9 from 17, 10.1 / 14.9 prefill only; 9 rows the same; session 42's log).
bool MlaHeadGemm(const MlaParams& m, int64_t T, DType wuk, DType wuv) {
  return T > kGemvMaxRows && !IsQuantized(wuk) && !IsQuantized(wuv) && (m.dn + m.dr) % 4 == 0 &&
         m.rank % 4 == 0;
}
}  // namespace

bool MlaFoldsQRope(const Device& dev, const VkKv& kv, const Graph& g, const Node& n, int64_t T,
                   bool expand) {
  return !MlaTakesNonAbsorbed(dev, kv, g, n, T, expand) &&
         MlaHeadsPerGroup(dev, n.Params<MlaParams>().rank, n.Params<MlaParams>().dr) != 0;
}

std::vector<uint64_t> MlaScratch(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                                 int64_t T, bool expand) {
  if (MlaTakesNonAbsorbed(dev, kv, g, n, T, expand)) return MlaNonAbsorbedScratch(kv, n, T);
  const MlaParams& m = n.Params<MlaParams>();
  const uint64_t H = uint64_t(m.heads), dr = uint64_t(m.dr), r = uint64_t(m.rank);
  std::vector<uint64_t> s{uint64_t(T) * H * (r + dr) * 4, uint64_t(T) * H * r * 4};
  if (T <= kDecodeMaxRows)
    s.push_back(uint64_t(T) * H * MlaSplits(dev, int64_t(H), T) * (r + 2) * 4);
  return s;
}

namespace {
// The grouped head GEMMs' meta for every head taking all T rows: counts[H] = T, offsets[H] =
// h * T, then head h's rows t*H + h (moe_gemm.glsl's layout; RecordHeadGemm).
BufRange HeadRowsMeta(OpContext& c, int64_t T, int64_t H) {
  std::vector<uint32_t> m(size_t(2 * H + T * H));
  for (int64_t h = 0; h < H; ++h) {
    m[size_t(h)] = uint32_t(T);
    m[size_t(H + h)] = uint32_t(h * T);
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) m[size_t(2 * H + h * T + t)] = uint32_t(t * H + h);
  Allocation ma = c.host_pool->Alloc(m.size() * 4, c.n.name + " head rows");
  std::memcpy(ma.mapped, m.data(), m.size() * 4);
  c.owned->push_back(ma);
  return Range(ma);
}
// out [T, H * dv] = per head, the attention's latent output olat [T, H * r] times Wuv's head
// rows: the grouped head GEMM for prefill steps of float weights, else the per-head GEMV.
void RecordLatentOutput(OpContext& c, BufRange olat, const DeviceWeight& wuv, bool gemm,
                        BufRange meta) {
  const MlaParams& m = c.n.Params<MlaParams>();
  const int64_t T = c.T, H = m.heads, dv = m.dv, r = m.rank;
  if (gemm)
    RecordHeadGemm(c, olat, uint32_t(r), uint32_t(H), uint32_t(dv), uint32_t(r), wuv, c.Out(),
                   uint32_t(dv), meta);
  else
    RecordHeadGemv(c, olat, T, H, dv, r, wuv, H * r, r, 0, c.Out(), H * dv, dv, 0);
}
// After mla_attention.comp: out from olat (S == 0: the kernel wrote it), or from the S chunks'
// partials in scratch[2], which attention_combine.comp merges into olat first.
void RecordMergedOutput(OpContext& c, BufRange olat, const DeviceWeight& wuv, uint32_t S, bool gemm,
                        BufRange meta) {
  const MlaParams& m = c.n.Params<MlaParams>();
  const int64_t H = m.heads, r = m.rank;
  if (S != 0) {
    AttentionArgs a{};
    a.part = c.scratch[2];
    a.out = olat;
    a.Hq = uint32_t(H);
    a.dv = uint32_t(r);
    a.o_rs = uint32_t(H * r);
    a.o_hs = uint32_t(r);
    RecordAttentionCombine(c, a, S, false);
  }
  RecordLatentOutput(c, olat, wuv, gemm, meta);
}
}  // namespace

void BuildMla(OpContext& c) {
  if (MlaTakesNonAbsorbed(c.dev, c.kv, c.g, c.n, c.T, c.mla_expand)) return BuildMlaNonAbsorbed(c);
  const auto& n = c.n;
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t T = c.T, H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(spec.width[0] == r && spec.width[1] == dr, "vulkan: mla '", n.name,
           "' does not match the latent cache widths (", spec.width[0], ", ", spec.width[1], ")");
  const DeviceWeight& wuk = c.weights.Get(c.W(3));
  const DeviceWeight& wuv = c.weights.Get(c.W(4));
  ES_CHECK(wuk.rows == H * r && wuk.cols == dn, "vulkan: mla '", n.name,
           "': WukT must be [H*r, dn]");
  ES_CHECK(wuv.rows == H * dv && wuv.cols == r, "vulkan: mla '", n.name,
           "': Wuv must be [H*dv, r]");
  const BufRange qcat = c.scratch[0], olat = c.scratch[1];
  // q: the rope's input where it is folded in (the nope dims are the same either way).
  const Node* rope = c.attn_rope;
  const BufRange qin = rope ? c.act[size_t(rope->src[0])] : c.In(0);
  const uint32_t G = MlaHeadsPerGroup(c.dev, r, dr, T);
  ES_CHECK(!rope || G != 0, "vulkan: mla '", n.name,
           "' has a folded rope but no kernel that applies it");
  const int64_t qw = H * (dn + dr), cw = H * (r + dr);
  const bool gemm =
      MlaHeadGemm(m, T, wuk.dtype, wuv.dtype) && wuk.chunks.size() == 1 && wuv.chunks.size() == 1;
  const BufRange meta = gemm ? HeadRowsMeta(c, T, H) : BufRange{};
  if (gemm) {
    RecordHeadGemm(c, qin, uint32_t(dn + dr), uint32_t(H), uint32_t(r), uint32_t(dn), wuk, qcat,
                   uint32_t(r + dr), meta);
  } else {
    RecordHeadGemv(c, qin, T, H, r, dn, wuk, qw, dn + dr, 0, qcat, cw, r + dr, 0);
  }
  if (G) {
    const bool split = c.T <= kDecodeMaxRows;
    const uint32_t S = split ? MlaSplits(c.dev, H, T) : 1;
    Dispatch& d =
        c.Add("mla_attention_" + KvTypeSuffix(spec.dtype) + (split ? "" : "_direct") +
                  (rope ? "_rope" : ""),
              {1, 1, 1, 1, 1, 1}, {uint32_t(r), uint32_t(dr), G, kMlaMinChunk, kMlaLoadBatch});
    d.bindings = {{qcat},    {Range(c.kv.part(n.layer, 0))}, {Range(c.kv.part(n.layer, 1))},
                  {c.batch}, {split ? c.scratch[2] : olat},  {qin}};
    d.writes = {4};
    struct {
      uint32_t Hq, q_rs, q_hs, slot_off, pos_off, o_rs, o_hs;
      float scale;
      uint32_t pq_rs, pq_hs, pq_off, T, half, neox, cs_off;
    } pc{uint32_t(H),
         uint32_t(cw),
         uint32_t(r + dr),
         c.layout->slots,
         c.layout->positions,
         uint32_t(H * r),
         uint32_t(r),
         m.scale,
         uint32_t(qw),
         uint32_t(dn + dr),
         uint32_t(dn),
         uint32_t(T),
         0,
         0,
         0};
    if (rope) {
      const RopeParams& rp = rope->Params<RopeParams>();
      const RopeTable& rt = *rp.table;
      ES_CHECK(rp.heads == H && rp.head_dim == dn + dr && rp.offset == dn && rt.dim == dr,
               "vulkan: rope '", rope->name, "' folded into '", n.name,
               "' does not rotate its q_pe dims");
      pc.half = uint32_t(rt.dim / 2);
      pc.neox = rt.mode == RopeMode::kNeox ? 1u : 0u;
      pc.cs_off = c.layout->rope.at(&rt);
    }
    d.Push(pc);
    d.groups[0] = uint32_t((H + G - 1) / G);
    d.groups[1] = uint32_t(T);
    d.groups[2] = S;
    RecordMergedOutput(c, olat, wuv, split ? S : 0, gemm, meta);
    return;
  }
  {  // the fallback kernel reads q_pe from qcat
    Dispatch& d = c.Add("copy", {1, 1});
    d.bindings = {{c.In(0)}, {qcat}};
    d.writes = {1};
    d.Push(CopyPush{uint32_t(T), uint32_t(H), uint32_t(dr), uint32_t(qw), uint32_t(dn + dr),
                    uint32_t(dn), uint32_t(cw), uint32_t(r + dr), uint32_t(r)});
    Grid1D(d, uint64_t(T * H * dr));
  }
  AttentionArgs a{};
  a.q = qcat;
  a.ka = a.v = Range(c.kv.part(n.layer, 0));
  a.kb = Range(c.kv.part(n.layer, 1));
  a.out = olat;
  a.Hq = uint32_t(H);
  a.Hkv = 1;
  a.wa = uint32_t(r);
  a.wb = uint32_t(dr);
  a.dv = uint32_t(r);
  a.q_rs = uint32_t(cw);
  a.q_hs = uint32_t(r + dr);
  a.a_w = uint32_t(r);
  a.b_w = uint32_t(dr);
  a.v_w = uint32_t(r);
  a.o_rs = uint32_t(H * r);
  a.o_hs = uint32_t(r);
  a.scale = m.scale;
  RecordAttention(c, a, false);
  RecordLatentOutput(c, olat, wuv, gemm, meta);
}

}  // namespace es::vk
