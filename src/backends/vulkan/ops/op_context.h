// What an op's host code sees while a graph is being built into dispatches: the node, its
// inputs' and output's device ranges, its scratch ranges, the weights, the KV cache, the batch
// buffer layout, and the list to append its dispatches to. One host file per op (ops/*.cpp)
// picks the shader variant, sets push constants and group counts, and records its dispatches;
// nothing here runs per token.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "../command.h"
#include "../device.h"
#include "../kv_storage.h"
#include "../memory.h"
#include "../pipeline_cache.h"
#include "../weights.h"
#include "edgeseek/internal/graph/graph.h"

namespace es::vk {

// Word offsets of the per-token tables inside the batch buffer (int32 / f32 words).
struct BatchLayout {
  uint32_t tokens = 0, positions = 0, slots = 0, out_rows = 0;
  uint32_t kv_tables = 0;  // [n_slots][blocks_per_slot]; words 0, 1 hold it and blocks_per_slot
  std::map<const RopeTable*, uint32_t> rope;  // cos table; sin follows after T*dim/2 words
  // MLA's non-absorbed form: the view of its gathered keys (WriteMlaView; 64-word aligned: it is
  // bound on its own); 0 when no node takes that form.
  uint32_t mla_view = 0;
  // The kInput node's rows (Batch::input, T x its columns; 64-word aligned: bound on its own);
  // 0 when the graph has none.
  uint32_t input = 0;
  // Mixed steps (UseMixedAttention): word dec_rows holds the count of the batch's decode rows
  // (sequences of one token), their row indices follow; word tiles the count of tiles of the
  // other sequences' rows (at most tile_rows consecutive rows of one sequence each: MixedTileRows),
  // (first row, rows) pairs follow. 0 when no node takes that path.
  uint32_t dec_rows = 0, tiles = 0;
  int tile_rows = 0;
  uint32_t words = 0;
};

struct OpContext {
  Device& dev;
  PipelineCache& pipes;
  WeightStore& weights;
  VkKv& kv;
  const Graph& g;
  const Node& n;
  int id = 0;
  std::vector<BufRange> act;      // per node: its output range (empty for weights)
  std::vector<BufRange> scratch;  // this node's scratch ranges (ScratchBytes order)
  BufRange batch;                 // the whole batch buffer
  const BatchLayout* layout = nullptr;
  std::vector<Dispatch>* out = nullptr;
  int64_t T = 0;            // batch rows
  bool mla_expand = false;  // the step's MLA expands where it can (MlaStepExpands)
  // Fusions decided by the builder (vulkan_backend.cpp): the node's output goes to act[out_node]
  // (a consumer's) instead of its own; a matmul adds `residual` in its epilogue; a matmul of the
  // FFN up projection computes silu(x gateᵀ) * (x upᵀ) with `dual_gate`'s weight.
  int out_node = -1;
  BufRange residual;
  const Node* dual_gate = nullptr;
  const Node* dual_up = nullptr;
  const Node* norm_node = nullptr;  // a folded RMSNorm producing this matmul's x
  const Node* rope_node = nullptr;  // kv_store: a folded rope (the store rotates its input)
  // kv_store of MLA's rope part with the kv_a chain folded in (mla_kv_store.comp): the store of
  // the normed latent part and its RMSNorm; the rope is rope_node, the input kva its input's.
  const Node* mla_c_store = nullptr;
  const Node* mla_norm = nullptr;
  // kAttention with the ropes of q and k and both cache stores folded in (attention_decode.comp
  // FUSED, UseDecodeAttention): the q rope (its input is the raw q, its table and dims are k's
  // too) and the raw k and v rows. kMlaAttention (MlaFoldsQRope): only the q rope.
  const Node* attn_rope = nullptr;
  BufRange attn_k, attn_v;
  // kAttention (split decode) read by an integer-dot GEMV: its output also goes here quantized
  // for weights of type out_xq_type (QuantXRanges), so that GEMV reads it as x quantized once.
  BufRange out_xq;
  DType out_xq_type = DType::kF32;
  // Dual gate/up GEMV (DualQuantizesOut): its output also goes here quantized (QuantXRanges over
  // the gate's rows) for the down projection, which reads it as x quantized once.
  BufRange dual_yq;
  // Integer-dot GEMV (UseIdotGemv): the quantized copy of x (QuantXBytes), shared by the matmuls
  // reading the same x; the first of them (xq_fill) records the quantization.
  BufRange xq;
  bool xq_fill = false;
  MemoryPool* host_pool = nullptr;           // for small constant tables written once
  std::vector<Allocation>* owned = nullptr;  // allocations the recorded program keeps and frees

