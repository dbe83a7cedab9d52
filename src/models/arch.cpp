// Weight binding and forward graphs for Llama, Qwen2, DeepSeek-V2 and DeepSeek-V3.
//
// Per layer (pre-norm residual blocks):
//   h = rms_norm(x) ; x = x + attention(h) ; h = rms_norm(x) ; x = x + mlp_or_moe(h)
// Standard attention (Llama, Qwen2):
//   q,k,v = h Wqᵀ (+bq), h Wkᵀ (+bk), h Wvᵀ (+bv)       [T, H*hd], [T, Hkv*hd], [T, Hkv*hd]
//   rope(q), rope(k) (neox halves) ; cache k, v ; o = attention(q, K, V) Woᵀ
// MLA (DeepSeek), absorbed form over the latent cache:
//   q = h Wqᵀ  or  rms_norm(h Wq_aᵀ) Wq_bᵀ                [T, H*(dn+dr)]
//   kva = h Wkv_aᵀ                                        [T, r+dr]
//   c = rms_norm(kva[:, :r]) ; kpe = rope(kva[:, r:])     [T, r], [T, dr]   -> cached
//   rope(q[:, h, dn:]) ; o = mla(q, C, KPE, Wukᵀ, Wuv) Woᵀ
// MoE (DeepSeek): routed experts (only the chosen ones run) + shared experts.
#include "edgeseek/internal/models/arch.h"

#include <algorithm>
#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {
namespace {

std::string L(int l) { return "model.layers." + std::to_string(l) + "."; }

void AddLinear(std::vector<WeightSpec>& out, const std::string& name, int64_t n, int64_t k) {
  out.push_back({name + ".weight", {n, k}});
}

void AddMlp(std::vector<WeightSpec>& out, const std::string& p, int64_t d, int64_t i) {
  AddLinear(out, p + "gate_proj", i, d);
  AddLinear(out, p + "up_proj", i, d);
  AddLinear(out, p + "down_proj", d, i);
}

}  // namespace

namespace {

// The tensors of decoder layer l (named model.layers.l.*).
void AddLayer(std::vector<WeightSpec>& w, const ModelConfig& c, int l) {
  const int64_t D = c.hidden_size;
  const std::string p = L(l);
  w.push_back({p + "input_layernorm.weight", {D}, false, true});
  if (c.is_mla()) {
    const int64_t H = c.n_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    if (c.q_lora_rank > 0) {
      AddLinear(w, p + "self_attn.q_a_proj", c.q_lora_rank, D);
      w.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, false, true});
      AddLinear(w, p + "self_attn.q_b_proj", H * qk, c.q_lora_rank);
    } else {
      AddLinear(w, p + "self_attn.q_proj", H * qk, D);
    }
    AddLinear(w, p + "self_attn.kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, D);
    w.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, false, true});
    AddLinear(w, p + "self_attn.kv_b_proj", H * (c.qk_nope_head_dim + c.v_head_dim),
              c.kv_lora_rank);
    AddLinear(w, p + "self_attn.o_proj", D, H * c.v_head_dim);
  } else {
    const int64_t qd = int64_t(c.HeadsOf(l)) * c.head_dim,
                  kd = int64_t(c.KvHeadsOf(l)) * c.head_dim;
    AddLinear(w, p + "self_attn.q_proj", qd, D);
    AddLinear(w, p + "self_attn.k_proj", kd, D);
    AddLinear(w, p + "self_attn.v_proj", kd, D);
    if (c.attention_bias) {
      w.push_back({p + "self_attn.q_proj.bias", {qd}});
      w.push_back({p + "self_attn.k_proj.bias", {kd}});
      w.push_back({p + "self_attn.v_proj.bias", {kd}});
    }
    AddLinear(w, p + "self_attn.o_proj", D, qd);
    if (c.attention_out_bias) w.push_back({p + "self_attn.o_proj.bias", {D}});
  }
  w.push_back({p + "post_attention_layernorm.weight", {D}, false, true});
  if (c.IsMoeLayer(l)) {
    const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
    AddLinear(w, p + "mlp.gate", E, D);
    if (c.topk_method == "noaux_tc") w.push_back({p + "mlp.gate.e_score_correction_bias", {E}});
    for (int e = 0; e < E; ++e) AddMlp(w, p + "mlp.experts." + std::to_string(e) + ".", D, I);
    if (c.n_shared_experts > 0) AddMlp(w, p + "mlp.shared_experts.", D, I * c.n_shared_experts);
  } else {
    const int64_t I = c.IntermediateOf(l);
    AddMlp(w, p + "mlp.", D, I);
    if (c.mlp_bias) {
      w.push_back({p + "mlp.gate_proj.bias", {I}});
      w.push_back({p + "mlp.up_proj.bias", {I}});
      w.push_back({p + "mlp.down_proj.bias", {D}});
    }
  }
}

}  // namespace

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  std::vector<WeightSpec> w;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  w.push_back({"model.embed_tokens.weight", {V, D}});
  for (int l = 0; l < c.n_layers; ++l) AddLayer(w, c, l);
  w.push_back({"model.norm.weight", {D}, false, true});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", {V, D}});
  return w;
}

std::vector<WeightSpec> ExpectedMtpWeights(const ModelConfig& c) {
  std::vector<WeightSpec> w;
  if (c.num_nextn_predict_layers <= 0 || !c.is_mla()) return w;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  const std::string p = L(c.n_layers);
  // The MTP-specific tensors first: eh_proj tells whether a file carries the module at all.
  AddLinear(w, p + "eh_proj", D, 2 * D);
  w.push_back({p + "enorm.weight", {D}, false, true});
  w.push_back({p + "hnorm.weight", {D}, false, true});
  w.push_back({p + "shared_head.norm.weight", {D}, false, true});
  w.push_back({p + "embed_tokens.weight", {V, D}, true});
  w.push_back({p + "shared_head.head.weight", {V, D}, true});
  AddLayer(w, c, c.n_layers);
  return w;
}

