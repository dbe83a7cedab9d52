// Graph IR: the contract between models (which build graphs) and backends (which execute them).
//
// A Graph is a list of nodes in execution order. Each node is one op with its inputs (earlier
// node ids) and one output tensor of a static shape; all activations are row-major 2-D
// [rows, cols] (rows = tokens of the batch, or selected rows) in f32 unless a backend plans
// otherwise. Weights enter as kWeight nodes that point at model tensors (mmapped or repacked);
// the batch's token ids and positions enter through the Batch, not through nodes, and so do host
// rows that change every forward (kInput: Batch::input, e.g. the hidden states MTP drafts take
// back; a recorded program uploads them each step, where a kWeight table is uploaded once). The KV
// cache is not a graph tensor: kKvStore writes to it and the attention ops read it, addressed by
// (layer, part) and the Batch's sequence table.
//
// Models build one graph per batch shape; building is cheap (a few hundred nodes) and the
// backends key what they cache (pipelines, descriptor sets, command buffers) on shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "edgeseek/internal/core/tensor.h"

namespace es {

// ---- the batch: tokens of several sequences in one forward pass ----------------------------
// Tokens of one sequence are contiguous; sequence s covers batch rows
// [row0, row0 + n_tokens) at positions [pos0, pos0 + n_tokens) of its KV slot. A prefill chunk
// and decode steps of other sequences may share a batch.
struct BatchSeq {
  int slot = 0;      // KV cache slot (one per live sequence)
  int64_t pos0 = 0;  // position of this sequence's first token in the batch
  int n_tokens = 0;
  int row0 = 0;  // first batch row (filled by Batch::Finalize)
};

struct Batch {
  std::vector<int32_t> tokens;  // [T]
  std::vector<BatchSeq> seqs;
  std::vector<int32_t> out_rows;  // batch rows whose logits are wanted, ascending
  // Derived per-row tables (Finalize): position and sequence index of each row.
  std::vector<int32_t> positions;
  std::vector<int32_t> row_seq;
  // Rows of the graph's kInput node, if it has one: f32 [n_tokens, input_cols], row-major, in
  // host memory the caller owns and keeps until Compute returns. Per forward like the tokens:
  // a backend reads (uploads) them on every Compute, so one graph takes new rows each step.
  const float* input = nullptr;
  int64_t input_cols = 0;

  int n_tokens() const { return int(tokens.size()); }
  // Appends a sequence's tokens; `all_logits` asks logits for every row, else only its last.
  void Add(int slot, int64_t pos0, const std::vector<int32_t>& toks, bool all_logits = false);
  void Finalize();
};

// ---- rope ----------------------------------------------------------------------------------
enum class RopeMode : uint8_t {
  kNeox,        // rotate halves: (x[i], x[i + d/2]) pairs — Llama/Qwen2 in HF layout
  kInterleaved  // rotate adjacent pairs (x[2i], x[2i+1]) — DeepSeek's rope layout
};

// Everything needed to rotate: angle(pos, i) = pos * inv_freq[i]; cos/sin scaled by
// attention_factor (YaRN's mscale ratio). inv_freq already folds llama3 / YaRN scaling.
struct RopeTable {
  RopeMode mode = RopeMode::kNeox;
  int dim = 0;                  // rotated dims per head (even)
  std::vector<float> inv_freq;  // [dim / 2]
  float attention_factor = 1.0f;
};

// ---- MoE -----------------------------------------------------------------------------------
enum class ScoringFunc : uint8_t { kSoftmax, kSigmoid };
enum class TopkMethod : uint8_t { kGreedy, kGroupLimitedGreedy, kNoauxTc };

struct MoeParams {
  int n_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  ScoringFunc scoring = ScoringFunc::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  int ffn_dim = 0;  // moe_intermediate_size
};

// ---- ops -----------------------------------------------------------------------------------
// Each op's parameters are a typed record in Node::params (below); the op comments name it.
enum class Op : uint8_t {
  kWeight,        // a model tensor; out shape = tensor shape (no execution)
  kEmbed,         // src: [W(V,D)] ; batch tokens -> [T, D]
  kRmsNorm,       // src: [x(R,D), w(D)] ; RmsNormParams -> x * rsqrt(mean(x^2) + eps) * w
  kMatMul,        // src: [x(R,K), W(N,K), bias(N)?] -> [R, N] = x Wᵀ (+ bias)
  kAdd,           // src: [a, b] same shape -> a + b
  kSwiGLU,        // src: [gate(R,I), up(R,I)] -> silu(gate) * up
  kSlice,         // src: [x(R,C)] ; SliceParams -> [R, width], columns [col0, col0 + width)
  kRope,          // src: [x(R, H*hd)] ; RopeParams -> same shape, rotated at batch positions
  kKvStore,       // src: [x(T, W)] ; layer, KvStoreParams -> writes rows to the cache at
                  //   (slot, position) of each batch row; out = x (for ordering)
  kAttention,     // src: [q(T, Hq*dk), storeK, storeV] ; layer, AttentionParams -> [T, Hq*dv];
                  //   causal over the row's own sequence
  kMlaAttention,  // src: [q(T, H*(dn+dr)), storeC, storePE, WukT(H*r, dn), Wuv(H*dv, r),
                  //   kv_b(H*(dn+dv), r)?] ; layer, MlaParams -> [T, H*dv]; the absorbed form
                  //   over the latent cache, or (a backend's choice, kv_b given) the non-absorbed
                  //   one: K_nope, V = c kv_bᵀ per head, attention over [K_nope | k_pe] and V
  kMoE,           // src: [x(R,D), gate(E,D), bias(E) or -1, then per local expert e: gate_e(I,D),
                  //   up_e(I,D), down_e(D,I)] ; MoeOpParams -> [R, D] routed experts only
  kGetRows,       // src: [x(T,C)] ; the batch's out_rows -> [len(out_rows), C]
  kInput,         // src: none ; the batch's input rows (Batch::input, f32 [T, C]) -> [T, C],
                  //   C = Batch::input_cols; new rows every forward
  kCount
};

// ---- per-op parameters (Node::params) -------------------------------------------------------
// One record per op that has parameters; kOp names the op that carries it (Graph::Add checks).
struct RmsNormParams {
  static constexpr Op kOp = Op::kRmsNorm;
  float eps = 0.0f;
};
struct SliceParams {
  static constexpr Op kOp = Op::kSlice;
  int64_t col0 = 0, width = 0;  // columns [col0, col0 + width) of each row
};
// Rotates [offset, offset + table->dim) of each of `heads` heads of width head_dim.
struct RopeParams {
  static constexpr Op kOp = Op::kRope;
  int64_t heads = 0, head_dim = 0, offset = 0;
  std::shared_ptr<const RopeTable> table;  // shared by a model's ropes (backends key on it)
};
struct KvStoreParams {
  static constexpr Op kOp = Op::kKvStore;
  int part = 0;  // 0 or 1 (KvSpec::width)
};
struct AttentionParams {
  static constexpr Op kOp = Op::kAttention;
  int64_t q_heads = 0, kv_heads = 0, dk = 0, dv = 0;
  float scale = 0.0f;
};
// MLA: heads, the no-rope and rope query/key widths per head (dn, dr), the value width dv and
// the latent width (kv_lora_rank).
struct MlaParams {
  static constexpr Op kOp = Op::kMlaAttention;
  int64_t heads = 0, dn = 0, dr = 0, dv = 0, rank = 0;
  float scale = 0.0f;
};
// The routed experts of one layer: the router's parameters and the experts this node holds,
// [expert0, expert0 + n_local) of moe.n_experts (a head split's range; n_local 0: all).
struct MoeOpParams {
  static constexpr Op kOp = Op::kMoE;
  MoeParams moe;
  int64_t expert0 = 0, n_local = 0;
  int64_t LocalExperts() const { return n_local > 0 ? n_local : moe.n_experts; }
  int64_t FirstExpert() const { return n_local > 0 ? expert0 : 0; }
};
using OpParams = std::variant<std::monostate, RmsNormParams, SliceParams, RopeParams, KvStoreParams,
                              AttentionParams, MlaParams, MoeOpParams>;

const char* OpName(Op op);

struct Node {
  Op op = Op::kWeight;
  std::string name;                // checkpoint-style name, e.g. "model.layers.3.self_attn.q"
  std::vector<int> src;            // node ids (−1 = absent optional input)
  Shape shape;                     // output [rows, cols] (weights: their own shape)
  DType dtype = DType::kF32;       // output type
  const Tensor* weight = nullptr;  // kWeight only; owned by the model
  int layer = -1;
  OpParams params = {};  // the op's record (monostate for ops without parameters)

