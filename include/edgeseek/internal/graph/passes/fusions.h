// Fusion passes over an es::Graph (graph.h), the backends' side of the graph passes (passes.h is
// the importer's, over an OpGraph). Each pass finds one pattern of a model's graph that a backend
// can run as one kernel and records it in a FusionPlan; the graph itself is left as the model built
// it (it stays the contract, and backends key what they cache on it). A backend opts into each
// fusion by capability: the passes match the graph's structure and typed parameters, and ask
// FusionCaps whether the backend can run the fused form for that node (its rows, weight types,
// cache type and kernels are the backend's to judge). The backend then records a plan's fused
// nodes with what the plan says they absorb and skips the nodes folded into them.
//
// One pass a file in src/graph/passes/ (fuse_*.cpp, fold_*.cpp), each tested in
// tests/unit/graph/fusion_passes_test.cpp against its decomposition's structure; the numerics of
// every fused kernel are tested per backend against the plain graph (tests/unit/vulkan;
// tests/kernels/cpu_fusion_test.cpp). The Vulkan backend takes all of them (vulkan_backend.cpp,
// VkFusionCaps); the CPU backend the matmul epilogues of prefill-sized steps (residual add, dual
// gate/up with SwiGLU), the MoE's residual and the rotating k store (backends/cpu/fusion_caps.h,
// CpuFusionCaps), not the RMSNorm folds, the MLA store, the raw-row attention nor the shared
// quantized x.
#pragma once

#include <vector>

#include "edgeseek/internal/graph/graph.h"

namespace es {

// What a backend can fuse, asked per candidate node of the graph being planned.
class FusionCaps {
 public:
  virtual ~FusionCaps() = default;
  // Matmul `n`, or kMoE node `n` through its down projection, can write an epilogue: the residual
  // added to its output, or (matmuls) be half of a dual gate/up GEMV writing silu(gate) * up.
  virtual bool Epilogue(const Graph& g, const Node& n) const = 0;
  // Matmul or kMoE node `n`, whose x is an RMSNorm's output, can normalize x while loading it.
  virtual bool FoldsNorm(const Graph& g, const Node& n) const = 0;
  // A kv_store can rotate its rows (a rope whose only consumer it is) while writing the cache.
  virtual bool RopeIntoStore() const = 0;
  // MLA's kv_a chain, store(rms_norm(slice(kva))) and store(rope(slice(kva))), can be one store.
  virtual bool MlaKvStore() const = 0;
  // Attention `n` can take its raw q, k and v rows: rotate q and k and store k and v itself.
  virtual bool AttentionTakesRawRows(const Graph& g, const Node& n) const = 0;
  // MLA attention `n` can rotate its q's rope dims while loading them.
  virtual bool MlaFoldsQRope(const Graph& g, const Node& n) const = 0;
  // Matmul `m` reads its x quantized per block (an integer-dot GEMV): the format's id (>= 0;
  // readers of one format can share a copy), else -1.
  virtual int QuantizedX(const Graph& g, const Node& m) const = 0;
  // Matmul `m` (a dual gate/up GEMV if `dual`) reads a copy of its x quantized once, rather than
  // quantizing x in each of its workgroups.
  virtual bool QuantizeXOnce(const Graph& g, const Node& m, bool dual) const = 0;
  // Producer `p` of m's x, m its only reader, can write its output quantized in m's format: a
  // split decode attention, or the gate matmul of the dual gate/up GEMV writing m's x.
  virtual bool WritesQuantizedX(const Graph& g, const Node& p, const Node& m) const = 0;
};

// One quantized copy of an x (ShareQuantizedX): written by `producer` (a node writing its output
// quantized too), or, with producer -1, filled by its first reader; read by matmuls from `reader`
// (the first) to `last`.
struct QuantizedX {
  int producer = -1, reader = -1, last = -1, format = -1;
};

// The fusions the passes found, per node id (-1: none). Which node absorbs which:
struct FusionPlan {
  std::vector<int> uses;         // how many nodes read each node (the graph's, before fusion)
  std::vector<int> write_at;     // where a node's output is first written (a fused epilogue's
                                 //   output is written by the matmul producing it, earlier)
  std::vector<int> out_node;     // matmul -> the add or SwiGLU whose output it writes
  std::vector<int> res_node;     // matmul -> the residual its epilogue adds
  std::vector<int> gate_node;    // the later matmul of a dual gate/up GEMV -> gate and up
  std::vector<int> up_node;      //   (it runs there, writing the SwiGLU's output)
  std::vector<int> norm_of;      // matmul / kMoE -> the RMSNorm it folds
  std::vector<int> live_until;   // a node whose output must live until this node (a fused
                                 //   consumer reads the folded node's input)
  std::vector<int> rope_of;      // kv_store -> the rope it folds
  std::vector<int> mla_c_store;  // MLA's rope-part store -> the latent store it also writes
  std::vector<int> mla_norm;     //   and the kv_a_norm it folds
  std::vector<int> attn_rope;    // attention / MLA -> its q rope, folded
  std::vector<int> attn_k;       // attention taking raw rows -> the k rows (before the rope)
  std::vector<int> attn_v;       //   and the v rows
  std::vector<char> skip;        // folded into another node: not recorded
  std::vector<int> xq_of;        // matmul -> the quantized copy of x it reads (quantized_x)
  std::vector<QuantizedX> quantized_x;  // in the order of their first readers
  explicit FusionPlan(const Graph& g);
};

// The passes, in the order PlanFusions runs them (later ones read earlier ones' records).
// fuse_gemv_epilogues.cpp: matmul (or kMoE) + add -> the matmul adds the residual; gate and up
// matmuls of one x + SwiGLU -> one dual GEMV writing silu(gate) * up.
void FuseGemvEpilogues(const Graph& g, const FusionCaps& caps, FusionPlan& f);
// fold_rms_norms.cpp: an RMSNorm read only as x by matmuls / kMoE nodes that can fold it.
void FoldRmsNorms(const Graph& g, const FusionCaps& caps, FusionPlan& f);
// fold_rope_stores.cpp: rope -> kv_store, the rope's only consumer, becomes a rotating store.
void FoldRopeStores(const Graph& g, const FusionCaps& caps, FusionPlan& f);
// fuse_mla_kv_store.cpp: MLA's kv_a chain of one layer (two slices, the norm, the rope, two
// stores) becomes one store at the second.
void FuseMlaKvStores(const Graph& g, const FusionCaps& caps, FusionPlan& f);
// fuse_decode_attention.cpp: attention(rope(q), store(rope(k)), store(v)) takes the raw q, k, v;
// MLA attention(rope(q), ...) rotates q itself.
void FuseDecodeAttention(const Graph& g, const FusionCaps& caps, FusionPlan& f);

// share_quantized_x.cpp: integer-dot GEMVs read x quantized from one copy per (x, folded norm,
// format) (q, k and v share one), or from the copy its producer writes (the attention's output
// for the o projection, the dual gate/up GEMV's for down). Runs after the fusions it reads.
void ShareQuantizedX(const Graph& g, const FusionCaps& caps, FusionPlan& f);

// Every pass above, in order.
FusionPlan PlanFusions(const Graph& g, const FusionCaps& caps);

}  // namespace es