namespace {

// One f32 value stored as an element of `dt` (f32 or f16).
void StoreElement(DType dt, float v, uint8_t* dst) {
  if (dt == DType::kF16) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(dst, &h, 2);
  } else {
    std::memcpy(dst, &v, 4);
  }
}

// Transposes per-head blocks of kv_b into the absorbed-MLA weights.
void BuildAbsorbed(const ModelConfig& c, const Tensor& kv_b, int layer, Tensor* wuk_t,
                   Tensor* wuv) {
  const int64_t H = c.n_heads, dn = c.qk_nope_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
  // bf16/f16 kv_b keeps its type (a copy of its elements); a block-quantized one becomes f16
  // (decode reads these every token: f32 would be 4x the bytes of the checkpoint's 2-byte form
  // and ~7x those of Q4_0); an f32 one stays f32.
  const bool dense16 = kv_b.dtype == DType::kBF16 || kv_b.dtype == DType::kF16;
  const DType dt = dense16 ? kv_b.dtype : IsQuantized(kv_b.dtype) ? DType::kF16 : DType::kF32;
  const std::string p = L(layer) + "self_attn.";
  *wuk_t = AllocTensor(p + "wuk_t", dt, {H * r, dn});
  *wuv = AllocTensor(p + "wuv", dt, {H * dv, r});
  std::vector<float> row(static_cast<size_t>(r));
  const size_t es = RowBytes(dt, 1);
  auto* kt = static_cast<uint8_t*>(MutableData(*wuk_t));
  auto* uv = static_cast<uint8_t*>(MutableData(*wuv));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < dn + dv; ++i) {
      const int64_t src_row = h * (dn + dv) + i;
      const uint8_t* src = kv_b.bytes() + size_t(src_row) * kv_b.row_bytes();
      if (!dense16) {  // the source row as f32 (dequantized once: r elements in whole blocks)
        if (IsQuantized(kv_b.dtype))
          Dequantize(kv_b.dtype, src, row.data(), r);
        else
          ConvertRowToF32(kv_b.dtype, src, row.data(), r);
      }
      if (i < dn) {
        // Wuk[h][i, j] -> WukT[h][j, i]
        for (int64_t j = 0; j < r; ++j) {
          uint8_t* dst = kt + (size_t(h * r + j) * size_t(dn) + size_t(i)) * es;
          if (dense16) {
            std::memcpy(dst, src + size_t(j) * 2, 2);
          } else {
            StoreElement(dt, row[size_t(j)], dst);
          }
        }
      } else {
        uint8_t* dst = uv + size_t(h * dv + (i - dn)) * wuv->row_bytes();
        if (dense16) {
          std::memcpy(dst, src, size_t(r) * 2);
        } else {
          for (int64_t j = 0; j < r; ++j) StoreElement(dt, row[size_t(j)], dst + size_t(j) * es);
        }
      }
    }
  }
}

// Columns [c0, c0 + n) of every row of w, as a tensor of its own: a byte copy where the type
// keeps whole blocks there (dense types; block types with c0 and n multiples of the block),
// else f32 values.
Tensor SplitColumns(const Tensor& w, int64_t c0, int64_t n, const std::string& name) {
  const int64_t blk = BlockElems(w.dtype);
  const bool bytes = c0 % blk == 0 && n % blk == 0 && w.dtype != DType::kF8E4M3;
  Tensor out = AllocTensor(name, bytes ? w.dtype : DType::kF32, {w.rows(), n});
  auto* dst = static_cast<uint8_t*>(MutableData(out));
  std::vector<float> row(bytes ? 0 : size_t(w.cols()));
  for (int64_t r = 0; r < w.rows(); ++r) {
    const uint8_t* src = w.bytes() + size_t(r) * w.row_bytes();
    if (bytes) {
      std::memcpy(dst + size_t(r) * out.row_bytes(), src + RowBytes(w.dtype, c0), out.row_bytes());
    } else {
      if (IsQuantized(w.dtype))
        Dequantize(w.dtype, src, row.data(), w.cols());
      else
        ConvertRowToF32(w.dtype, src, row.data(), w.cols());
      std::memcpy(dst + size_t(r) * out.row_bytes(), row.data() + c0, size_t(n) * 4);
    }
  }
  return out;
}

}  // namespace

