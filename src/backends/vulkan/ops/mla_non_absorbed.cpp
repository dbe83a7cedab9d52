// kMlaAttention in the non-absorbed form, for steps of many rows (MlaTakesNonAbsorbed): rather
// than projecting each query into the latent space (the absorbed form, ops/mla_attention.cpp,
// ~4x the multiply-adds of a long prefill, on the FP32 ALUs), the keys and values are expanded
// from the latent cache and the ordinary prefill attention runs over them:
//   1. mla_gather.comp: every slot of the step, positions 0 .. its last row's, copied from the
//      paged cache into consecutive gathered rows (whole blocks of 16; the MLA view's map): the
//      latent X [n, r] (f32) and the rope key k_pe into K[:, h, dn:dn+dr] of every head h
//   2. K[:, h, 0:dn] = X Wuk[h]ᵀ and V[:, h, :] = X Wuv[h]ᵀ: two grouped GEMMs (RecordGroupedGemm,
//      on tensor cores where the device has them), one group per head, over kv_b (src 5) in the
//      checkpoint's type: head h's rows h (dn+dv) .. + dn are Wuk[h], the dv rows after them
//      Wuv[h]. Group h's rows are the pairs i*H + h: x row i, output row i*H + h with row stride
//      dn + dr (K) or dv (V), i.e. head h's slice of gathered row i.
//   3. the prefill attention (RecordAttention: attention_cm2.comp on tensor cores, else
//      attention_rows.comp) of q [T, H (dn+dr)] (roped) over K [n, H, dn+dr] and V [n, H, dv],
//      Hkv = H, causal by position, into out [T, H dv] as the absorbed form writes it. Its rows'
//      slots, positions and block tables come from the MLA view of the batch buffer
//      (WriteMlaView), whose tables map each slot's positions onto its gathered blocks: a slot's
//      keys are adjacent there even where its cache blocks are not.
// Scratch: X [rows, r], K [rows, H (dn+dr)], V [rows, H dv] (f32), the GEMMs' meta
// [2H + H rows] (uint); rows = MlaGatherRows, every distinct slot of a step at its capacity.
#include <algorithm>
#include <cstring>
#include <map>

#include "ops/ops.h"

namespace es::vk {

namespace {
// The most scratch the form may take (X, K, V and meta); beyond it (many slots of long contexts)
// the step keeps the absorbed form, whose scratch grows with the rows only.
constexpr uint64_t kMlaNonAbsorbedMaxBytes = uint64_t(1) << 30;
// attention_rows.comp's widest heads (its _dk192 variants; keys and values in f32).
constexpr int64_t kRowsMaxDk = 192, kRowsMaxDv = 128;

const Tensor* KvB(const Graph& g, const Node& n) {
  return n.src.size() > 5 && n.src[5] >= 0 ? g.node(n.src[5]).weight : nullptr;
}

std::vector<uint64_t> NonAbsorbedScratch(const Node& n, int64_t rows) {
  const MlaParams& m = n.Params<MlaParams>();
  const uint64_t H = uint64_t(m.heads), dn = uint64_t(m.dn), dr = uint64_t(m.dr),
                 dv = uint64_t(m.dv), r = uint64_t(m.rank), R = uint64_t(rows);
  return {R * r * 4, R * H * (dn + dr) * 4, R * H * dv * 4, (2 * H + H * R) * 4};
}

// Offsets inside the view (words): the rows' positions at 2, their slots at 2 + T, then the
// block tables [n_slots][blocks_per_slot], then the map (gathered rows, then per gathered block
// its cache block).
int64_t ViewTables(int64_t T) { return 2 + 2 * T; }
int64_t ViewMap(const VkKv& kv, int64_t T) {
  return ViewTables(T) + int64_t(kv.n_slots()) * kv.blocks_per_slot();
}
}  // namespace

int64_t MlaGatherRows(const VkKv& kv, int64_t T) {
  return std::min<int64_t>(T, kv.n_slots()) * kv.blocks_per_slot() * kKvBlockTokens;
}

uint64_t MlaViewWords(const VkKv& kv, int64_t T) {
  return uint64_t(ViewMap(kv, T) + 1 + MlaGatherRows(kv, T) / kKvBlockTokens);
}

bool MlaStepExpands(const Graph& g, const Batch& b) {
  const int64_t T = b.n_tokens();
  if (T < kMlaNonAbsorbedMinRows) return false;
  const Node* mla = nullptr;
  for (const Node& n : g.nodes())
    if (n.op == Op::kMlaAttention) {
      mla = &n;
      break;
    }
  if (!mla) return false;
  // Multiply-adds per head (ops.h kMlaNonAbsorbedMinRows): a row of context c costs
  // (dn + dv) r + (2r + dr) c absorbed and (dn + dr + dv) c non-absorbed, plus (dn + dv) r per key
  // of every slot's context expanded.
  const MlaParams& m = mla->Params<MlaParams>();
  const double dn = double(m.dn), dr = double(m.dr), dv = double(m.dv), r = double(m.rank);
  std::map<int, int64_t> ctx;  // slot -> keys of its context after the step
  double absorbed = 0, expanded = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double c = double(b.positions[size_t(t)] + 1);
    absorbed += (dn + dv) * r + (2 * r + dr) * c;
    expanded += (dn + dr + dv) * c;
    int64_t& k = ctx[b.seqs[size_t(b.row_seq[size_t(t)])].slot];
    k = std::max<int64_t>(k, b.positions[size_t(t)] + 1);
  }
  for (const auto& [slot, keys] : ctx) expanded += (dn + dv) * r * double(keys);
  return expanded < absorbed;
}

