// Architectures: the weights each one expects (names as in the Hugging Face checkpoints, shapes
// from the config) and the graph of one forward pass. One builder covers Llama, Qwen2 and the
// DeepSeek V2/V3 family (MLA + MoE); per-architecture differences are spelled out where they
// occur. Models know nothing about devices: they produce graphs for any backend.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/graph/graph.h"
#include "edgeseek/internal/models/config.h"

namespace es {

struct WeightSpec {
  std::string name;
  Shape shape;
  bool optional = false;
  bool is_norm = false;  // 1-D norm weights (synthetic init: ones + noise)
};

// Every tensor the architecture reads, in order (per-expert names for MoE experts).
std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c);
// The tensors of the first multi-token-prediction (MTP) module of a DeepSeek-V3/R1 checkpoint
// (num_nextn_predict_layers > 0): model.layers.<n_layers>.{enorm, hnorm, eh_proj,
// shared_head.norm} and a decoder layer of the same names as the others, plus the optional
// embed_tokens and shared_head.head (the model's own tables where absent). Empty otherwise.
std::vector<WeightSpec> ExpectedMtpWeights(const ModelConfig& c);

// Looks a tensor up by checkpoint name (nullptr when absent).
using WeightLookup = std::function<const Tensor*(const std::string& name)>;

struct LayerWeights {
  // attention (standard)
  const Tensor *attn_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const Tensor *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  int heads = 0, kv_heads = 0;  // this layer's (kv_heads: as the cache holds them)
  // k/v (and biases) with their heads repeated, where the layer has fewer kv heads than the cache
  // (RepeatKvHeads in arch.cpp); K(), V(), KBias(), VBias() are what the graph reads.
  Tensor k_rep, v_rep, k_bias_rep, v_bias_rep;
  const Tensor* K() const { return k_rep.data ? &k_rep : k; }
  const Tensor* V() const { return v_rep.data ? &v_rep : v; }
  const Tensor* KBias() const { return k_bias_rep.data ? &k_bias_rep : k_bias; }
  const Tensor* VBias() const { return v_bias_rep.data ? &v_bias_rep : v_bias; }
  // MLA
  const Tensor *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr, *kv_a = nullptr,
               *kv_a_norm = nullptr, *kv_b = nullptr;
  Tensor wuk_t, wuv;  // derived from kv_b at load: [H*r, dn] and [H*dv, r]
  // MLP
  const Tensor *ffn_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
  const Tensor *gate_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;  // mlp_bias
  // MoE
  bool moe = false;
  const Tensor *router = nullptr, *router_bias = nullptr;
  std::vector<const Tensor*> experts;  // gate, up, down per expert
  const Tensor *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr;
  // A shard's routed experts are [expert0, expert0 + experts.size() / 3) of the router's; the
  // kMoE node then carries them in MoeOpParams (expert0, n_local: a range: the other experts'
  // choices add nothing; backend.h Supports says whether a backend runs one).
  int expert0 = 0;
  bool expert_range = false;
};

// ---- head split (tensor parallel, edgeseek/internal/runtime/head_split.h) ----
// Shard `index` of `count` of every decoder layer:
//   attention  kv heads [index, index + 1) x Hkv / count with their query heads: q/k/v rows and
//              o_proj columns (o_proj's bias on shard 0); MLA: heads [index, index + 1) x H /
//              count (q / q_b, kv_b, Wukᵀ, Wuv rows, o_proj columns), the latent (kv_a, its norm,
//              q_a) replicated: every shard caches the whole latent
//   FFN        intermediate columns cut at whole blocks: gate/up rows, down columns (down's bias
//              on shard 0); shared experts alike; routed experts [expert0, expert1) (the router
//              on every shard: each routes every row and runs the choices it holds)
// Row cuts are views of the model's tensors; column cuts are copies the shard owns.
struct ShardSpec {
  int index = 0, count = 1;
  int expert0 = 0, expert1 = 0;  // routed experts held ([0, 0): none)
};
struct ArchShard {
  ShardSpec spec;
  int head0 = 0, head1 = 0;          // query heads [head0, head1) of a full-width layer
  std::vector<LayerWeights> layers;  // [n_layers], pointing at the model's tensors and `owned`
  std::deque<Tensor> owned;          // row views and column copies (stable addresses)
};

// The MTP module (DeepSeek-V3 technical report, section 2.2; the layout of the V3 checkpoint):
//   x = eh_proj([enorm(e) | hnorm(h)])     e = embed(t_{i+1}) [D], h = the target's normalized
//                                          hidden state at i (model.norm(x_i)) [D]; eh_proj [D, 2D]
//   x = decoder_layer(x)                   MLA + MoE, at position i, a KV cache of its own
//   h' = shared_head.norm(x) ; logits = shared_head.head(h')   predicts t_{i+2}
struct MtpWeights {
  int layer = 0;                  // its index in the checkpoint (= n_layers)
  const Tensor* embed = nullptr;  // [V, D] embed_tokens, or the model's
  const Tensor *enorm = nullptr, *hnorm = nullptr, *head_norm = nullptr;  // [D] each
  const Tensor* eh_proj = nullptr;                                        // [D, 2D]
  Tensor eh_e, eh_h;             // derived: eh_proj's columns [0, D) and [D, 2D)
  const Tensor* head = nullptr;  // [V, D] shared_head.head, or the model's lm_head
  LayerWeights block;
};