// A layer with fewer KV heads than the cache's (a pruned layer; the cache has one width for every
// layer, n_kv_heads * head_dim, as both backends address it) gets each of its KV heads repeated
// r = n_kv_heads / kv_heads times: query head h then reads cache head h / (heads / n_kv_heads),
// which holds a copy of its own KV head h / (heads / kv_heads) — the same attention as GQA's
// repeat_kv. The repeated rows are byte copies (any weight type; the bias too).
static void RepeatKvHeads(const ModelConfig& c, int l, LayerWeights* w) {
  const int kv = w->kv_heads, cache = c.n_kv_heads;
  ES_CHECK(cache % kv == 0 && w->heads % cache == 0, "layer ", l, " has ", w->heads, " heads and ",
           kv, " kv heads: a KV cache of ", cache,
           " heads (the widest layer's) needs its kv heads to divide ", cache, " and ", cache,
           " to divide its heads (per-layer cache widths are not supported yet)");
  const int r = cache / kv;
  const int64_t hd = c.head_dim;
  auto repeat = [&](const Tensor* t, Tensor* out, const std::string& name) {
    if (!t) return;
    const bool vec = t->shape.size() == 1;
    const int64_t cols = vec ? 1 : t->cols();
    const size_t head_bytes = vec ? RowBytes(t->dtype, hd) : size_t(hd) * t->row_bytes();
    *out = AllocTensor(name, t->dtype, vec ? Shape{cache * hd} : Shape{cache * hd, cols});
    auto* dst = static_cast<uint8_t*>(MutableData(*out));
    for (int j = 0; j < cache; ++j)
      std::memcpy(dst + size_t(j) * head_bytes, t->bytes() + size_t(j / r) * head_bytes,
                  head_bytes);
  };
  const std::string p = L(l) + "self_attn.";
  LayerWeights& x = *w;
  repeat(x.k, &x.k_rep, p + "k_proj.weight#repeated");
  repeat(x.v, &x.v_rep, p + "v_proj.weight#repeated");
  repeat(x.k_bias, &x.k_bias_rep, p + "k_proj.bias#repeated");
  repeat(x.v_bias, &x.v_bias_rep, p + "v_proj.bias#repeated");
  x.kv_heads = cache;
}

ModelArch::ModelArch(const ModelConfig& c, const WeightLookup& lookup) : c_(c) {
  // Bind every expected tensor, checking shapes.
  auto get = [&](const std::string& name, const Shape& shape) -> const Tensor* {
    const Tensor* t = lookup(name);
    ES_CHECK(t != nullptr, "missing tensor '", name, "' (required by ", ArchName(c.arch), ")");
    ES_CHECK(t->shape == shape, "tensor '", name, "' has shape ", ShapeStr(t->shape),
             " but config.json implies ", ShapeStr(shape));
    return t;
  };
  std::map<std::string, const Tensor*> bound;
  for (const WeightSpec& s : ExpectedWeights(c)) {
    if (s.optional && !lookup(s.name)) continue;
    bound[s.name] = get(s.name, s.shape);
  }
  auto b = [&](const std::string& n) -> const Tensor* {
    auto it = bound.find(n);
    return it == bound.end() ? nullptr : it->second;
  };
  // Optional biases (any projection may carry one in some checkpoints).
  auto bias = [&](const std::string& n, int64_t dim) -> const Tensor* {
    if (const Tensor* t = b(n)) return t;
    const Tensor* t = lookup(n);
    if (!t) return nullptr;
    ES_CHECK(t->shape == Shape{dim}, "tensor '", n, "' has shape ", ShapeStr(t->shape),
             " but config.json implies ", ShapeStr({dim}));
    return t;
  };
  embed_ = b("model.embed_tokens.weight");
  norm_ = b("model.norm.weight");
  lm_head_ = c.tie_word_embeddings ? embed_ : b("lm_head.weight");
  const int64_t D = c.hidden_size;
  layers_.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& w = layers_[size_t(l)];
    w = BindLayer(l, b, bias);
    if (!c.is_mla() && w.kv_heads < c.n_kv_heads) RepeatKvHeads(c, l, &w);
  }
  // The MTP module: bound when the file carries it (eh_proj present), then all of it or an error
  // naming what is missing or misshapen.
  const std::vector<WeightSpec> mtp_specs = ExpectedMtpWeights(c);
  if (!mtp_specs.empty() && lookup(mtp_specs[0].name)) {
    for (const WeightSpec& s : mtp_specs) {
      const Tensor* t = lookup(s.name);
      if (s.optional && !t) continue;
      ES_CHECK(t != nullptr, "missing tensor '", s.name, "' of the MTP module (the file carries ",
               mtp_specs[0].name, "; num_nextn_predict_layers is ", c.num_nextn_predict_layers,
               ")");
      ES_CHECK(t->shape == s.shape, "tensor '", s.name, "' of the MTP module has shape ",
               ShapeStr(t->shape), " but config.json implies ", ShapeStr(s.shape));
      bound[s.name] = t;
    }
    auto m = std::make_unique<MtpWeights>();
    const std::string p = L(c.n_layers);
    m->layer = c.n_layers;
    m->eh_proj = b(p + "eh_proj.weight");
    m->enorm = b(p + "enorm.weight");
    m->hnorm = b(p + "hnorm.weight");
    m->head_norm = b(p + "shared_head.norm.weight");
    m->embed = b(p + "embed_tokens.weight") ? b(p + "embed_tokens.weight") : embed_;
    m->head = b(p + "shared_head.head.weight") ? b(p + "shared_head.head.weight") : lm_head_;
    m->eh_e = SplitColumns(*m->eh_proj, 0, D, p + "eh_proj.emb");
    m->eh_h = SplitColumns(*m->eh_proj, D, D, p + "eh_proj.hidden");
    m->block = BindLayer(c.n_layers, b, bias);
    mtp_ = std::move(m);
  }
  rope_ = std::make_shared<RopeTable>(c.MakeRope());
  if (c.n_routed_experts > 0) {
    auto m = std::make_shared<MoeParams>();
    m->n_experts = c.n_routed_experts;
    m->top_k = c.num_experts_per_tok;
    m->n_group = c.n_group;
    m->topk_group = c.topk_group;
    m->scoring = c.scoring_func == "sigmoid" ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
    m->topk_method = c.topk_method == "noaux_tc"               ? TopkMethod::kNoauxTc
                     : c.topk_method == "group_limited_greedy" ? TopkMethod::kGroupLimitedGreedy
                                                               : TopkMethod::kGreedy;
    // transformers 5's DeepseekV2 gate never renormalises the top-k weights; V3's does when
    // norm_topk_prob is set.
    m->norm_topk_prob = c.arch == Arch::kDeepseekV3 && c.norm_topk_prob;
    m->routed_scaling_factor = float(c.routed_scaling_factor);
    m->ffn_dim = int(c.moe_intermediate_size);
    moe_ = m;
  }
}