  // The op's parameters; es::Error naming the node when it carries another op's record.
  template <class P>
  const P& Params() const {
    if (const P* p = std::get_if<P>(&params)) return *p;
    WrongParams(OpName(P::kOp));
  }
  template <class P>
  P& Params() {
    if (P* p = std::get_if<P>(&params)) return *p;
    WrongParams(OpName(P::kOp));
  }

 private:
  [[noreturn]] void WrongParams(const char* wanted) const;
};

// A hash of n.params (fields by value; a rope table by its address), for backends' keys, and the
// combining step it uses (h with v mixed in), for keys built from it.
uint64_t ParamsHash(const Node& n);
uint64_t HashMix(uint64_t h, uint64_t v);

// The host rows kInput node `n` reads from `b` (Batch::input): es::Error naming the node when
// the batch carries none, or rows of another width, or the node's rows are not the batch's.
const float* InputRows(const Batch& b, const Node& n);

class Graph {
 public:
  Graph();
  int Add(Node n);                 // returns the node id
  int AddWeight(const Tensor& t);  // dedups by tensor address
  const Node& node(int id) const { return nodes_[size_t(id)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  int output() const { return int(nodes_.size()) - 1; }
  // For each node: index of the last node that reads it (or itself), for memory planning.
  std::vector<int> LastUse() const;
  // A process-wide number of this graph's content: new for every graph made and every node
  // added, kept by copies (equal content). A backend may key what it derives from the nodes
  // (weight checks, the recorded program's hash) by it.
  uint64_t version() const { return version_; }

 private:
  uint64_t version_ = 0;
  std::vector<Node> nodes_;
  std::vector<std::pair<const Tensor*, int>> weight_ids_;
};

// ---- KV cache layout -----------------------------------------------------------------------
// Per layer, up to two parts with a width in elements per token: (K, V) for standard attention,
// (latent c, rope key) for MLA. The runtime owns the cache; a backend allocates its storage.
struct KvSpec {
  int n_layers = 0;
  int width[2] = {0, 0};
  DType dtype = DType::kF32;
  bool mla = false;  // the parts are MLA's (latent, rope key): what a backend sizes scratch for
  size_t BytesPerToken() const {
    return size_t(n_layers) *
           (RowBytes(dtype, width[0]) + (width[1] ? RowBytes(dtype, width[1]) : 0));
  }
};

}  // namespace es