  BufRange In(int k) const { return act[size_t(n.src[size_t(k)])]; }
  BufRange Out() const { return act[size_t(out_node >= 0 ? out_node : id)]; }
  const Node& Src(int k) const { return g.node(n.src[size_t(k)]); }
  const Tensor& W(int k) const { return *Src(k).weight; }
  // Appends a dispatch of `shader`; bindings are filled by the caller.
  Dispatch& Add(const std::string& shader, const std::vector<uint32_t>& counts,
                const std::vector<uint32_t>& spec = {});
};

BufRange Range(const Allocation& a);
// A 2-D grid of 256-wide groups covering n invocations.
void Grid1D(Dispatch& d, uint64_t n, uint32_t wg = 256);
const char* TypeSuffix(DType t);  // "f32", "f16", "bf16", "q8_0", ..., "q6_k"

// GEMV geometry for this device: workgroup size and outputs per workgroup such that the
// invocations of one output are whole subgroups.
struct GemvShape {
  uint32_t wg = 128, rows = 4;
};
GemvShape GemvFor(const Device& dev);

// Whether prefill GEMMs of inner size K over weights of type wt take the cooperative-matrix
// shader (f16 math on, a device shape, K % 8 == 0, wt one of f32/f16/bf16/q8_0/q4_0).
bool UseCoopmat(const Device& dev, int64_t K, DType wt);
// Whether a matmul of R rows runs on the workgroup-scope cooperative-matrix GEMM
// (matmul_gemm_cm2.comp) instead: f16 weights, or, for a prefill (R > kDecodeMaxRows),
// block-quantized ones of N rows through an f16 copy (dequant_f16.comp) of at most 256 MiB
// (ES_VK_CM2_QUANT=0: never).
bool UseCoopmat2(const Device& dev, int64_t R, int64_t K, DType wt, int64_t N);
// An RMSNorm folded into a GEMV: x is the norm's input; weight: the norm weight as f32.
struct NormFold {
  BufRange weight;
  float eps = 0;
};
// The quantized x in `xq` (QuantXBytes): q, the levels; ds, the per-block pairs; wide: int16
// levels (for Q8_0 weights), else int8.
struct QuantX {
  BufRange q, ds;
  bool wide = false;
};
// The x of an op with a folded RMSNorm (OpContext::norm_node): the norm's input, its weight and
// eps in *nf; without one, the op's own input 0.
BufRange FoldedNormInput(const OpContext& c, NormFold* nf);
// y = x Wᵀ (+ bias) over every row chunk of W. x: [R, K] (row stride K); y: row stride y_rs;
// GEMV for R <= 8, tiled GEMM otherwise.
// x16: room for an f16 copy of x (R * K halves), which the workgroup-scope coopmat GEMM uses
// where given (MatMulScratchBytes).
// xq: x already quantized (QuantXRanges) for the integer-dot GEMV; norm must then be null.
void RecordMatMul(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                  const BufRange* bias, BufRange y, int64_t y_rs,
                  const BufRange* residual = nullptr, const NormFold* norm = nullptr,
                  const BufRange* x16 = nullptr, const QuantX* xq = nullptr);
// moe_route_params.glsl's RouteParams: what the routing of a MoE node needs besides its logits.
struct RoutePush {
  uint32_t E, top_k, n_group, topk_group, sigmoid, method, norm, has_bias;
  float scaling;
  uint32_t e0, n_local;
};
// The routing a router GEMV does in its last workgroup (RecordRouterGemv): the correction bias
// (any range where push.has_bias is 0), ids and weights [R, top_k], and one zeroed word a row
// group that the GEMV counts in and sets back to 0.
struct GemvRoute {
  BufRange bias, ids, wts, count;
  RoutePush push;
};
// The router GEMV of a MoE step that also routes (matmul_gemv.comp ROUTE): logits = x Wᵀ [R, E]
// as RecordMatMul's GEMV writes them, then ids and weights as moe_route.comp writes them. W f32,
// f16 or bf16 of one chunk, K % 8 == 0, R <= kGemvMaxRows (ops/moe.cpp RouteInRouterGemv checks).
void RecordRouterGemv(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                      BufRange logits, const NormFold* norm, const GemvRoute& route);
// Whether a GEMV of R rows, inner size K over weights of type wt runs on integer dot products
// (matmul_gemv.comp IDOT over x quantized per 32-block): R <= 8, K % 32 == 0, and Q8_0, Q4_0 or
// (K % 256 == 0) Q5_K, Q4_K, Q6_K (the last two by default in steps of 2+ rows, and from
// kIdotKQuantMinRows outputs N in one-row ones; ES_VK_GEMV_IDOT_Q4K / _Q6K) with
// ES_VK_GEMV_IDOT=1 (the tuning registry's knob); auto, on devices with 4x8-bit dot products in
// hardware, Q8_0 (int16 x) where the mixed-signedness ones are too.
bool UseIdotGemv(const Device& dev, int64_t R, int64_t K, int64_t N, DType wt);
// Outputs from which a dense one-row Q4_K / Q6_K GEMV takes the integer dots by default
// (UseIdotGemv).
constexpr int64_t kIdotKQuantMinRows = 8192;
// Whether its x (rows of K, for N outputs; dual: the x of a fused gate/up GEMV) is quantized once
// per input by a dispatch of its own rather than inside each GEMV workgroup: ES_VK_GEMV_IDOT_LOCAL
// (default: for steps of more than one row, rows longer than 8192, dual GEMVs and GEMVs of more
// than 16,384 outputs, an lm_head).
bool IdotQuantizeOnce(const Device& dev, int64_t R, int64_t K, int64_t N, bool dual);
// Bytes of x quantized for weights of type wt: R * K levels (int8 for Q4_0, int16 for Q8_0;
// rounded up to 256 bytes), then per 32-block (d, d·Σq).
uint64_t QuantXBytes(int64_t R, int64_t K, DType wt);
QuantX QuantXRanges(BufRange xq, int64_t R, int64_t K, DType wt);
// Records quantize_q8.comp: x [R, K] (row stride K) → xq, applying `norm` when given.
void RecordQuantizeX(OpContext& c, BufRange x, int64_t R, int64_t K, const NormFold* norm,
                     const QuantX& xq);
// Whether a matmul of R rows and inner size K can take a fused GEMV epilogue (residual add,
// SwiGLU pair).
bool CanFuseGemv(int64_t R, int64_t K, const DeviceWeight& w);
// y = silu(x gateᵀ) * (x upᵀ) in one GEMV pass (matmul_gemv.comp DUAL); y: [R, gate.rows].
// yq: y also quantized for the next integer-dot GEMV (QOUT; only where DualQuantizesOut).
void RecordGemvSwiGLU(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& gate,
                      const DeviceWeight& up, BufRange y, const NormFold* norm = nullptr,
                      const QuantX* xq = nullptr, const QuantX* yq = nullptr);
// Whether the dual integer-dot GEMV over rows of K (x quantized apart) can also write its output
// quantized in its own x format (matmul_gemv.comp QOUT: 32 outputs a workgroup):
// ES_VK_GEMV_DUAL_QUANT 2 (TPR 32, QR 4; the default for Q4_0) or 1 (TPR kept, QR = 32 / rows);
// 0: never (the default for Q8_0).
bool DualQuantizesOut(const Device& dev, int64_t R, int64_t K, const DeviceWeight& gate);
// The routed experts' GEMVs of a decode step (matmul_gemv.comp MOE, ops/moe.cpp): the up GEMV
// (gate/up + SwiGLU, one workgroup row per (token, choice) pair) and the down GEMV (one per
// token, its choices added in order), their specialization constants and outputs per workgroup.
// idot: the integer-dot variants (every block type where the device has the dot products, gate/up
// and down of different types but one x format — a Q8_0 gate/up needs a Q8_0 down —, top_k up to
// kMoeGemvMaxChoices: x quantized in the up GEMV's workgroups, its output quantized for the down
// GEMV, 32 outputs a workgroup); else the float / block-type variants over f32 x
// (every VEC type, rows of whole 8-element groups, gate/up and down types may differ), up to
// kGemvMaxRows rows. False where neither applies.
struct MoeGemv {
  std::vector<uint32_t> up_spec, down_spec;
  uint32_t up_outputs = 0, down_outputs = 0;
  bool idot = false;
};
bool MoeGemvFor(const Device& dev, int64_t R, int64_t D, int64_t I, int64_t top_k, DType gate_up,
                DType down, MoeGemv* out);
// Per-head GEMV: y[r*y_rs + h*y_hs + y_off + n] = Σ_k W[h*N + n, k] x[r*x_rs + h*x_hs + x_off + k]
void RecordHeadGemv(OpContext& c, BufRange x, int64_t R, int64_t H, int64_t N, int64_t K,
                    const DeviceWeight& w, int64_t x_rs, int64_t x_hs, int64_t x_off, BufRange y,
                    int64_t y_rs, int64_t y_hs, int64_t y_off);

// ---- op registry -----------------------------------------------------------------------------
// Scratch bytes an op needs while it runs (f32 temporaries), in the order it uses them.
std::vector<uint64_t> ScratchBytes(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                                   int64_t T, bool mla_expand);
// A matmul's scratch: the f16 copy of x for the workgroup-scope coopmat GEMM (0 bytes if none).
uint64_t MatMulScratchBytes(const Device& dev, const Graph& g, const Node& n);
// Records the node's dispatches.
void BuildOp(OpContext& c);
// Whether the ops can run this node (types, sizes); `why` says what is missing.
bool OpSupported(const Graph& g, const Node& n, std::string* why);

}  // namespace es::vk