LayerWeights ModelArch::BindLayer(
    int l, const std::function<const Tensor*(const std::string&)>& b,
    const std::function<const Tensor*(const std::string&, int64_t)>& bias) {
  const ModelConfig& c = c_;
  const int64_t D = c.hidden_size;
  LayerWeights w;
  const std::string p = L(l);
  w.attn_norm = b(p + "input_layernorm.weight");
  w.ffn_norm = b(p + "post_attention_layernorm.weight");
  if (c.is_mla()) {
    if (c.q_lora_rank > 0) {
      w.q_a = b(p + "self_attn.q_a_proj.weight");
      w.q_a_norm = b(p + "self_attn.q_a_layernorm.weight");
      w.q_b = b(p + "self_attn.q_b_proj.weight");
    } else {
      w.q = b(p + "self_attn.q_proj.weight");
    }
    w.kv_a = b(p + "self_attn.kv_a_proj_with_mqa.weight");
    w.kv_a_norm = b(p + "self_attn.kv_a_layernorm.weight");
    w.kv_b = b(p + "self_attn.kv_b_proj.weight");
    w.o = b(p + "self_attn.o_proj.weight");
    w.o_bias = bias(p + "self_attn.o_proj.bias", D);
    w.heads = c.n_heads;
    BuildAbsorbed(c, *w.kv_b, l, &w.wuk_t, &w.wuv);
  } else {
    w.q = b(p + "self_attn.q_proj.weight");
    w.k = b(p + "self_attn.k_proj.weight");
    w.v = b(p + "self_attn.v_proj.weight");
    w.o = b(p + "self_attn.o_proj.weight");
    w.q_bias = bias(p + "self_attn.q_proj.bias", w.q->rows());
    w.k_bias = bias(p + "self_attn.k_proj.bias", w.k->rows());
    w.v_bias = bias(p + "self_attn.v_proj.bias", w.v->rows());
    w.o_bias = bias(p + "self_attn.o_proj.bias", D);
    w.heads = c.HeadsOf(l);
    w.kv_heads = c.KvHeadsOf(l);
  }
  if (c.IsMoeLayer(l)) {
    w.moe = true;
    w.router = b(p + "mlp.gate.weight");
    w.router_bias = b(p + "mlp.gate.e_score_correction_bias");
    for (int e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      w.experts.push_back(b(q + "gate_proj.weight"));
      w.experts.push_back(b(q + "up_proj.weight"));
      w.experts.push_back(b(q + "down_proj.weight"));
    }
    if (c.n_shared_experts > 0) {
      w.sh_gate = b(p + "mlp.shared_experts.gate_proj.weight");
      w.sh_up = b(p + "mlp.shared_experts.up_proj.weight");
      w.sh_down = b(p + "mlp.shared_experts.down_proj.weight");
    }
  } else {
    w.gate = b(p + "mlp.gate_proj.weight");
    w.up = b(p + "mlp.up_proj.weight");
    w.down = b(p + "mlp.down_proj.weight");
    w.gate_bias = bias(p + "mlp.gate_proj.bias", w.gate->rows());
    w.up_bias = bias(p + "mlp.up_proj.bias", w.up->rows());
    w.down_bias = bias(p + "mlp.down_proj.bias", D);
  }
  return w;
}

namespace {

// Every tensor one layer's graph reads.
void AppendLayerWeights(const LayerWeights& w, std::vector<const Tensor*>* out) {
  for (const Tensor* t :
       {w.attn_norm, w.q,       w.K(),       w.V(),      w.o,        w.q_bias,      w.KBias(),
        w.VBias(),   w.o_bias,  w.q_a,       w.q_a_norm, w.q_b,      w.kv_a,        w.kv_a_norm,
        w.ffn_norm,  w.gate,    w.up,        w.down,     w.router,   w.router_bias, w.sh_gate,
        w.sh_up,     w.sh_down, w.gate_bias, w.up_bias,  w.down_bias})
    if (t) out->push_back(t);
  if (w.kv_b) {
    out->push_back(&w.wuk_t);
    out->push_back(&w.wuv);
  }
  for (const Tensor* t : w.experts) out->push_back(t);
}

}  // namespace

std::vector<const Tensor*> ModelArch::MtpWeightList() const {
  std::vector<const Tensor*> out;
  if (!mtp_) return out;
  const MtpWeights& m = *mtp_;
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&m.eh_e, &m.eh_h, m.enorm, m.hnorm, m.head_norm})
    out.push_back(t);
  if (mtp_->head != lm_head_) out.push_back(mtp_->head);
  AppendLayerWeights(mtp_->block, &out);
  return out;
}

std::vector<const Tensor*> ModelArch::Weights() const {
  std::vector<const Tensor*> out{embed_, norm_};
  if (lm_head_ != embed_) out.push_back(lm_head_);
  for (const auto& w : layers_) AppendLayerWeights(w, &out);
  return out;
}

// ---- graph building ------------------------------------------------------------------------

int ModelArch::Linear(Graph& g, int x, const Tensor* w, const Tensor* bias, int rows,
                      const std::string& name) const {
  Node n;
  n.op = Op::kMatMul;
  n.name = name;
  n.src = {x, g.AddWeight(*w), bias ? g.AddWeight(*bias) : -1};
  n.shape = {rows, w->rows()};
  return g.Add(std::move(n));
}

