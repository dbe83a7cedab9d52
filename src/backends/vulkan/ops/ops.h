// One builder per op (each in its own ops/<op>.cpp).
#pragma once

#include "ops/op_context.h"

namespace es::vk {

void BuildEmbed(OpContext& c);
void BuildRmsNorm(OpContext& c);
void BuildMatMul(OpContext& c);
void BuildAdd(OpContext& c);
void BuildSwiGLU(OpContext& c);
void BuildSlice(OpContext& c);
void BuildRope(OpContext& c);
void BuildKvStore(OpContext& c);
// The shader-variant suffix of a KV cache type (kv_type.glsl's KV_<T>): f32, f16, q8_0, q4_0;
// throws naming the type for any other.
std::string KvTypeSuffix(DType t);
// The invocations that write one cache row of W elements (kv_write.glsl's KvWriteUnits).
uint64_t KvWriteUnits(DType t, uint32_t W);
void BuildAttention(OpContext& c);
void BuildMla(OpContext& c);
void BuildMoe(OpContext& c);
void BuildGetRows(OpContext& c);
void BuildInput(OpContext& c);
// A grouped GEMM (moe_gemm.glsl: matmul_gemm_cm.comp on tensor cores where UseCoopmat, else
// matmul_gemm.comp, with MOE): for each group z < groups, the rows listed in meta (counts |
// offsets | pairs, moe_compact.comp's layout) times the group's matrix `mat` of `table`:
//   y[pair, n] = Σ_k x[pair / xdiv, k] W_z[n, k] (· wts[pair] with use_wts),  n < N, k < K
// W_z in one of the buffers `w` (at most kMoeMaxBlocks); max_rows: the most rows of a group.
// Used by the routed experts (ops/moe.cpp) and by MLA's per-head projections in prefill.
// y_rs: y's row stride (0: N).
struct GroupedGemm {
  std::vector<BufRange> w;
  BufRange x, meta, y, table, wts;
  DType dtype;
  uint32_t N, K, groups, max_rows, xdiv, mat;
  bool use_wts;
  uint32_t y_rs = 0;  // elements between y rows (0: N)
  uint32_t x_rs = 0;  // elements between x rows (0: K; a multiple of 4)
};
void RecordGroupedGemm(OpContext& c, const GroupedGemm& g);
// kMlaAttention takes the non-absorbed form (ops/mla_non_absorbed.cpp) for steps of at least this
// many rows. Per query row at position p the absorbed form costs the two per-head projections,
// H (dn + dv) r multiply-adds, plus H (2r + dr) per key; the non-absorbed one costs H (dn + dv) r
// per key of the context (K_nope and V from the latent: the same as a row's projections) plus
// H (dn + dr + dv) per key. For a chunk of T rows continuing P cached tokens of one sequence it is
// cheaper when P (dn + dv) r < T (P + T/2) (2r - dn - dv): always for a fresh prompt, and for any
// P once T > (dn + dv) r / (2r - dn - dv), 171 at DeepSeek's widths (dn = dv = 128, r = 512;
// V2 and V3 alike) — before counting that its products all run on tensor cores where the device
// has them (GEMMs and attention_cm2.comp) while the absorbed kernel runs on the FP32 ALUs. 192
// keeps the form never dearer in multiply-adds, also on devices without tensor cores.
constexpr int64_t kMlaNonAbsorbedMinRows = 192;
// Whether the step's MLA pays to expand: at least kMlaNonAbsorbedMinRows rows, and fewer
// multiply-adds in the non-absorbed form than in the absorbed one for this batch's slots and
// positions — each slot's whole context is expanded, so a decode row of a long context in the
// step (continuous batching mixes them with prefill chunks) weighs against it. Positions change
// from step to step, so the answer is part of the program's key (VulkanBackend::Run).
bool MlaStepExpands(const Graph& g, const Batch& b);
// Whether kMlaAttention node n over T rows takes the non-absorbed form: the step expands
// (MlaStepExpands: `expand`), kv_b given (src 5) in one chunk, head dims the prefill attention
// kernels take, and the gathered keys and values (every distinct slot of the step at its whole
// capacity) within kMlaNonAbsorbedMaxBytes of scratch and each within one binding.
bool MlaTakesNonAbsorbed(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                         int64_t T, bool expand);
std::vector<uint64_t> MlaScratch(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                                 int64_t T, bool expand);
// Whether kMlaAttention node n runs mla_attention.comp, which can rotate q's rope dims itself:
// the builder then folds the q rope producing its q into it (OpContext::attn_rope). Never in the
// non-absorbed form, whose attention reads the rotated q.
bool MlaFoldsQRope(const Device& dev, const VkKv& kv, const Graph& g, const Node& n, int64_t T,
                   bool expand);
// Words of the batch buffer's MLA view (BatchLayout::mla_view) for T rows over kv; the non-absorbed
// form's gathered rows (at most): every distinct slot of a step at its whole capacity.
uint64_t MlaViewWords(const VkKv& kv, int64_t T);
int64_t MlaGatherRows(const VkKv& kv, int64_t T);
// Writes the MLA view of a step (per-token: positions, slots; then block tables that map each
// slot's first positions onto consecutive blocks of the gathered keys, and the cache block each
// gathered block comes from): see ops/mla_non_absorbed.cpp.
void WriteMlaView(const BatchLayout& lay, const Batch& b, const VkKv& kv, int32_t* words);
std::vector<uint64_t> MlaNonAbsorbedScratch(const VkKv& kv, const Node& n, int64_t T);
void BuildMlaNonAbsorbed(OpContext& c);
std::vector<uint64_t> MoeScratch(const Device& dev, const Graph& g, const Node& n, int64_t T);
// Whether a kMoE node runs its experts on the expert GEMVs (MoeGemvFor: integer-dot, float or
// block-type; spec: their geometry). Only then can the builder fold an RMSNorm producing its x and
// a residual add of its output into it, as into a matmul's GEMV.
bool MoeTakesGemv(const Device& dev, const Graph& g, const Node& n, MoeGemv* spec);
// Keys and values that are not the KV cache (MLA's non-absorbed form): their element type (f32 or
// f16), and the buffer holding the rows' slots and positions (at slot_off, pos_off) and the block
// tables that map them (kv_addr.glsl's layout: words 0 and 1 give the tables' offset and blocks
// per slot).
struct AttentionKv {
  DType dtype = DType::kF32;
  BufRange bt;
  uint32_t slot_off = 0, pos_off = 0;
};
// Records the attention kernel (shared by kAttention and the MLA decomposition).
struct AttentionArgs {
  BufRange q, ka, kb, v, out;
  uint32_t Hq, Hkv, wa, wb, dv, q_rs, q_hs, a_w, b_w, v_w, o_rs, o_hs;
  float scale;
  BufRange part;  // decode: split-key partials (AttentionScratch); empty = one workgroup per row
  const QuantX* xq =
      nullptr;  // split decode: also write the output quantized (attention_combine QUANT)
  const AttentionKv* kv = nullptr;  // prefill over keys and values of its own; null: the cache
};
// Steps of up to this many rows are decode-shaped: attention splits each row's keys into chunks
// (every row its own slot and context: continuous batching's decode rows), the MLA takes its
// absorbed form, and the matmuls up to kGemvMaxRows rows their GEMVs. More rows are prefill.
constexpr int64_t kDecodeMaxRows = 64;
// Steps of up to this many rows take the GEMV and its fusions (norm, residual, dual FFN,
// quantized x); more take the GEMMs. H200, `bench -b N -p 128 -n 64`, one job, GEMVs up to 64
// rows against up to 8: 7B Q4_0 32 rows 758 / 880 t/s, 64 rows 788 / 1,700; V2-Lite Q4_0 32
// rows 709 / 815, 64 rows 1,062 / 1,489; 1 and 8 rows the same. The GEMV's row groups of 8
// re-read the weights and quantize x once per workgroup, which costs more than they save.
constexpr int64_t kGemvMaxRows = 8;
// The routed experts' GEMVs (ops/moe.cpp MoeGemvFor) read an expert once per (token, choice)
// pair: up to this many rows (every decode-shaped step); more take the grouped expert GEMMs,
// which read each expert once a step. H200, V2-Lite Q4_0 `bench -b N`, one job, GEMVs to 64 rows
// against to 8: 9 rows 773 / 353 t/s, 16 rows 1,177 / 516, 32 rows 1,653 / 863, 64 rows 2,144 /
// 1,563 (the grouped GEMMs' 64-row tiles hold 3 rows an expert at 32 rows; each of their K
// steps waits on its loads).
constexpr int64_t kMoeGemvMaxRows = kDecodeMaxRows;
// The integer-dot expert GEMVs' most choices a token (matmul_gemv.comp's moe_cb: the down GEMV
// keeps the token's choices in shared memory); DeepSeek-V3 takes 8.
constexpr int64_t kMoeGemvMaxChoices = 8;
// The fused decode attention (attention_decode.comp FUSED: ropes and cache stores folded in)
// keeps a step's new keys in shared memory: steps of up to this many rows.
constexpr int64_t kDecodeFusedMaxRows = 8;
// Key chunks per (head, row) of split decode attention (attention.comp; attention_decode.comp
// takes DecodeSplits), and the scratch bytes of a kAttention's partials for the kernel its
// shape takes (0: not split, more than kDecodeMaxRows rows).
constexpr uint32_t kAttentionSplits = 16;
uint64_t AttentionSplitBytes(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                             uint32_t dv);
// A step of more than kDecodeMaxRows rows whose attention takes a prefill kernel (tensor cores,
// or attention_rows.comp's 8-row tiles) while its shape allows the split decode kernel:
// continuous batching's mixed steps. Its decode rows (sequences of one token) then take
// attention_decode.comp over the batch's row list (BatchLayout::dec_rows: split over keys, all the
// query heads of a kv head a workgroup) and the other rows tiles that never straddle two
// sequences (BatchLayout::tiles, MixedTileRows rows each): tiles of mixed slots made one pass over
// the keys per slot (H200, 7B Q4_0 serving, 32 clients: 50.8 of a 90 ms mixed step). Its
// partials' scratch: MixedAttentionBytes.
bool UseMixedAttention(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                       uint32_t dv);
// The rows of a mixed step's tiles: the tensor-core kernel's BR where it runs, else kRowsTile.
int MixedTileRows(const Device& dev, int64_t T, uint32_t dk, uint32_t dv);
uint64_t MixedAttentionBytes(const Device& dev, int64_t T, uint32_t Hq, uint32_t dv);
// Query rows of an attention_rows.comp tile (its QR).
constexpr int kRowsTile = 8;
// `tiles`: the tiles of the batch's tile table (mixed steps, BatchLayout::tiles).
void RecordAttention(OpContext& c, const AttentionArgs& a, bool tiles);
// attention_combine.comp: merges the S key chunks in a.part of each (row, head) into a.out
// (a.Hq heads of a.dv values, row stride a.o_rs, head stride a.o_hs; a.xq: also quantized).
// `list`: only the rows of the batch's decode-row list (mixed steps, BatchLayout::dec_rows).
// S is pushed, not specialized (one pipeline whatever the step's rows), at most this many:
constexpr uint32_t kMaxCombineSplits = 64;  // attention_combine.comp's MAX_S
void RecordAttentionCombine(OpContext& c, const AttentionArgs& a, uint32_t S, bool list);
// Whether split decode attention of T rows (Hq query heads over Hkv kv heads, head dims dk, dv)
// takes attention_decode.comp, one workgroup per kv head and key chunk (ES_VK_ATTN_DECODE=0:
// never; else where the dims and the shared memory fit). The builder folds the ropes of q and k
// and the cache stores into it only where this holds.
bool UseDecodeAttention(const Device& dev, int64_t T, uint32_t Hq, uint32_t Hkv, uint32_t dk,
                        uint32_t dv);
// Whether a prefill of T rows with head dims dk, dv takes the tensor-core attention
// (attention_cm2.comp): f16 math, the device's Coopmat2Config::fa_br, T > kDecodeMaxRows,
// head dims up to 256.
bool UseAttentionCm2(const Device& dev, int64_t T, uint32_t dk, uint32_t dv);

}  // namespace es::vk