bool MlaTakesNonAbsorbed(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                         int64_t T, bool expand) {
  if (n.op != Op::kMlaAttention || !expand || T < kMlaNonAbsorbedMinRows) return false;
  const Tensor* kvb = KvB(g, n);
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  if (!kvb || kvb->shape != Shape{H * (dn + dv), r} || !WeightStore::Supported(kvb->dtype) ||
      r % BlockElems(kvb->dtype) != 0 || r % 4 != 0 || dr % 4 != 0)
    return false;
  if (!UseAttentionCm2(dev, T, uint32_t(dn + dr), uint32_t(dv)) &&
      (dn + dr > kRowsMaxDk || dv > kRowsMaxDv))
    return false;
  const uint64_t range =
      std::min(dev.info().max_storage_buffer_range, dev.info().max_memory_allocation);
  if (uint64_t(H * (dn + dv)) * DeviceRowBytes(kvb->dtype, r) > range)
    return false;  // kv_b in one chunk
  uint64_t total = 0;
  for (uint64_t b : NonAbsorbedScratch(n, MlaGatherRows(kv, T))) {
    if (b > range) return false;
    total += b;
  }
  return total <= kMlaNonAbsorbedMaxBytes;
}

std::vector<uint64_t> MlaNonAbsorbedScratch(const VkKv& kv, const Node& n, int64_t T) {
  return NonAbsorbedScratch(n, MlaGatherRows(kv, T));
}

void WriteMlaView(const BatchLayout& lay, const Batch& b, const VkKv& kv, int32_t* words) {
  const int64_t T = b.n_tokens(), bps = kv.blocks_per_slot(), tables = ViewTables(T),
                map = ViewMap(kv, T);
  int32_t* m = words + lay.mla_view;
  m[0] = int32_t(tables);
  m[1] = int32_t(bps);
  std::vector<int64_t> ctx(size_t(kv.n_slots()), 0);
  std::vector<int> order;  // the step's slots, first appearance first
  for (int64_t t = 0; t < T; ++t) {
    const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot;
    const int64_t pos = b.positions[size_t(t)];
    m[2 + t] = int32_t(pos);
    m[2 + T + t] = slot;
    if (ctx[size_t(slot)] == 0) order.push_back(slot);
    ctx[size_t(slot)] = std::max(ctx[size_t(slot)], pos + 1);
  }
  std::fill(m + tables, m + map, 0);
  int32_t k = 0;  // gathered blocks so far
  for (int s : order) {
    const int64_t blocks = (ctx[size_t(s)] + kKvBlockTokens - 1) / kKvBlockTokens;
    for (int64_t j = 0; j < blocks; ++j, ++k) {
      m[tables + s * bps + j] = k;
      m[map + 1 + k] = kv.tables()[size_t(s * bps + j)];  // mapped: Run checked the positions
    }
  }
  ES_ASSERT(int64_t(k) * kKvBlockTokens <= MlaGatherRows(kv, T));
  m[map] = k * kKvBlockTokens;
}