static int Unary(Graph& g, Op op, std::vector<int> src, Shape shape, std::string name) {
  Node n;
  n.op = op;
  n.name = std::move(name);
  n.src = std::move(src);
  n.shape = std::move(shape);
  return g.Add(std::move(n));
}

static int RmsNormNode(Graph& g, int x, const Tensor* w, float eps, int rows,
                       const std::string& name) {
  Node n;
  n.op = Op::kRmsNorm;
  n.name = name;
  n.src = {x, g.AddWeight(*w)};
  n.shape = {rows, w->shape[0]};
  n.params = RmsNormParams{eps};
  return g.Add(std::move(n));
}

// Writes x's rows to part `part` of layer `layer` of the KV cache.
static int StoreNode(Graph& g, int x, int layer, int part, const std::string& name) {
  Node n;
  n.op = Op::kKvStore;
  n.name = name;
  n.src = {x};
  n.shape = g.node(x).shape;
  n.layer = layer;
  n.params = KvStoreParams{part};
  return g.Add(std::move(n));
}

// Rotates [off, off + rope.dim) of each of `heads` heads of width hd in x's rows.
static int RopeNode(Graph& g, int x, int64_t heads, int64_t hd, int64_t off,
                    std::shared_ptr<const RopeTable> rope, const std::string& name) {
  Node n;
  n.op = Op::kRope;
  n.name = name;
  n.src = {x};
  n.shape = g.node(x).shape;
  n.params = RopeParams{heads, hd, off, std::move(rope)};
  return g.Add(std::move(n));
}

// Columns [off, off + width) of x.
static int SliceNode(Graph& g, int x, int64_t off, int64_t width, const std::string& name) {
  Node n;
  n.op = Op::kSlice;
  n.name = name;
  n.src = {x};
  n.shape = {g.node(x).shape[0], width};
  n.params = SliceParams{off, width};
  return g.Add(std::move(n));
}

int ModelArch::AttentionBlock(Graph& g, int h, const LayerWeights& w, int layer,
                              const std::string& prefix, const Batch& batch) const {
  const int T = batch.n_tokens();
  const std::string p = prefix + "self_attn.";
  const int q = Linear(g, h, w.q, w.q_bias, T, p + "q");
  const int k = Linear(g, h, w.K(), w.KBias(), T, p + "k");
  const int v = Linear(g, h, w.V(), w.VBias(), T, p + "v");
  const int qr = RopeNode(g, q, w.heads, c_.head_dim, 0, rope_, p + "q_rope");
  const int kr = RopeNode(g, k, w.kv_heads, c_.head_dim, 0, rope_, p + "k_rope");
  const int sk = StoreNode(g, kr, layer, 0, p + "k_cache");
  const int sv = StoreNode(g, v, layer, 1, p + "v_cache");
  Node a;
  a.op = Op::kAttention;
  a.name = p + "attn";
  a.src = {qr, sk, sv};
  a.shape = {T, int64_t(w.heads) * c_.head_dim};
  a.layer = layer;
  a.params = AttentionParams{w.heads, w.kv_heads, c_.head_dim, c_.head_dim, c_.AttentionScale()};
  const int att = g.Add(std::move(a));
  return Linear(g, att, w.o, w.o_bias, T, p + "o");
}

int ModelArch::MlaBlock(Graph& g, int h, const LayerWeights& w, int layer,
                        const std::string& prefix, const Batch& batch) const {
  const int T = batch.n_tokens();
  const std::string p = prefix + "self_attn.";
  const int64_t H = w.heads, dn = c_.qk_nope_head_dim, dr = c_.qk_rope_head_dim, dv = c_.v_head_dim,
                r = c_.kv_lora_rank;
  int q;
  if (w.q_a) {
    const int qa = Linear(g, h, w.q_a, nullptr, T, p + "q_a");
    // q_a_layernorm and kv_a_layernorm use the module default eps 1e-6, not rms_norm_eps.
    const int qn = RmsNormNode(g, qa, w.q_a_norm, 1e-6f, T, p + "q_a_norm");
    q = Linear(g, qn, w.q_b, nullptr, T, p + "q_b");
  } else {
    q = Linear(g, h, w.q, nullptr, T, p + "q");
  }
  const int qr = RopeNode(g, q, H, dn + dr, dn, rope_, p + "q_rope");
  const int kva = Linear(g, h, w.kv_a, nullptr, T, p + "kv_a");
  const int craw = SliceNode(g, kva, 0, r, p + "c_raw");
  const int cn = RmsNormNode(g, craw, w.kv_a_norm, 1e-6f, T, p + "kv_a_norm");
  const int kpe_raw = SliceNode(g, kva, r, dr, p + "k_pe_raw");
  const int kpe = RopeNode(g, kpe_raw, 1, dr, 0, rope_, p + "k_pe");
  const int s0 = StoreNode(g, cn, layer, 0, p + "c_cache");
  const int s1 = StoreNode(g, kpe, layer, 1, p + "k_pe_cache");
  Node a;
  a.op = Op::kMlaAttention;
  a.name = p + "mla";
  // kv_b in the checkpoint's type too: a backend may run long prefills in the non-absorbed form.
  a.src = {qr, s0, s1, g.AddWeight(w.wuk_t), g.AddWeight(w.wuv), g.AddWeight(*w.kv_b)};
  a.shape = {T, H * dv};
  a.layer = layer;
  a.params = MlaParams{H, dn, dr, dv, r, c_.AttentionScale()};
  const int att = g.Add(std::move(a));
  return Linear(g, att, w.o, w.o_bias, T, p + "o");
}