class ModelArch {
 public:
  // Binds and validates weights: a missing tensor or a shape that disagrees with the config is
  // an es::Error naming the tensor. Derived tensors (MLA absorption) are built here.
  ModelArch(const ModelConfig& c, const WeightLookup& lookup);

  const ModelConfig& config() const { return c_; }
  // The graph of one forward pass over `batch` (Finalize()d); output: logits [out_rows, vocab].
  // It depends on the batch only through n_tokens() and out_rows.size() (tokens, positions,
  // slots and which rows are read out come from the batch when the graph runs), so Runner keeps
  // one graph per such shape.
  Graph Build(const Batch& batch) const;
  // Every tensor the graphs read (those of Build, BuildHidden and BuildHead; not the MTP module's).
  std::vector<const Tensor*> Weights() const;

  // ---- layer split (pipeline stages, edgeseek/internal/runtime/pipeline.h) ----
  // One stage of a forward split by layer: decoder layers [layer0, layer1) over
  //   the embedded batch tokens (layer0 == 0), or the batch's input rows (Batch::input, f32
  //   [n_tokens, D]: the residual stream the previous stage produced) otherwise;
  // then, with `head`, the final norm and lm_head at the batch's out_rows (logits [out_rows, V],
  // as Build), else the residual stream itself ([n_tokens, D], every row). Layer l caches in KV
  // layer l - layer0 (a stage's cache holds its own layers only). BuildStage(b, 0, n_layers,
  // true) is Build(b), node for node.
  Graph BuildStage(const Batch& batch, int layer0, int layer1, bool head) const;

  // ---- head split (ArchShard above) ----
  // Shard s.index of s.count; throws es::Error naming the model's head counts when they do not
  // divide by s.count (dense: the KV heads; MLA: the heads), or an expert range outside the
  // model's experts.
  std::unique_ptr<ArchShard> MakeShard(const ShardSpec& s) const;
  // Block `ffn` (false: attention, true: FFN) of layer `layer` on shard `sh` over the batch's
  // input rows x (Batch::input, the residual stream [n_tokens, D]): [n_tokens, D] = x + the
  // shard's partial sum on shard 0, the partial sum alone on the others, so that the sum over
  // the shards is the stream after the block. Attention caches in KV layer `layer` of a cache of
  // ShardKvSpec's widths.
  Graph BuildShardBlock(const ArchShard& sh, const Batch& batch, int layer, bool ffn) const;
  // The KV cache of one shard (every layer): its kv heads' share of K and V, or MLA's whole latent.
  KvSpec ShardKvSpec(const ArchShard& sh, DType type) const;

  // ---- split forward and the MTP module (speculative decoding with MTP drafts) ----
  // Rows enter BuildHead and BuildMtp from the host through a kInput node: the batch's input
  // rows (Batch::input, f32 [n_tokens, W]), given anew for each forward.
  // The forward pass up to the final norm: [n_tokens, D] = model.norm(x) for every row.
  Graph BuildHidden(const Batch& batch) const;
  // logits [out_rows, V] = head(input rows ([n_tokens, D]) at the batch's out_rows): lm_head, or
  // with `mtp` the MTP module's shared_head.head.
  Graph BuildHead(const Batch& batch, bool mtp) const;
  // The MTP module over input rows [e | h] ([n_tokens, 2D]): [n_tokens, D] = h' above. Its
  // decoder layer reads and writes layer 0 of the KV cache it runs with (one layer of
  // config().MakeKvSpec's widths).
  Graph BuildMtp(const Batch& batch) const;
  // The MTP module, or null when the model has none (num_nextn_predict_layers == 0, or a file
  // without its tensors).
  const MtpWeights* mtp() const { return mtp_.get(); }
  // Every tensor BuildMtp and BuildHead(mtp) read.
  std::vector<const Tensor*> MtpWeightList() const;
  // The token embedding table (also the output matrix where tied).
  const Tensor* embedding() const { return embed_; }

 private:
  // Blocks of layer weights `w` named `p` ("model.layers.N."), caching in KV layer `kv_layer`.
  int AttentionBlock(Graph& g, int h, const LayerWeights& w, int kv_layer, const std::string& p,
                     const Batch& b) const;
  int MlaBlock(Graph& g, int h, const LayerWeights& w, int kv_layer, const std::string& p,
               const Batch& b) const;
  // The FFN (dense or MoE) of h added to the residual stream x; returns the new stream.
  int MlpBlock(Graph& g, int h, int x, const LayerWeights& w, int kv_layer, const std::string& p,
               int T) const;
  // One pre-norm decoder layer over the residual stream x; returns the new stream.
  int DecoderLayer(Graph& g, int x, const LayerWeights& w, int kv_layer, const std::string& p,
                   const Batch& b) const;
  // The embedding (or the input rows) and layers [layer0, layer1): [n_tokens, D].
  int Trunk(Graph& g, const Batch& b, int layer0, int layer1) const;
  // lm_head(model.norm(x)) at the batch's out_rows: logits [out_rows, V].
  int Head(Graph& g, int x, const Batch& b) const;
  LayerWeights BindLayer(int l, const std::function<const Tensor*(const std::string&)>& b,
                         const std::function<const Tensor*(const std::string&, int64_t)>& bias);
  int Linear(Graph& g, int x, const Tensor* w, const Tensor* bias, int rows,
             const std::string& name) const;

  ModelConfig c_;
  std::shared_ptr<const RopeTable> rope_;
  std::shared_ptr<const MoeParams> moe_;
  const Tensor *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<MtpWeights> mtp_;
};

}  // namespace es