void BuildMlaNonAbsorbed(OpContext& c) {
  const Node& n = c.n;
  const MlaParams& m = n.Params<MlaParams>();
  const int64_t T = c.T, H = m.heads, dn = m.dn, dr = m.dr, dv = m.dv, r = m.rank;
  const int64_t rows = MlaGatherRows(c.kv, T), dk = dn + dr;
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(spec.width[0] == r && spec.width[1] == dr, "vulkan: mla '", n.name,
           "' does not match the latent cache widths (", spec.width[0], ", ", spec.width[1], ")");
  ES_ASSERT(c.layout->mla_view != 0 && c.attn_rope == nullptr);
  const DeviceWeight& kvb = c.weights.Get(*KvB(c.g, n));
  ES_CHECK(kvb.chunks.size() == 1 && kvb.rows == H * (dn + dv) && kvb.cols == r, "vulkan: mla '",
           n.name, "': kv_b must be [H*(dn+dv), r] in one chunk");
  const BufRange x = c.scratch[0], K = c.scratch[1], V = c.scratch[2], meta = c.scratch[3];
  {
    Dispatch& d = c.Add("mla_gather_" + KvTypeSuffix(spec.dtype), {1, 1, 1, 1, 1, 1});
    d.bindings = {{Range(c.kv.part(n.layer, 0))},
                  {Range(c.kv.part(n.layer, 1))},
                  {c.batch},
                  {x},
                  {K},
                  {meta}};
    d.writes = {3, 4, 5};
    struct {
      uint32_t r, dr, dn, H, rows, map_off;
    } pc{uint32_t(r), uint32_t(dr),   uint32_t(dn),
         uint32_t(H), uint32_t(rows), c.layout->mla_view + uint32_t(ViewMap(c.kv, T))};
    d.Push(pc);
    d.groups[0] = uint32_t(std::min<int64_t>(rows, 65535));
  }
  // Head h's two matrices inside kv_b: offsets in elements, or in words for block types.
  const uint64_t row_unit = Repacked(kvb.dtype) ? DeviceRowBytes(kvb.dtype, r) / 4 : uint64_t(r);
  std::vector<uint32_t> table(size_t(6 * H), 0);
  for (int64_t h = 0; h < H; ++h) {
    table[size_t(6 * h + 1)] = uint32_t(uint64_t(h * (dn + dv)) * row_unit);
    table[size_t(6 * h + 3)] = uint32_t(uint64_t(h * (dn + dv) + dn) * row_unit);
  }
  Allocation tab = c.host_pool->Alloc(table.size() * 4, n.name + " kv_b heads");
  std::memcpy(tab.mapped, table.data(), table.size() * 4);
  c.owned->push_back(tab);
  const std::vector<BufRange> w{Range(kvb.chunks[0].alloc)};
  RecordGroupedGemm(
      c, GroupedGemm{w, x, meta, K, Range(tab), meta, kvb.dtype, uint32_t(dn), uint32_t(r),
                     uint32_t(H), uint32_t(rows), uint32_t(H), 0, false, uint32_t(dk)});
  RecordGroupedGemm(
      c, GroupedGemm{w, x, meta, V, Range(tab), meta, kvb.dtype, uint32_t(dv), uint32_t(r),
                     uint32_t(H), uint32_t(rows), uint32_t(H), 1, false, uint32_t(dv)});
  AttentionKv view;
  view.dtype = DType::kF32;
  view.bt = BufRange{c.batch.buffer, c.batch.offset + uint64_t(c.layout->mla_view) * 4,
                     MlaViewWords(c.kv, T) * 4};
  view.pos_off = 2;
  view.slot_off = uint32_t(2 + T);
  AttentionArgs a{};
  a.q = c.In(0);
  a.ka = a.kb = K;
  a.v = V;
  a.out = c.Out();
  a.Hq = a.Hkv = uint32_t(H);
  a.wa = uint32_t(dk);
  a.wb = 0;
  a.dv = uint32_t(dv);
  a.q_rs = a.a_w = uint32_t(H * dk);
  a.q_hs = uint32_t(dk);
  a.b_w = 0;
  a.v_w = a.o_rs = uint32_t(H * dv);
  a.o_hs = uint32_t(dv);
  a.scale = m.scale;
  a.kv = &view;
  RecordAttention(c, a, false);
}

}  // namespace es::vk