int ModelArch::MlpBlock(Graph& g, int h, int x, const LayerWeights& w, int layer,
                        const std::string& prefix, int T) const {
  const std::string p = prefix + "mlp.";
  auto ffn = [&](const Tensor* gw, const Tensor* uw, const Tensor* dw, const std::string& name,
                 const Tensor* gb = nullptr, const Tensor* ub = nullptr,
                 const Tensor* db = nullptr) {
    const int gt = Linear(g, h, gw, gb, T, name + "gate_proj");
    const int up = Linear(g, h, uw, ub, T, name + "up_proj");
    const int act = Unary(g, Op::kSwiGLU, {gt, up}, g.node(gt).shape, name + "act");
    return Linear(g, act, dw, db, T, name + "down_proj");
  };
  const std::string res = prefix + "mlp_residual";
  // x < 0 (a head split's shard other than the first): no residual stream, the sum alone.
  const auto add = [&](int a, int b, const std::string& name) {
    return a < 0 ? b : Unary(g, Op::kAdd, {a, b}, {T, c_.hidden_size}, name);
  };
  if (!w.moe) return add(x, ffn(w.gate, w.up, w.down, p, w.gate_bias, w.up_bias, w.down_bias), res);
  // The shared experts first, added to the residual stream, then the routed experts added to
  // that: x + (shared + routed) as (x + shared) + routed, so that a backend can fold each add into
  // the projection producing it.
  if (w.sh_gate)
    x = add(x, ffn(w.sh_gate, w.sh_up, w.sh_down, p + "shared_experts."), p + "shared_residual");
  if (w.experts.empty()) return x;  // a shard without routed experts (-1: nothing at all)
  Node m;
  m.op = Op::kMoE;
  m.name = p + "experts";
  m.src = {h, g.AddWeight(*w.router), w.router_bias ? g.AddWeight(*w.router_bias) : -1};
  for (const Tensor* t : w.experts) m.src.push_back(g.AddWeight(*t));
  m.shape = g.node(h).shape;
  m.layer = layer;
  MoeOpParams mp{*moe_};
  if (w.expert_range) mp.expert0 = w.expert0, mp.n_local = int64_t(w.experts.size() / 3);
  m.params = mp;
  return add(x, g.Add(std::move(m)), res);
}

int ModelArch::DecoderLayer(Graph& g, int x, const LayerWeights& w, int kv_layer,
                            const std::string& p, const Batch& batch) const {
  const int T = batch.n_tokens();
  const int64_t D = c_.hidden_size;
  const int hn = RmsNormNode(g, x, w.attn_norm, c_.rms_norm_eps, T, p + "input_layernorm");
  const int att = c_.is_mla() ? MlaBlock(g, hn, w, kv_layer, p, batch)
                              : AttentionBlock(g, hn, w, kv_layer, p, batch);
  x = Unary(g, Op::kAdd, {x, att}, {T, D}, p + "attn_residual");
  const int fn = RmsNormNode(g, x, w.ffn_norm, c_.rms_norm_eps, T, p + "post_attention_layernorm");
  return MlpBlock(g, fn, x, w, kv_layer, p, T);
}

// The batch's input rows [rows, cols] (BuildHidden's header comment).
static int InputRows(Graph& g, int rows, int64_t cols, const std::string& name) {
  Node e;
  e.op = Op::kInput;
  e.name = name;
  e.shape = {rows, cols};
  return g.Add(std::move(e));
}

int ModelArch::Trunk(Graph& g, const Batch& batch, int layer0, int layer1) const {
  ES_ASSERT(batch.positions.size() == batch.tokens.size());
  ES_ASSERT(0 <= layer0 && layer0 <= layer1 && layer1 <= c_.n_layers);
  const int T = batch.n_tokens();
  int x;
  if (layer0 == 0) {
    Node e;
    e.op = Op::kEmbed;
    e.name = "model.embed_tokens";
    e.src = {g.AddWeight(*embed_)};
    e.shape = {T, c_.hidden_size};
    x = g.Add(std::move(e));
  } else {
    // The residual stream after layer layer0 - 1, from the previous stage.
    x = InputRows(g, T, c_.hidden_size, L(layer0) + "input");
  }
  for (int l = layer0; l < layer1; ++l)
    x = DecoderLayer(g, x, layers_[size_t(l)], l - layer0, L(l), batch);
  return x;
}

int ModelArch::Head(Graph& g, int x, const Batch& batch) const {
  const int n_out = int(batch.out_rows.size());
  ES_CHECK(n_out > 0, "batch asks for no logits");
  if (n_out != batch.n_tokens())
    x = Unary(g, Op::kGetRows, {x}, {n_out, c_.hidden_size}, "out_rows");
  const int fn = RmsNormNode(g, x, norm_, c_.rms_norm_eps, n_out, "model.norm");
  return Linear(g, fn, lm_head_, nullptr, n_out, "lm_head");
}

Graph ModelArch::Build(const Batch& batch) const { return BuildStage(batch, 0, c_.n_layers, true); }

Graph ModelArch::BuildStage(const Batch& batch, int layer0, int layer1, bool head) const {
  ES_CHECK(0 <= layer0 && layer0 <= layer1 && layer1 <= c_.n_layers, "stage layers [", layer0, ", ",
           layer1, ") are not a range of the model's ", c_.n_layers, " layers");
  Graph g;
  const int x = Trunk(g, batch, layer0, layer1);
  if (head) Head(g, x, batch);
  return g;
}

