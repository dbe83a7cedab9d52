// Architectures: the weights each one expects (names as in the Hugging Face checkpoints, shapes
// from the config) and the graph of one forward pass. One builder covers Llama, Qwen2 and the
// DeepSeek V2/V3 family (MLA + MoE); per-architecture differences are spelled out where they
// occur. Models know nothing about devices: they produce graphs for any backend.
#pragma once

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

// Looks a tensor up by checkpoint name (nullptr when absent).
using WeightLookup = std::function<const Tensor*(const std::string& name)>;

struct LayerWeights {
  // attention (standard)
  const Tensor *attn_norm = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const Tensor *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  // MLA
  const Tensor *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr, *kv_a = nullptr,
               *kv_a_norm = nullptr, *kv_b = nullptr;
  Tensor wuk_t, wuv;  // derived from kv_b at load: [H*r, dn] and [H*dv, r]
  // MLP
  const Tensor *ffn_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
  // MoE
  bool moe = false;
  const Tensor *router = nullptr, *router_bias = nullptr;
  std::vector<const Tensor*> experts;  // gate, up, down per expert
  const Tensor *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr;
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
  // Every tensor the graphs read.
  std::vector<const Tensor*> Weights() const;
  // The token embedding table (also the output matrix where tied).
  const Tensor* embedding() const { return embed_; }

 private:
  int AttentionBlock(Graph& g, int h, int layer, const Batch& b) const;
  int MlaBlock(Graph& g, int h, int layer, const Batch& b) const;
  // The FFN (dense or MoE) of h added to the residual stream x; returns the new stream.
  int MlpBlock(Graph& g, int h, int x, int layer, int T) const;
  int Linear(Graph& g, int x, const Tensor* w, const Tensor* bias, int rows,
             const std::string& name) const;

  ModelConfig c_;
  std::shared_ptr<const RopeTable> rope_;
  std::shared_ptr<const MoeParams> moe_;
  const Tensor *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<LayerWeights> layers_;
};

}  // namespace es
