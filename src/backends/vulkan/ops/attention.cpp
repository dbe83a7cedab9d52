// kAttention: flash-style causal GQA attention over the cache (shaders/attention.comp).
#include "ops/ops.h"

namespace es::vk {

namespace {
constexpr uint32_t kDecodeMaxG = 8, kDecodeTileKeys = 32,
                   kDecodeMaxNew = 8;  // attention_decode.comp
// Key chunks per (row, kv head) of attention_decode.comp (ES_VK_ATTN_SPLITS; 16 splits measured
// slower on the H200, docs/log/2026-11-30-sessions2-9-h200-dense.md "Session 9"); past 8 rows the
// rows fill the GPU themselves: fewer chunks (at least 4), so the partials stay T x Hq x 256 / 8
// at most.
uint32_t DecodeSplits(const Device& dev, int64_t T) {
  const uint32_t s = dev.tuning().Uint(Knob::kAttnSplits);
  return T <= 8 ? s : std::max<uint32_t>(4, uint32_t(int64_t(s) * 8 / T));
}
// attention_decode.comp's shared memory (its declarations).
uint64_t DecodeSharedBytes(uint32_t G, uint32_t dk, uint32_t dv) {
  const uint32_t vl = dv / 4, ng = 128 / vl;
  return 4ull * (G * dk + 4 * (G * kDecodeTileKeys + 8) + G * kDecodeTileKeys + 2 * G +
                 kDecodeMaxNew * (dk + dv) + kDecodeMaxNew) +
         16ull * ((ng - 1) * G * vl + 1);
}
}  // namespace

uint64_t AttentionSplitBytes(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                             uint32_t dv) {
  if (T > kDecodeMaxRows) return 0;
  const uint32_t S =
      UseDecodeAttention(dev, T, Hq, Hkv, dk, dv) ? DecodeSplits(dev, T) : kAttentionSplits;
  return uint64_t(T) * Hq * S * uint64_t(dv + 2) * 4;
}

bool UseDecodeAttention(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                        uint32_t dv) {
  static_assert(kDecodeMaxNew >= kDecodeFusedMaxRows,
                "a fused step's rows must fit the new-key table");
  if (T > kDecodeMaxRows || Hkv == 0 || Hq % Hkv != 0 || !dev.tuning().On(Knob::kAttnDecode))
    return false;
  const uint32_t G = Hq / Hkv;
  const bool dv_ok = dv == 16 || dv == 32 || dv == 64 || dv == 128 || dv == 256;
  return G <= kDecodeMaxG && dk % 32 == 0 && dk <= 256 && dv_ok &&
         DecodeSharedBytes(G, dk, dv) + 256 <= dev.info().max_shared_memory;
}

namespace {
// Push constants of the prefill kernels (attention_rows.comp, attention_cm2.comp).
struct RowsPush {
  uint32_t Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs, o_hs;
  float scale;
  uint32_t T;
  uint32_t tiles_off;  // the batch's tile table (mixed steps, MixedTileRows rows a tile), 0: none
};
// The word offsets of the rows' slots and positions in the buffer the kernel reads them from.
uint32_t SlotOff(const OpContext& c, const AttentionArgs& a) {
  return a.kv ? a.kv->slot_off : c.layout->slots;
}
uint32_t PosOff(const OpContext& c, const AttentionArgs& a) {
  return a.kv ? a.kv->pos_off : c.layout->positions;
}
RowsPush PushFor(const OpContext& c, const AttentionArgs& a) {
  return {a.Hq,          a.Hkv,  a.wa,   a.wb,
          a.dv,          a.q_rs, a.q_hs, uint32_t(c.kv.capacity()),
          a.a_w,         a.b_w,  a.v_w,  SlotOff(c, a),
          PosOff(c, a),  a.o_rs, a.o_hs, a.scale,
          uint32_t(c.T), 0u};
}
// The element type of the keys and values an attention reads: the cache's, or its own (a.kv).
DType KeyType(const OpContext& c, const AttentionArgs& a) {
  return a.kv ? a.kv->dtype : c.kv.spec().dtype;
}
// attention_rows.comp's widest keys (MAXDK) in its _dk192 variants (f32 keys and values; values
// up to 128): MLA's non-absorbed heads, 128 + 64.
constexpr uint32_t kRowsWideKeys = 192;
constexpr uint32_t kCm2MaxHeadDim = 256;
uint32_t Pad16(uint32_t d) { return (d + 15) / 16 * 16; }
}  // namespace

bool UseAttentionCm2(const Device& dev, int64_t T, uint32_t dk, uint32_t dv) {
  const Coopmat2Config& t = dev.coopmat2();
  // attention_cm2.comp's shared memory: the key and value tiles as f16, rows padded by 8
  const uint64_t shared = uint64_t(t.fa_bc) * (Pad16(dk) + 8 + Pad16(dv) + 8) * 2 + 8ull * t.fa_br;
  return dev.f16_math() && t.fa_br != 0 && T > kDecodeMaxRows && dk <= kCm2MaxHeadDim &&
         dv <= kCm2MaxHeadDim && shared + 256 <= dev.info().max_shared_memory;
}

bool UseMixedAttention(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                       uint32_t dv) {
  if (T <= kDecodeMaxRows || !UseDecodeAttention(dev, kDecodeMaxRows, Hq, Hkv, dk, dv))
    return false;
  // The other rows' kernel (KernelFor): tensor cores, else the 8-row tiles up to 128-wide heads.
  return UseAttentionCm2(dev, T, dk, dv) || (dk <= 128 && dv <= 128);
}

int MixedTileRows(const Device& dev, int64_t T, uint32_t dk, uint32_t dv) {
  return UseAttentionCm2(dev, T, dk, dv) ? int(dev.coopmat2().fa_br) : kRowsTile;
}

uint64_t MixedAttentionBytes(const Device& dev, int64_t T, uint32_t Hq, uint32_t dv) {
  return uint64_t(T) * Hq * DecodeSplits(dev, T) * uint64_t(dv + 2) * 4;
}

// attention_combine.comp: merges the S key chunks of each (row, head) of a split attention; with
// `list`, only the rows of the batch's decode-row list (mixed steps).
void RecordAttentionCombine(OpContext& c, const AttentionArgs& a, uint32_t S, bool list) {
  ES_ASSERT(!(list && a.xq));
  const std::string name = a.xq ? (a.xq->wide ? "attention_combine_q8_i16" : "attention_combine_q8")
                           : list ? "attention_combine_list"
                                  : "attention_combine";
  ES_ASSERT(S >= 1 && S <= kMaxCombineSplits);
  Dispatch& m = c.Add(name, std::vector<uint32_t>(a.xq ? 4 : list ? 3 : 2, 1));
  m.bindings = {{a.part}, {a.out}};
  if (list) m.bindings.push_back({c.batch});
  m.writes = {1};
  if (a.xq) {
    ES_CHECK(a.dv % 32 == 0 && a.o_hs % 32 == 0 && a.dv <= 1024, "vulkan: attention '", c.n.name,
             "': a quantized output needs 32-aligned heads of at most 1024");
    m.bindings.push_back({a.xq->q});
    m.bindings.push_back({a.xq->ds});
    m.writes = {1, 2, 3};
  }
  struct {
    uint32_t Hq, dv, o_rs, o_hs, list_off, S;
  } mc{a.Hq, a.dv, a.o_rs, a.o_hs, list ? c.layout->dec_rows : 0u, S};
  m.Push(mc);
  m.groups[0] = a.Hq;
  m.groups[1] = uint32_t(c.T);
  m.groups[2] = (a.dv + 127) / 128;  // 128 output dims a workgroup
}

namespace {

// Split decode attention by kv head (attention_decode.comp), FUSED where the builder folded the
// ropes and the cache stores into it (c.attn_rope): then a.q is the raw q.
// With `list` (mixed steps), the rows of the batch's decode-row list only.
void RecordDecodeAttention(OpContext& c, const AttentionArgs& a, bool list = false) {
  const bool fused = c.attn_rope != nullptr;
  ES_ASSERT(!(fused && list));
  // S chunks (the scratch was sized for them: AttentionSplitBytes) of at least min_chunk keys
  // (H200, 7B tg128 at context 512..640, t/s, two rounds in one job: Q4_0 362.3 / 361.1 with
  // chunks of 16 against 357.6 / 358.4 with 32, Q8_0 263.2 / 263.8 against 259.2 / 259.5; earlier
  // jobs: 64 slower).
  const uint32_t S = DecodeSplits(c.dev, c.T);
  const uint32_t min_chunk = c.dev.tuning().Uint(Knob::kAttnChunk);
  const uint32_t G = a.Hq / a.Hkv;
  std::vector<uint32_t> counts(fused ? 7 : 5, 1);
  // vulkan_backend.cpp folds only f32 / f16 caches, steps of up to kDecodeFusedMaxRows rows
  ES_ASSERT(!fused || (!IsQuantized(c.kv.spec().dtype) && c.T <= kDecodeFusedMaxRows));
  Dispatch& d =
      c.Add("attention_decode_" + KvTypeSuffix(c.kv.spec().dtype) + (fused ? "_fused" : ""), counts,
            {a.wa, a.dv, G, min_chunk});
  d.bindings = {{a.q}, {a.ka}, {a.v}, {a.part}, {c.batch}};
  d.writes = {3};
  struct {
    uint32_t Hq, q_rs, capacity, a_w, v_w, slot_off, pos_off, T, k_rs, v_rs, rope_off, rope_half,
        neox, cs_off;
    float scale;
    uint32_t list_off;
  } pc{a.Hq,
       a.q_rs,
       uint32_t(c.kv.capacity()),
       a.a_w,
       a.v_w,
       c.layout->slots,
       c.layout->positions,
       uint32_t(c.T),
       0,
       0,
       0,
       0,
       0,
       0,
       a.scale,
       list ? c.layout->dec_rows : 0u};
  if (fused) {
    const Node& rn = *c.attn_rope;
    const RopeParams& rp = rn.Params<RopeParams>();
    const RopeTable& rt = *rp.table;
    ES_CHECK(rt.dim % 2 == 0 && rp.head_dim == int64_t(a.wa) && rp.offset + rt.dim <= rp.head_dim,
             "vulkan: rope '", rn.name, "' folded into '", c.n.name, "' does not fit its heads");
    d.bindings.push_back({c.attn_k});
    d.bindings.push_back({c.attn_v});
    d.writes = {1, 2, 3};
    pc.k_rs = a.a_w;
    pc.v_rs = a.v_w;
    pc.rope_off = uint32_t(rp.offset);
    pc.rope_half = uint32_t(rt.dim / 2);
    pc.neox = rt.mode == RopeMode::kNeox ? 1u : 0u;
    pc.cs_off = c.layout->rope.at(&rt);
  }
  d.Push(pc);
  d.groups[0] = a.Hkv;
  d.groups[1] = uint32_t(c.T);
  d.groups[2] = S;
  RecordAttentionCombine(c, a, S, list);
}

// The kernel of an attention: prefill (more than kDecodeMaxRows rows, no split scratch,
// no second key part) on tensor cores or by 8-row tiles where the head dims allow; else one
// workgroup per (head, row), split over keys where a.part is given. Both prefill kernels read
// the keys through the block tables and dequantize block-quantized caches in their tile loads.
enum class AttentionKernel { kTensorCores, kRows, kPerRow };
// attention_rows.comp's variant for the head dims: 32-key tiles of 128-wide heads need ~38 KiB of
// shared memory; heads up to 64 wide fit 32-key tiles in ~19 KiB; else 16-key tiles (~21 KiB).
// 192-wide keys: ~48 KiB with 32-key tiles, ~27 KiB with 16.
std::string RowsTile(const Device& dev, uint32_t wa, uint32_t dv) {
  const uint64_t shared = dev.info().max_shared_memory;
  if (wa > 128) return shared >= 49 * 1024 ? "_dk192" : "_dk192_kt16";
  return shared >= 40 * 1024 ? "" : (wa <= 64 && dv <= 64 ? "_d64" : "_kt16");
}
AttentionKernel KernelFor(const OpContext& c, const AttentionArgs& a) {
  if (a.part.size != 0 || a.wb != 0 || c.T <= kDecodeMaxRows) return AttentionKernel::kPerRow;
  if (UseAttentionCm2(c.dev, c.T, a.wa, a.dv)) return AttentionKernel::kTensorCores;
  if (a.wa <= 128 && a.dv <= 128) return AttentionKernel::kRows;
  return a.wa <= kRowsWideKeys && a.dv <= 128 && KeyType(c, a) == DType::kF32
             ? AttentionKernel::kRows
             : AttentionKernel::kPerRow;
}
}  // namespace

void RecordAttention(OpContext& c, const AttentionArgs& a, bool tiles) {
  const std::string kt = KvTypeSuffix(KeyType(c, a));
  const BufRange bt = a.kv ? a.kv->bt : c.batch;
  ES_ASSERT(!a.kv || (a.part.size == 0 && c.T > kDecodeMaxRows));  // prefill kernels only
  const AttentionKernel kernel = KernelFor(c, a);
  ES_ASSERT(!tiles || kernel != AttentionKernel::kPerRow);
  if (kernel != AttentionKernel::kPerRow) {
    // Prefill, a workgroup taking `rows` query rows that share each key/value tile: on tensor
    // cores (attention_cm2.comp: BR rows x BC keys), or 8 rows (attention_rows.comp).
    const Coopmat2Config& t = c.dev.coopmat2();
    const bool cm2 = kernel == AttentionKernel::kTensorCores;
    Dispatch& d =
        cm2 ? c.Add("attention_cm2_" + kt, {1, 1, 1, 1, 1, 1},
                    {t.fa_wg, t.fa_br, t.fa_bc, Pad16(a.wa), Pad16(a.dv)})
            : c.Add("attention_rows_" + kt + RowsTile(c.dev, a.wa, a.dv), {1, 1, 1, 1, 1, 1});
    d.bindings = {{a.q}, {a.ka}, {a.kb}, {a.v}, {a.out}, {bt}};
    d.writes = {4};
    RowsPush pc = PushFor(c, a);
    const int64_t rows = cm2 ? int64_t(t.fa_br) : kRowsTile;
    d.groups[0] = a.Hq;
    d.groups[1] = uint32_t((c.T + rows - 1) / rows);
    if (tiles) {  // sequence-aligned tiles (MixedTileRows rows): at most one more a sequence
      ES_ASSERT(!a.kv && c.layout->tiles != 0);
      pc.tiles_off = c.layout->tiles;
      d.groups[1] += uint32_t(std::min<int64_t>(c.kv.n_slots(), c.T));
    }
    d.Push(pc);
    return;
  }
  const bool split = a.part.size != 0;
  const std::string name = "attention_" + kt + (split ? "_split" : "");
  Dispatch& d = c.Add(name, split ? std::vector<uint32_t>{1, 1, 1, 1, 1, 1, 1}
                                  : std::vector<uint32_t>{1, 1, 1, 1, 1, 1});
  d.bindings = {{a.q}, {a.ka}, {a.kb}, {a.v}, {a.out}, {bt}};
  d.writes = {4};
  if (split) {
    d.bindings.push_back({a.part});
    d.writes = {6};
    d.groups[2] = kAttentionSplits;
  }
  struct {
    uint32_t Hq, Hkv, wa, wb, dv, q_rs, q_hs, capacity, a_w, b_w, v_w, slot_off, pos_off, o_rs,
        o_hs;
    float scale;
  } pc{a.Hq,  a.Hkv, a.wa,  a.wb,          a.dv,         a.q_rs, a.q_hs, uint32_t(c.kv.capacity()),
       a.a_w, a.b_w, a.v_w, SlotOff(c, a), PosOff(c, a), a.o_rs, a.o_hs, a.scale};
  d.Push(pc);
  d.groups[0] = a.Hq;
  d.groups[1] = uint32_t(c.T);
  if (split) RecordAttentionCombine(c, a, kAttentionSplits, false);
}

void BuildAttention(OpContext& c) {
  const auto& n = c.n;
  const AttentionParams& p = n.Params<AttentionParams>();
  const uint32_t Hq = uint32_t(p.q_heads), Hkv = uint32_t(p.kv_heads), dk = uint32_t(p.dk),
                 dv = uint32_t(p.dv);
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(Hkv > 0 && Hq % Hkv == 0, "vulkan: attention '", n.name, "': ", Hq,
           " query heads are not a multiple of ", Hkv, " kv heads");
  ES_CHECK(spec.width[0] == int64_t(Hkv) * dk && spec.width[1] == int64_t(Hkv) * dv,
           "vulkan: attention '", n.name, "' does not match the cache widths");
  ES_CHECK(!IsQuantized(spec.dtype) || (dk % 32 == 0 && dv % 32 == 0), "vulkan: attention '",
           n.name, "': a ", Name(spec.dtype), " cache needs head dims that are multiples of 32 (",
           dk, ", ", dv, ")");
  AttentionArgs a{};
  a.q = c.In(0);
  a.ka = a.kb = Range(c.kv.part(n.layer, 0));
  a.v = Range(c.kv.part(n.layer, 1));
  a.out = c.Out();
  a.Hq = Hq;
  a.Hkv = Hkv;
  a.wa = dk;
  a.wb = 0;
  a.dv = dv;
  a.q_rs = Hq * dk;
  a.q_hs = dk;
  a.a_w = Hkv * dk;
  a.b_w = 0;
  a.v_w = Hkv * dv;
  a.o_rs = Hq * dv;
  a.o_hs = dv;
  a.scale = p.scale;
  if (!c.scratch.empty()) a.part = c.scratch[0];
  QuantX xq;
  if (c.out_xq.size) {
    ES_CHECK(a.part.size != 0, "vulkan: attention '", n.name,
             "': a quantized output needs split decode");
    xq = QuantXRanges(c.out_xq, c.T, int64_t(Hq) * dv, c.out_xq_type);
    a.xq = &xq;
  }
  if (a.part.size != 0 && UseDecodeAttention(c.dev, c.T, Hq, Hkv, dk, dv)) {
    if (c.attn_rope) a.q = c.act[size_t(c.attn_rope->src[0])];
    RecordDecodeAttention(c, a);
    return;
  }
  ES_CHECK(c.attn_rope == nullptr, "vulkan: attention '", n.name,
           "' has a folded rope but no decode kernel");
  if (a.part.size != 0 && UseMixedAttention(c.dev, c.T, Hq, Hkv, dk, dv)) {
    // Mixed step: decode rows split over keys, the other rows on sequence-aligned tiles.
    RecordDecodeAttention(c, a, /*list=*/true);
    AttentionArgs rows = a;
    rows.part = {};
    RecordAttention(c, rows, /*tiles=*/true);
    return;
  }
  RecordAttention(c, a, false);
}

}  // namespace es::vk