Graph ModelArch::BuildHidden(const Batch& batch) const {
  Graph g;
  const int x = Trunk(g, batch, 0, c_.n_layers);
  RmsNormNode(g, x, norm_, c_.rms_norm_eps, batch.n_tokens(), "model.norm");
  return g;
}

Graph ModelArch::BuildHead(const Batch& batch, bool mtp) const {
  ES_CHECK(!mtp || mtp_, "model has no MTP module");
  Graph g;
  const int T = batch.n_tokens();
  const int64_t D = c_.hidden_size;
  const int n_out = int(batch.out_rows.size());
  ES_CHECK(n_out > 0, "batch asks for no logits");
  int x = InputRows(g, T, D, mtp ? "mtp.hidden" : "hidden");
  if (n_out != T) x = Unary(g, Op::kGetRows, {x}, {n_out, D}, "out_rows");
  Linear(g, x, mtp ? mtp_->head : lm_head_, nullptr, n_out,
         mtp ? L(mtp_->layer) + "shared_head.head" : "lm_head");
  return g;
}

Graph ModelArch::BuildMtp(const Batch& batch) const {
  ES_CHECK(mtp_, "model has no MTP module");
  ES_ASSERT(batch.positions.size() == batch.tokens.size());
  Graph g;
  const int T = batch.n_tokens();
  const int64_t D = c_.hidden_size;
  const MtpWeights& m = *mtp_;
  const std::string p = L(m.layer);
  const float eps = c_.rms_norm_eps;
  const int in = InputRows(g, T, 2 * D, p + "input");  // [e | h]
  const int en = RmsNormNode(g, SliceNode(g, in, 0, D, p + "e"), m.enorm, eps, T, p + "enorm");
  const int hn = RmsNormNode(g, SliceNode(g, in, D, D, p + "h"), m.hnorm, eps, T, p + "hnorm");
  // eh_proj([en | hn]) = en eh_projᵀ[:, :D] + hn eh_projᵀ[:, D:] (there is no concatenation op).
  const int pe = Linear(g, en, &m.eh_e, nullptr, T, p + "eh_proj.emb");
  const int ph = Linear(g, hn, &m.eh_h, nullptr, T, p + "eh_proj.hidden");
  int x = Unary(g, Op::kAdd, {pe, ph}, {T, D}, p + "eh_proj");
  x = DecoderLayer(g, x, m.block, /*kv_layer=*/0, p, batch);
  RmsNormNode(g, x, m.head_norm, eps, T, p + "shared_head.norm");
  return g;
}

// ---- head split ------------------------------------------------------------------------------

namespace {

// Rows [r0, r0 + n) of t (elements of a 1-D tensor) as a view of its bytes, named `name`.
Tensor RowView(const Tensor& t, int64_t r0, int64_t n, const std::string& name) {
  Tensor v = t;
  v.name = name;
  if (t.shape.size() == 1) {
    v.shape = {n};
    v.data = t.bytes() + RowBytes(t.dtype, r0);
    v.nbytes = RowBytes(t.dtype, n);
  } else {
    v.shape = {n, t.cols()};
    v.data = t.bytes() + size_t(r0) * t.row_bytes();
    v.nbytes = size_t(n) * t.row_bytes();
  }
  return v;
}

// Where shard s of n starts in `width` columns: at whole blocks of `align` where every shard
// keeps some, else evenly.
int64_t Cut(int64_t width, int s, int n, int64_t align) {
  const int64_t a = std::max<int64_t>(align, 32);
  const auto at = [&](int k) { return k == n ? width : width * k / n / a * a; };
  for (int k = 0; k < n; ++k)
    if (at(k + 1) <= at(k)) return width * s / n;  // too narrow for whole blocks each
  return at(s);
}

}  // namespace

std::unique_ptr<ArchShard> ModelArch::MakeShard(const ShardSpec& s) const {
  const ModelConfig& c = c_;
  const int n = s.count, i = s.index;
  ES_CHECK(n >= 1 && i >= 0 && i < n, "head split: shard ", i, " of ", n);
  if (c.is_mla())
    ES_CHECK(c.n_heads % n == 0, "--split head over ", n, " devices: the model has ", c.n_heads,
             " attention heads (MLA), which do not divide by ", n,
             " (use a device count that divides them, or --split layer)");
  else
    ES_CHECK(c.n_kv_heads % n == 0, "--split head over ", n, " devices: the model has ",
             c.n_kv_heads, " KV heads (", c.n_heads, " attention heads), which do not divide by ",
             n, " (use a device count that divides them, or --split layer)");
  ES_CHECK(0 <= s.expert0 && s.expert0 <= s.expert1 && s.expert1 <= c.n_routed_experts,
           "head split: experts [", s.expert0, ", ", s.expert1, ") of the model's ",
           c.n_routed_experts);
  auto sh = std::make_unique<ArchShard>();
  sh->spec = s;
  const std::string tag = "#shard" + std::to_string(i) + "of" + std::to_string(n);
  auto keep = [&](Tensor t) -> const Tensor* {
    sh->owned.push_back(std::move(t));
    return &sh->owned.back();
  };
  auto rows = [&](const Tensor* t, int64_t r0, int64_t nr) -> const Tensor* {
    return t ? keep(RowView(*t, r0, nr, t->name + tag)) : nullptr;
  };
  auto cols = [&](const Tensor* t, int64_t c0, int64_t nc) -> const Tensor* {
    return keep(SplitColumns(*t, c0, nc, t->name + tag));
  };
  auto once = [&](const Tensor* t) { return i == 0 ? t : nullptr; };  // a bias added once
  // FFN columns [c0, c1) of gate/up/down (width I), at whole blocks of down's type.
  auto ffn = [&](const Tensor* gt, const Tensor* up, const Tensor* dn, const Tensor* gb,
                 const Tensor* ub, const Tensor* db, LayerWeights* w, bool shared) {
    const int64_t I = gt->rows(), align = BlockElems(dn->dtype);
    const int64_t c0 = Cut(I, i, n, align), nc = Cut(I, i + 1, n, align) - c0;
    (shared ? w->sh_gate : w->gate) = rows(gt, c0, nc);
    (shared ? w->sh_up : w->up) = rows(up, c0, nc);
    (shared ? w->sh_down : w->down) = cols(dn, c0, nc);
    if (!shared) {
      w->gate_bias = rows(gb, c0, nc), w->up_bias = rows(ub, c0, nc);
      w->down_bias = once(db);
    }
  };
  sh->layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& f = layers_[l];
    LayerWeights& w = sh->layers[l];
    w.attn_norm = f.attn_norm, w.ffn_norm = f.ffn_norm;
    if (c.is_mla()) {
      const int64_t nh = c.n_heads / n, h0 = nh * i, dn = c.qk_nope_head_dim,
                    qk = dn + c.qk_rope_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
      sh->head0 = int(h0), sh->head1 = int(h0 + nh);
      w.heads = int(nh);
      w.q_a = f.q_a, w.q_a_norm = f.q_a_norm, w.kv_a = f.kv_a, w.kv_a_norm = f.kv_a_norm;
      w.q = rows(f.q, h0 * qk, nh * qk);
      w.q_b = rows(f.q_b, h0 * qk, nh * qk);
      w.kv_b = rows(f.kv_b, h0 * (dn + dv), nh * (dn + dv));
      w.wuk_t = RowView(f.wuk_t, h0 * r, nh * r, f.wuk_t.name + tag);
      w.wuv = RowView(f.wuv, h0 * dv, nh * dv, f.wuv.name + tag);
      w.o = cols(f.o, h0 * dv, nh * dv);
    } else {
      const int64_t hd = c.head_dim, kn = f.kv_heads / n, k0 = kn * i,
                    per = f.heads / f.kv_heads;  // query heads per kv head
      sh->head0 = int(k0 * per), sh->head1 = int((k0 + kn) * per);
      w.heads = int(kn * per), w.kv_heads = int(kn);
      w.q = rows(f.q, k0 * per * hd, kn * per * hd);
      w.q_bias = rows(f.q_bias, k0 * per * hd, kn * per * hd);
      w.k = rows(f.K(), k0 * hd, kn * hd);
      w.v = rows(f.V(), k0 * hd, kn * hd);
      w.k_bias = rows(f.KBias(), k0 * hd, kn * hd);
      w.v_bias = rows(f.VBias(), k0 * hd, kn * hd);
      w.o = cols(f.o, k0 * per * hd, kn * per * hd);
    }
    w.o_bias = once(f.o_bias);
    if (!f.moe) {
      ffn(f.gate, f.up, f.down, f.gate_bias, f.up_bias, f.down_bias, &w, false);
      continue;
    }
    w.moe = true;
    w.router = f.router, w.router_bias = f.router_bias;
    if (f.sh_gate) ffn(f.sh_gate, f.sh_up, f.sh_down, nullptr, nullptr, nullptr, &w, true);
    w.experts.assign(f.experts.begin() + 3 * s.expert0, f.experts.begin() + 3 * s.expert1);
    w.expert0 = s.expert0;
    w.expert_range = s.expert1 - s.expert0 < c.n_routed_experts;
    ES_CHECK(w.sh_gate || !w.experts.empty(), "head split: layer ", l,
             " has no shared experts, so shard ", i, " needs routed experts (it holds none)");
  }
  return sh;
}

Graph ModelArch::BuildShardBlock(const ArchShard& sh, const Batch& batch, int layer,
                                 bool ffn) const {
  ES_CHECK(0 <= layer && layer < c_.n_layers, "head split: layer ", layer, " of the model's ",
           c_.n_layers);
  Graph g;
  const int T = batch.n_tokens();
  const int64_t D = c_.hidden_size;
  const LayerWeights& w = sh.layers[size_t(layer)];
  const std::string p = L(layer);
  const int x = InputRows(g, T, D, p + (ffn ? "ffn_input" : "attn_input"));
  const int res = sh.spec.index == 0 ? x : -1;  // the residual stream, added once
  if (!ffn) {
    const int hn = RmsNormNode(g, x, w.attn_norm, c_.rms_norm_eps, T, p + "input_layernorm");
    const int att = c_.is_mla() ? MlaBlock(g, hn, w, layer, p, batch)
                                : AttentionBlock(g, hn, w, layer, p, batch);
    if (res >= 0) Unary(g, Op::kAdd, {res, att}, {T, D}, p + "attn_residual");
    return g;
  }
  const int fn = RmsNormNode(g, x, w.ffn_norm, c_.rms_norm_eps, T, p + "post_attention_layernorm");
  const int out = MlpBlock(g, fn, res, w, layer, p, T);
  ES_ASSERT(out >= 0);  // MakeShard leaves every shard something in each FFN
  return g;
}

KvSpec ModelArch::ShardKvSpec(const ArchShard& sh, DType type) const {
  KvSpec k = c_.MakeKvSpec(type);
  if (!c_.is_mla())
    for (int& width : k.width) width /= sh.spec.count;
  return k;
}

}  // namespace es
