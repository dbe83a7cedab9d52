// Lifting an imported ONNX decoder into a ModelConfig + Hugging Face-named tensors
// (edgeseek/internal/models/onnx_lift.h). Sections: the known ops, weights (MatMul / Gemm /
// MatMulNBits / Gather / GatherBlockQuantized -> [N, K] tensors), rope tables -> inv_freq, the
// layer walk, the config.
#include "edgeseek/internal/models/onnx_lift.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numbers>
#include <set>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/mapped_file.h"
#include "edgeseek/internal/graph/passes/passes.h"
#include "edgeseek/internal/quant/nbits.h"

namespace es {
namespace {

using pattern::Through;

// ---- the known ops -----------------------------------------------------------------------------
// Everything a Llama/Qwen2 decoder export holds: the ops lifted, and the plumbing the walk
// ignores (masks, positions, shapes). Anything else fails before lifting.
bool KnownOp(const OpNode& n) {
  static const std::set<std::string> kOnnx = {"Add",
                                              "Sub",
                                              "Mul",
                                              "Div",
                                              "Pow",
                                              "Sqrt",
                                              "Reciprocal",
                                              "Neg",
                                              "ReduceMean",
                                              "ReduceSum",
                                              "ReduceMax",
                                              "Sigmoid",
                                              "Softmax",
                                              "MatMul",
                                              "Gemm",
                                              "Gather",
                                              "GatherND",  // dynamo: the padding mask's bits
                                              "Shape",
                                              "Reshape",
                                              "Transpose",
                                              "Unsqueeze",
                                              "Squeeze",
                                              "Concat",
                                              "Slice",
                                              "Split",
                                              "Cast",
                                              "CastLike",
                                              "Identity",
                                              "Expand",
                                              "Range",
                                              "Where",
                                              "Equal",
                                              "Less",
                                              "LessOrEqual",
                                              "Greater",
                                              "GreaterOrEqual",
                                              "And",
                                              "Or",
                                              "Not",
                                              "Trilu",
                                              "ConstantOfShape",
                                              "Cos",
                                              "Sin",
                                              "Max",
                                              "Min",
                                              "Abs",
                                              "IsNaN",
                                              "IsInf",
                                              "ScatterND",
                                              "CumSum",
                                              "Floor",
                                              "Ceil",
                                              "Mod",
                                              "Tile",
                                              "Clip",
                                              "Size",
                                              "Flatten",
                                              "SimplifiedLayerNormalization"};
  static const std::set<std::string> kMs = {
      "GroupQueryAttention",          "MatMulNBits",     "SkipSimplifiedLayerNormalization",
      "SimplifiedLayerNormalization", "RotaryEmbedding", "GatherBlockQuantized"};
  if (n.domain.empty()) return kOnnx.count(n.op) != 0;
  if (n.domain == "com.microsoft") return kMs.count(n.op) != 0;
  return false;
}

// ---- weights ----------------------------------------------------------------------------------
size_t DenseElemBytes(DType t) { return t == DType::kF32 ? 4 : 2; }

bool IsDenseFloat(const Tensor& t) {
  return t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16;
}

// [K, N] -> [N, K], same type (a copy: ONNX MatMul weights are stored transposed).
Tensor Transposed(const Tensor& w, const std::string& name) {
  const int64_t K = w.shape[0], N = w.shape[1];
  Tensor out = AllocTensor(name, w.dtype, {N, K});
  const size_t es = DenseElemBytes(w.dtype);
  const uint8_t* s = w.bytes();
  uint8_t* d = static_cast<uint8_t*>(MutableData(out));
  constexpr int64_t kT = 32;  // tiles keep both sides in cache
  for (int64_t k0 = 0; k0 < K; k0 += kT)
    for (int64_t n0 = 0; n0 < N; n0 += kT)
      for (int64_t k = k0; k < std::min(K, k0 + kT); ++k)
        for (int64_t n = n0; n < std::min(N, n0 + kT); ++n)
          std::memcpy(d + size_t(n * K + k) * es, s + size_t(k * N + n) * es, es);
  return out;
}

// Rows [r0, r0 + n) of a [N, K] tensor (a view sharing the owner).
Tensor RowsOf(const Tensor& w, int64_t r0, int64_t n, const std::string& name) {
  Tensor v;
  v.name = name;
  v.dtype = w.dtype;
  v.shape = {n, w.shape[1]};
  v.data = w.bytes() + size_t(r0) * w.row_bytes();
  v.nbytes = size_t(n) * w.row_bytes();
  v.owner = w.owner;
  return v;
}

struct Linear {
  std::string in;      // the activation input
  Tensor w;            // [N, K]
  Tensor bias;         // [N] or empty (data == nullptr)
  std::string source;  // the weight's source constant (ties, reuse)
  const OpNode* node = nullptr;
  bool has_bias() const { return bias.data != nullptr; }
};

// ---- rope -------------------------------------------------------------------------------------
// inv_freq from cos/sin tables [P, W] (W columns of distinct frequencies): the angle of each
// column at positions 1, 2, 4, ... unwrapped, so the estimate's error shrinks with P. c and s hold
// those rows only (row j = position 2^j, `stride` floats apart): a GenAI cos cache has a row per
// context position (tens of MB), of which log2(P) are read.
std::vector<double> InvFreqFromTables(const std::vector<float>& c, const std::vector<float>& s,
                                      int64_t P, int64_t stride, int64_t W) {
  std::vector<double> inv(static_cast<size_t>(W), 0.0);
  for (int64_t i = 0; i < W; ++i) {
    auto angle = [&](int64_t j) {
      return std::atan2(double(s[size_t(j * stride + i)]), double(c[size_t(j * stride + i)]));
    };
    double f = angle(0);
    int64_t j = 1;
    for (int64_t p = 2; p < P; p *= 2, ++j) {
      const double meas = angle(j), pred = double(p) * f;
      const double k = std::round((pred - meas) / (2 * std::numbers::pi));
      f = (meas + 2 * std::numbers::pi * k) / double(p);
    }
    inv[size_t(i)] = f;
  }
  return inv;
}

// Rows 1, 2, 4, ... (< P) of a dense [P, W] table as f32, one after the other.
std::vector<float> PowerOfTwoRows(const Tensor& t, int64_t P, int64_t W) {
  std::vector<float> out;
  const size_t row = RowBytes(t.dtype, W);
  for (int64_t p = 1; p < P; p *= 2) {
    out.resize(out.size() + size_t(W));
    ConvertRowToF32(t.dtype, t.bytes() + size_t(p) * row, out.data() + out.size() - size_t(W), W);
  }
  return out;
}

// transformers' default inv_freq (float32 arithmetic, as ModelConfig::MakeRope).
float DefaultInvFreq(double base, int i, int dim) {
  const float expo = float(2 * i) / float(dim);
  return 1.0f / float(std::pow(double(float(base)), double(expo)));
}

class Lifter {
 public:
  Lifter(OpGraph& g, std::string where) : g_(g), where_(std::move(where)) {}
  OnnxLifted Run();

 private:
  [[noreturn]] void FailAt(const OpNode* n, const std::string& what) const {
    if (n) Fail(where_, ": ", n->Where(), " does not fit a Llama/Qwen2 decoder: ", what);
    Fail(where_, ": ", what);
  }
  void Blame(const OpNode* n, const std::string& what) {
    if (n && !blame_) {
      blame_ = n;
      blame_what_ = what;
    }
  }
  const OpNode* Prod(const std::string& v) const { return g_.ProducerNode(Through(g_, v)); }
  std::string Layout(std::string v) const;
  bool MatchLinear(const std::string& v, Linear* out);
  Tensor DenseWeight(const std::string& v, const OpNode& user, bool transposed_source);
  Tensor NBits(const OpNode& n);
  bool MatchEmbedding(const std::string& v);
  struct Attn {
    Linear q, k, v, o;
    int heads = 0, kv_heads = 0, head_dim = 0;
    float scale = 0;
    bool interleaved = false;
    int rotary_dim = 0;  // RotaryEmbedding's rotary_embedding_dim (0: the whole head)
    const OpNode* rotary_node = nullptr;
    std::string cos, sin;      // rope tables (values) of the layer
    bool half_tables = false;  // [P, hd/2] (ORT) rather than [.., hd] (torch)
    std::string norm_w, residual;
    float eps = 0;
    const char* kind = "";
  };
  struct Mlp {
    Linear gate, up, down;
    std::string norm_w, residual;
    float eps = 0;
  };
  using Layers = std::vector<std::pair<Attn, Mlp>>;
  bool MatchMlp(const OpNode& add, Mlp* m);
  bool MatchAttn(const OpNode& add, Attn* a);
  bool AttnFromGqa(const OpNode& ga, Attn* a);
  bool AttnFromDecomposed(const OpNode& at, Attn* a);
  std::vector<double> InvFreq(const Attn& a);
  // Run's steps, in order.
  void CheckOps();
  const OpNode& MatchHead(Linear* head);
  Layers WalkLayers(const OpNode& final_norm);
  ModelConfig BaseConfig(const Layers& layers);
  void FindHeadDim(const Attn& a0, ModelConfig& c);
  void SetRope(const Attn& a0, ModelConfig& c);
  void LayerShapes(const Layers& layers, ModelConfig& c);
  void PutTensors(const Layers& layers, const OpNode& final_norm, const Linear& head,
                  OnnxLifted& out);
  void AddNotes(const std::vector<std::pair<std::string, int>>& passes, const Attn& a0,
                OnnxLifted& out) const;
  const Tensor& Const(const std::string& v, const OpNode& user, const char* what) const {
    const Tensor* t = g_.Constant(Through(g_, v));
    if (!t) FailAt(&user, std::string(what) + " '" + v + "' is not a constant");
    return *t;
  }

  OpGraph& g_;
  std::string where_;
  const OpNode* blame_ = nullptr;
  std::string blame_what_;
  std::map<std::string, Tensor> cache_;  // converted weights by source
  std::map<std::string, int> mapped_;    // "MatMulNBits -> Q4_0" counts
  std::set<std::string> f32_reasons_;
  // embedding
  Tensor embed_;
  std::string embed_source_;
  std::map<std::string, int> source_ops_;  // "domain.op" -> count, before the passes
};

std::string Lifter::Layout(std::string v) const {
  for (int guard = 0; guard < 64; ++guard) {
    const std::string t = Through(g_, v);
    const OpNode* p = g_.ProducerNode(t);
    if (!p) return t;
    if (p->Is("Reshape") || p->Is("Transpose") || p->Is("Unsqueeze") || p->Is("Squeeze") ||
        p->Is("Expand") || p->Is("Slice") || p->Is("Flatten")) {
      v = p->In(0);
      continue;
    }
    if (p->Is("Concat") && p->inputs.size() == 2) {  // past KV ++ new KV
      const bool past0 = g_.IsGraphInput(Through(g_, p->In(0))),
                 past1 = g_.IsGraphInput(Through(g_, p->In(1)));
      if (past0 != past1) {
        v = past0 ? p->In(1) : p->In(0);
        continue;
      }
    }
    return t;
  }
  return Through(g_, v);
}

Tensor Lifter::DenseWeight(const std::string& v, const OpNode& user, bool transposed_source) {
  const std::string src = Through(g_, v);
  const std::string key = src + (transposed_source ? "#T" : "");
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  const Tensor& w = Const(src, user, "weight");
  if (!IsDenseFloat(w) || w.shape.size() != 2)
    FailAt(&user, "weight '" + src + "' is not a 2-D float tensor");
  Tensor out;
  if (transposed_source) {
    out = Transposed(w, src);
    MappedFile::ReleasePages(w.data, w.nbytes);  // the copy is what runs (see NBits)
    mapped_[std::string("MatMul ") + std::string(Name(w.dtype)) + " (transposed copy)"]++;
  } else {
    out = w;
    mapped_[std::string("MatMul ") + std::string(Name(w.dtype)) + " (mapped)"]++;
  }
  return cache_[key] = out;
}

Tensor Lifter::NBits(const OpNode& n) {
  const std::string src = Through(g_, n.In(1));
  if (auto it = cache_.find(src); it != cache_.end()) return it->second;
  const bool gather = n.op == "GatherBlockQuantized";
  NBitsWeight w;
  w.name = src;
  w.bits = int(n.Int("bits", 4));
  w.block = int(n.Int("block_size", gather ? 128 : 32));
  const Tensor& q = Const(gather ? n.In(0) : n.In(1), n, "quantized data");
  const Tensor& sc = Const(gather ? n.In(2) : n.In(2), n, "scales");
  if (gather) {
    if (n.Int("gather_axis", 0) != 0 ||
        (n.Int("quantize_axis", 1) != 1 && n.Int("quantize_axis", 1) != -1))
      FailAt(&n, "only gather_axis 0 and quantize_axis 1 are supported");
    if (q.shape.size() != 2) FailAt(&n, "data must be 2-D");
    w.n = q.shape[0];
    w.k = q.shape[1] * 8 / w.bits;
  } else {
    w.n = n.Int("N", 0);
    w.k = n.Int("K", 0);
  }
  if (q.dtype != DType::kI8) FailAt(&n, "quantized data must be uint8");
  const int64_t blob = int64_t(w.block) * w.bits / 8;
  if (w.n <= 0 || w.k <= 0 || int64_t(q.nbytes) != w.n * w.blocks() * blob)
    FailAt(&n, "quantized data of " + std::to_string(q.nbytes) + " bytes does not hold N = " +
                   std::to_string(w.n) + " rows of K = " + std::to_string(w.k) + " at " +
                   std::to_string(w.bits) + " bits, block " + std::to_string(w.block));
  w.q = q.bytes();
  if (!IsDenseFloat(sc) || sc.numel() != w.n * w.blocks())
    FailAt(&n, "scales have the wrong type or size");
  w.scale_type = sc.dtype;
  w.scales = sc.data;
  const std::string zpv = n.In(3);
  if (!zpv.empty()) {
    const Tensor& zp = Const(zpv, n, "zero points");
    if (zp.dtype == DType::kI8) {
      if (int64_t(zp.nbytes) != w.n * ((w.blocks() * w.bits + 7) / 8))
        FailAt(&n, "zero points have the wrong size");
      w.zp_packed = zp.bytes();
    } else {
      if (zp.dtype != sc.dtype || zp.numel() != w.n * w.blocks())
        FailAt(&n, "float zero points have the wrong type or size");
      w.zp_float = zp.data;
    }
  }
  if (!gather && !n.In(4).empty()) {
    const Tensor& gi = Const(n.In(4), n, "g_idx");
    if (gi.dtype != DType::kI32 || gi.numel() != w.k) FailAt(&n, "g_idx must be int32 [K]");
    for (int64_t c = 0; c < w.k; ++c)
      if (gi.as<int32_t>()[c] < 0 || gi.as<int32_t>()[c] >= w.blocks())
        FailAt(&n, "g_idx names a block out of range");
    w.g_idx = gi.as<int32_t>();
  }
  std::string why;
  Tensor t = NBitsToTensor(w, &why);
  // The converted blocks are what runs: the source's pages of the mapped file need not stay in
  // this process's RSS (the import would otherwise hold both, ~2x the weights' bytes).
  MappedFile::ReleasePages(q.data, q.nbytes);
  MappedFile::ReleasePages(sc.data, sc.nbytes);
  if (!zpv.empty())
    MappedFile::ReleasePages(Const(zpv, n, "zero points").data,
                             Const(zpv, n, "zero points").nbytes);
  mapped_[n.op + " " + std::to_string(w.bits) + "-bit block " + std::to_string(w.block) + " -> " +
          std::string(Name(t.dtype))]++;
  if (!why.empty()) f32_reasons_.insert(why);
  return cache_[src] = t;
}

bool Lifter::MatchLinear(const std::string& v, Linear* out) {
  const OpNode* p = Prod(v);
  if (!p) {
    Blame(nullptr, "expected a linear layer");
    return false;
  }
  if (p->Is("Add")) {  // bias
    for (int side = 0; side < 2; ++side) {
      const Tensor* b = g_.Constant(Through(g_, p->In(size_t(side))));
      if (!b || b->shape.size() != 1) continue;
      if (!MatchLinear(p->In(size_t(1 - side)), out)) return false;
      if (out->has_bias() || b->shape[0] != out->w.shape[0]) return false;
      out->bias = *b;
      return true;
    }
    return false;
  }
  out->node = p;
  if (p->Is("MatMul")) {
    out->in = p->In(0);
    const std::string wv = Through(g_, p->In(1));
    if (const OpNode* tr = g_.ProducerNode(wv);
        tr && tr->Is("Transpose") && g_.Constant(Through(g_, tr->In(0)))) {
      out->source = Through(g_, tr->In(0));
      out->w = DenseWeight(out->source, *p, false);  // stored [N, K]: a view
      return true;
    }
    if (!g_.Constant(wv)) {
      Blame(p, "the MatMul's second input is not a constant weight");
      return false;
    }
    out->source = wv;
    out->w = DenseWeight(wv, *p, true);
    return true;
  }
  if (p->Is("Gemm")) {
    if (p->Float("alpha", 1) != 1 || p->Float("beta", 1) != 1 || p->Int("transA", 0) != 0) {
      Blame(p, "Gemm with alpha/beta/transA other than 1/1/0");
      return false;
    }
    out->in = p->In(0);
    out->source = Through(g_, p->In(1));
    out->w = DenseWeight(out->source, *p, p->Int("transB", 0) == 0);
    if (!p->In(2).empty()) out->bias = Const(p->In(2), *p, "Gemm bias");
    return true;
  }
  if (p->Is("MatMulNBits", "com.microsoft")) {
    out->in = p->In(0);
    out->source = Through(g_, p->In(1));
    out->w = NBits(*p);
    if (!p->In(5).empty()) out->bias = Const(p->In(5), *p, "MatMulNBits bias");
    return true;
  }
  Blame(p, "expected a linear layer (MatMul, Gemm or MatMulNBits)");
  return false;
}

bool Lifter::MatchEmbedding(const std::string& v) {
  const OpNode* p = Prod(v);
  if (!p) return false;
  if (p->Is("Gather") && p->Int("axis", 0) == 0 && g_.Constant(Through(g_, p->In(0)))) {
    embed_source_ = Through(g_, p->In(0));
    const Tensor& e = *g_.Constant(embed_source_);
    if (!IsDenseFloat(e) || e.shape.size() != 2)
      FailAt(p, "the embedding table is not a 2-D float tensor");
    embed_ = e;
    mapped_["Gather " + std::string(Name(e.dtype)) + " embedding (mapped)"]++;
    return true;
  }
  if (p->Is("GatherBlockQuantized", "com.microsoft")) {
    embed_source_ = Through(g_, p->In(0));
    embed_ = NBits(*p);
    return true;
  }
  return false;
}

bool Lifter::MatchMlp(const OpNode& add, Mlp* m) {
  return pattern::EitherOrder(add, [&](const std::string& r, const std::string& o) {
    Linear down;
    if (!MatchLinear(o, &down)) return false;
    blame_ = nullptr;  // this order got past the projection: its failure is the one to report
    const OpNode* sw = Prod(down.in);
    if (!sw || !sw->Is("SwiGLU", "es")) {
      Blame(sw, "expected the SwiGLU of the MLP (silu(gate) * up) before down_proj");
      return false;
    }
    Linear gate, up;
    if (!MatchLinear(sw->In(0), &gate) || !MatchLinear(sw->In(1), &up)) return false;
    const std::string h = Through(g_, gate.in);
    if (h != Through(g_, up.in)) {
      Blame(sw, "gate and up read different inputs");
      return false;
    }
    const OpNode* norm = g_.ProducerNode(h);
    if (!norm || !norm->Is("RmsNorm", "es") || Through(g_, norm->In(0)) != Through(g_, r)) {
      Blame(norm, "expected post_attention_layernorm (RMSNorm of the residual) before the MLP");
      return false;
    }
    m->gate = gate;
    m->up = up;
    m->down = down;
    m->norm_w = Through(g_, norm->In(1));
    m->eps = norm->Float("epsilon", 1e-6f);
    m->residual = r;
    return true;
  });
}

bool Lifter::AttnFromGqa(const OpNode& ga, Attn* a) {
  a->kind = "GroupQueryAttention";
  a->heads = int(ga.Int("num_heads", 0));
  a->kv_heads = int(ga.Int("kv_num_heads", 0));
  if (a->heads <= 0 || a->kv_heads <= 0) FailAt(&ga, "num_heads / kv_num_heads missing");
  if (ga.Int("local_window_size", -1) != -1)
    FailAt(&ga, "sliding-window attention is not supported");
  if (ga.Float("softcap", 0) != 0) FailAt(&ga, "softcap is not supported");
  a->scale = ga.Float("scale", 0);
  a->half_tables = true;
  std::string qv = ga.In(0), kv = ga.In(1), vv = ga.In(2);
  auto unrope = [&](std::string& v) {
    const OpNode* p = Prod(v);
    if (p && p->Is("RotaryEmbedding", "com.microsoft")) {
      a->rotary_dim = int(p->Int("rotary_embedding_dim", 0));
      a->rotary_node = p;
      a->interleaved = p->Int("interleaved", 0) != 0;
      a->cos = p->In(2);
      a->sin = p->In(3);
      v = p->In(0);
    }
  };
  if (ga.Int("do_rotary", 0) != 0) {
    a->interleaved = ga.Int("rotary_interleaved", 0) != 0;
    a->cos = ga.In(7);
    a->sin = ga.In(8);
    if (a->cos.empty() || a->sin.empty()) FailAt(&ga, "do_rotary without cos_cache / sin_cache");
  }
  if (kv.empty()) {  // packed q|k|v
    Linear qkv;
    if (!MatchLinear(qv, &qkv)) return false;
    const int64_t total = qkv.w.shape[0];
    const int64_t parts = a->heads + 2 * int64_t(a->kv_heads);
    if (total % parts != 0)
      FailAt(&ga, "packed QKV of " + std::to_string(total) + " rows for " + std::to_string(parts) +
                      " heads");
    a->head_dim = int(total / parts);
    const int64_t qn = int64_t(a->heads) * a->head_dim, kn = int64_t(a->kv_heads) * a->head_dim;
    auto part = [&](Linear* l, int64_t r0, int64_t n, const char* tag) {
      *l = qkv;
      l->w = RowsOf(qkv.w, r0, n, qkv.source + tag);
      if (qkv.has_bias()) {  // the bias's elements [r0, r0 + n)
        const size_t es = DenseElemBytes(qkv.bias.dtype);
        l->bias.shape = {n};
        l->bias.data = qkv.bias.bytes() + size_t(r0) * es;
        l->bias.nbytes = size_t(n) * es;
      }
    };
    part(&a->q, 0, qn, "#q");
    part(&a->k, qn, kn, "#k");
    part(&a->v, qn + kn, kn, "#v");
  } else {
    unrope(qv);
    unrope(kv);
    if (!MatchLinear(qv, &a->q) || !MatchLinear(kv, &a->k) || !MatchLinear(vv, &a->v)) return false;
    a->head_dim = int(a->q.w.shape[0] / a->heads);
  }
  if (a->cos.empty())
    FailAt(&ga, "no rotary embedding (neither do_rotary nor RotaryEmbedding on q and k)");
  // Partial rotary: RotaryEmbedding's rotary_embedding_dim, else the cos cache's width ([P, r/2];
  // GroupQueryAttention rotates the first r dims of each head).
  if (a->rotary_dim == 0)
    if (const Tensor* t = g_.Constant(Through(g_, a->cos)); t && t->shape.size() == 2)
      a->rotary_dim = int(t->shape[1] * 2);
  if (a->rotary_dim == a->head_dim) a->rotary_dim = 0;
  if (a->rotary_dim < 0 || a->rotary_dim > a->head_dim || a->rotary_dim % 2)
    FailAt(a->rotary_node ? a->rotary_node : &ga, "rotary dims " + std::to_string(a->rotary_dim) +
                                                      " do not fit heads of " +
                                                      std::to_string(a->head_dim));
  return true;
}

bool Lifter::AttnFromDecomposed(const OpNode& at, Attn* a) {
  a->kind = "decomposed attention";
  a->scale = at.Float("scale", 0);
  auto roped = [&](const std::string& v, Linear* l, bool want_rope) {
    std::string x = Layout(v);
    if (want_rope) {
      // Partial rotary (transformers: cat(rope(x[..., :r]), x[..., r:])): the rope of a Slice of
      // the head's first r dims, concatenated with the rest of it.
      if (const OpNode* cat = g_.ProducerNode(x);
          cat && cat->Is("Concat") && cat->inputs.size() == 2 &&
          (cat->Int("axis", 0) == -1 || cat->Int("axis", 0) == 3)) {
        const OpNode* r = g_.ProducerNode(Through(g_, cat->In(0)));
        const OpNode* rs =
            r && r->Is("Rope", "es") ? g_.ProducerNode(Through(g_, r->In(0))) : nullptr;
        const OpNode* ps = g_.ProducerNode(Through(g_, cat->In(1)));
        const auto r_end = rs && rs->Is("Slice") ? g_.IntValues(rs->In(2)) : std::nullopt;
        const auto p_start = ps && ps->Is("Slice") ? g_.IntValues(ps->In(1)) : std::nullopt;
        if (r_end && p_start && r_end->size() == 1 && p_start->size() == 1 &&
            (*r_end)[0] == (*p_start)[0] && Through(g_, rs->In(0)) == Through(g_, ps->In(0))) {
          const int rot = int((*r_end)[0]);
          if (a->rotary_dim != 0 && a->rotary_dim != rot) {
            Blame(cat, "q and k rotate different numbers of dims");
            return false;
          }
          a->rotary_dim = rot;
          if (a->cos.empty()) {
            a->cos = r->In(1);
            a->sin = r->In(2);
          }
          return MatchLinear(Layout(rs->In(0)), l);
        }
      }
      const OpNode* r = g_.ProducerNode(x);
      if (!r || !r->Is("Rope", "es")) {
        Blame(r ? r : &at, "expected rotary embedding (x * cos + rotate_half(x) * sin) on q and k");
        return false;
      }
      if (a->cos.empty()) {
        a->cos = r->In(1);
        a->sin = r->In(2);
      }
      x = Layout(r->In(0));
    }
    return MatchLinear(x, l);
  };
  return roped(at.In(0), &a->q, true) && roped(at.In(1), &a->k, true) &&
         roped(at.In(2), &a->v, false);
}

bool Lifter::MatchAttn(const OpNode& add, Attn* a) {
  return pattern::EitherOrder(add, [&](const std::string& r, const std::string& o) {
    Attn t;
    if (!MatchLinear(o, &t.o)) return false;
    blame_ = nullptr;  // this order got past o_proj: its failure is the one to report
    const OpNode* core = g_.ProducerNode(Layout(t.o.in));
    if (core && core->Is("GroupQueryAttention", "com.microsoft")) {
      if (!AttnFromGqa(*core, &t)) return false;
    } else if (core && core->Is("Attention", "es")) {
      if (!AttnFromDecomposed(*core, &t)) return false;
    } else {
      Blame(core, "expected attention (GroupQueryAttention, or Softmax(q kᵀ) v) before o_proj");
      return false;
    }
    const std::string h = Through(g_, t.q.in);
    if (h != Through(g_, t.k.in) || h != Through(g_, t.v.in)) {
      Blame(core, "q, k and v projections read different inputs");
      return false;
    }
    const OpNode* norm = g_.ProducerNode(h);
    if (!norm || !norm->Is("RmsNorm", "es") || Through(g_, norm->In(0)) != Through(g_, r)) {
      Blame(norm, "expected input_layernorm (RMSNorm of the residual) before attention");
      return false;
    }
    t.norm_w = Through(g_, norm->In(1));
    t.eps = norm->Float("epsilon", 1e-6f);
    t.residual = r;
    *a = std::move(t);
    return true;
  });
}

// inv_freq of a layer's rope: a constant inv_freq vector among the tables' ancestors (torch
// exports compute cos/sin from it), else estimated from constant cos/sin tables.
std::vector<double> Lifter::InvFreq(const Attn& a) {
  auto ancestors = [&](const std::string& v) {
    std::vector<std::string> consts, todo{v};
    std::set<std::string> seen;
    while (!todo.empty() && seen.size() < 400) {
      const std::string x = todo.back();
      todo.pop_back();
      if (!seen.insert(x).second) continue;
      if (g_.Constant(x)) consts.push_back(x);
      if (const OpNode* p = g_.ProducerNode(x))
        for (const std::string& in : p->inputs)
          if (!in.empty()) todo.push_back(in);
    }
    return consts;
  };
  const std::vector<std::string> cc = ancestors(a.cos), sc = ancestors(a.sin);
  const int64_t rot = a.rotary_dim ? a.rotary_dim : a.head_dim;
  for (const std::string& name : cc) {  // an inv_freq vector: positive, <= 1, non-increasing
    const Tensor& t = *g_.Constant(name);
    if (!IsDenseFloat(t) || t.numel() < 2 || t.numel() * 2 != rot) continue;
    const std::vector<float> f = ToF32(t);
    bool ok = true;
    for (size_t i = 0; i < f.size() && ok; ++i)
      ok = f[i] > 0 && f[i] <= 1.0f + 1e-6f && (i == 0 || f[i] <= f[i - 1]);
    if (ok) return std::vector<double>(f.begin(), f.end());
  }
  for (const std::string& cn : cc) {  // cos/sin tables [P, W]
    const Tensor& ct = *g_.Constant(cn);
    if (!IsDenseFloat(ct) || ct.shape.size() < 2) continue;
    for (const std::string& sn : sc) {
      const Tensor& st = *g_.Constant(sn);
      if (st.shape != ct.shape || !IsDenseFloat(st)) continue;
      const int64_t W = ct.shape.back(), P = ct.numel() / W;
      if (P < 2) continue;
      int64_t distinct = W;
      if (W == rot) distinct = W / 2;  // torch layout: cat(freqs, freqs)
      if (distinct * 2 != rot) continue;
      const std::vector<double> inv =
          InvFreqFromTables(PowerOfTwoRows(ct, P, W), PowerOfTwoRows(st, P, W), P, W, distinct);
      MappedFile::ReleasePages(ct.data, ct.nbytes);  // not used at run time
      MappedFile::ReleasePages(st.data, st.nbytes);
      return inv;
    }
  }
  const OpNode* at = g_.ProducerNode(Through(g_, a.cos));
  FailAt(at,
         "cannot find the rotary frequencies (no inv_freq constant or constant cos/sin tables "
         "behind '" +
             a.cos + "')");
}

// Every node's op must be one the lift knows (else one error naming it); counts them for inspect.
void Lifter::CheckOps() {
  for (const OpNode& n : g_.nodes)
    if (!KnownOp(n)) Fail(where_, ": ", n.Where(), " is not supported by edgeseek's ONNX import");
  for (const OpNode& n : g_.nodes) source_ops_[(n.domain.empty() ? "" : n.domain + ".") + n.op]++;
}

// The logits output as lm_head(norm(x)): fills `head`, returns the final RMSNorm.
const OpNode& Lifter::MatchHead(Linear* head) {
  std::string logits;
  for (const OpValueInfo& o : g_.outputs)
    if (o.name == "logits") logits = o.name;
  if (logits.empty() && !g_.outputs.empty()) logits = g_.outputs[0].name;
  if (logits.empty()) Fail(where_, ": the graph has no outputs");
  if (!MatchLinear(logits, head))
    FailAt(blame_ ? blame_ : Prod(logits), "the logits output '" + logits +
                                               "' is not lm_head(norm(x))" +
                                               (blame_ ? " (" + blame_what_ + ")" : ""));
  // (transformers' logits_to_keep slices the rows before lm_head: a layout op to look through)
  const OpNode* final_norm = g_.ProducerNode(Layout(head->in));
  if (!final_norm || !final_norm->Is("RmsNorm", "es"))
    FailAt(final_norm, "expected the final RMSNorm before lm_head");
  return *final_norm;
}

// The decoder layers from the final norm's input back to the embedding, first layer first.
Lifter::Layers Lifter::WalkLayers(const OpNode& final_norm) {
  Layers layers;
  std::string x = final_norm.In(0);
  for (int guard = 0; guard < 100000; ++guard) {
    if (MatchEmbedding(x)) break;
    const OpNode* add = Prod(x);
    if (!add || !add->Is("Add"))
      FailAt(add, "expected the residual Add of a decoder layer or the token embedding (Gather)");
    blame_ = nullptr;
    Mlp m;
    if (!MatchMlp(*add, &m))
      FailAt(blame_ ? blame_ : add,
             "MLP block: " + (blame_ ? blame_what_
                                     : "expected x + down_proj(silu(gate_proj(h)) * up_proj(h))"));
    const OpNode* add2 = Prod(m.residual);
    if (!add2 || !add2->Is("Add")) FailAt(add2, "expected the residual Add after attention");
    blame_ = nullptr;
    Attn a;
    if (!MatchAttn(*add2, &a))
      FailAt(
          blame_ ? blame_ : add2,
          "attention block: " + (blame_ ? blame_what_ : "expected x + o_proj(attention(q, k, v))"));
    x = a.residual;
    layers.emplace_back(std::move(a), std::move(m));
  }
  std::reverse(layers.begin(), layers.end());
  if (layers.empty())
    Fail(where_, ": no decoder layers found between the embedding and the logits");
  return layers;
}

// head_dim and n_heads of a decomposed graph (GroupQueryAttention states them): with partial
// rotary (the rope narrower than the head) the static last dim of the past key inputs, else the
// candidate head size whose rope tables or inv_freq constant fit layer 0's.
void Lifter::FindHeadDim(const Attn& a0, ModelConfig& c) {
  if (c.head_dim == 0 && a0.rotary_dim != 0) {
    for (const OpValueInfo& in : g_.inputs)
      if (in.name.find("past") != std::string::npos && in.dims.size() == 4 && in.dims[3].size > 0) {
        c.head_dim = int(in.dims[3].size);
        break;
      }
    if (c.head_dim == 0)
      FailAt(g_.ProducerNode(Through(g_, a0.cos)),
             "partial rotary: cannot tell the head size (no past key input with a static last "
             "dim)");
    c.n_heads = int(a0.q.w.shape[0] / c.head_dim);
  }
  if (c.head_dim != 0) return;
  int hd = 0;
  // inv_freq constant or table width: try candidate head dims dividing q and k widths.
  const int64_t qn = a0.q.w.shape[0], kn = a0.k.w.shape[0];
  for (int cand : {256, 192, 160, 128, 112, 96, 80, 64, 48, 32, 16, 8}) {
    if (qn % cand || kn % cand) continue;
    Attn probe = a0;
    probe.head_dim = cand;
    try {
      (void)InvFreq(probe);
      hd = cand;
      break;
    } catch (const Error&) {
    }
  }
  if (hd == 0)
    FailAt(g_.ProducerNode(Through(g_, a0.cos)),
           "cannot tell the head size from the rotary tables");
  c.head_dim = hd;
  c.n_heads = int(qn / hd);
}

// rope_theta and, where the default formula does not give layer 0's frequencies, per-frequency
// factors.
void Lifter::SetRope(const Attn& a0, ModelConfig& c) {
  const int rot = c.rope_dim();
  Attn a0h = a0;
  a0h.head_dim = c.head_dim;
  const std::vector<double> inv = InvFreq(a0h);
  if (int(inv.size()) * 2 != rot)
    Fail(where_, ": rotary frequencies cover ", inv.size() * 2, " of ", rot, " rotated dims");
  // theta from the second frequency (unscaled in llama3 / linear-free layouts), rounded to 3
  // significant digits; what it does not explain becomes per-frequency factors.
  double theta = inv.size() > 1 ? std::pow(inv[1], -double(rot) / 2.0) : 10000.0;
  if (!(theta > 1) || !std::isfinite(theta)) theta = 10000.0;
  const double mag = std::pow(10.0, std::floor(std::log10(theta)) - 2);
  theta = std::round(theta / mag) * mag;
  c.rope_theta = theta;
  bool exact = true;
  std::vector<float> factors(inv.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    const double d = DefaultInvFreq(theta, int(i), rot);
    factors[i] = float(d / inv[i]);
    if (std::fabs(d - inv[i]) > 2e-6 * d) exact = false;
  }
  if (!exact) c.rope_freq_factors = factors;
}

// The config from layer 0 and the embedding (head size, rope included).
ModelConfig Lifter::BaseConfig(const Layers& layers) {
  ModelConfig c;
  const Attn& a0 = layers[0].first;
  const Mlp& m0 = layers[0].second;
  c.vocab_size = embed_.shape[0];
  c.hidden_size = embed_.shape[1];
  c.n_layers = int(layers.size());
  c.n_heads = a0.heads;
  c.head_dim = a0.head_dim;
  c.intermediate_size = m0.gate.w.shape[0];
  c.rms_norm_eps = a0.eps;
  c.rope_interleaved = a0.interleaved;
  c.attention_bias = a0.q.has_bias();
  c.attention_out_bias = a0.o.has_bias();
  c.arch = c.attention_bias ? Arch::kQwen2 : Arch::kLlama;
  c.dtype = IsQuantized(embed_.dtype) ? DType::kF32 : embed_.dtype;
  FindHeadDim(a0, c);
  c.n_kv_heads = int(a0.k.w.shape[0] / c.head_dim);
  c.rotary_dim = a0.rotary_dim;
  ES_CHECK(c.rotary_dim >= 0 && c.rotary_dim < c.head_dim && c.rotary_dim % 2 == 0, where_,
           ": rotary dims ", c.rotary_dim, " do not fit heads of ", c.head_dim);
  SetRope(a0, c);
  c.mlp_bias = m0.gate.has_bias();
  if (const auto ctx = g_.Constant(Through(g_, a0.cos)); ctx && ctx->shape.size() == 2)
    c.max_position_embeddings = ctx->shape[0];
  return c;
}

// Each layer checked against layer 0, and its own widths (a pruned export: heads, kv heads, FFN
// channels per layer); the config's scalars become the widest layer's.
void Lifter::LayerShapes(const Layers& layers, ModelConfig& c) {
  const float want_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  std::vector<int> heads, kv_heads;
  std::vector<int64_t> ffn;
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& [a, m] = layers[l];
    const std::string L = "layer " + std::to_string(l) + ": ";
    const int hd = a.heads ? a.head_dim : c.head_dim;
    const int H = a.heads ? a.heads : int(a.q.w.shape[0] / c.head_dim);
    const int64_t kn = a.k.w.shape[0];
    ES_CHECK(hd == c.head_dim, where_, ": ", L, "head size ", hd, " differs from layer 0's ",
             c.head_dim);
    ES_CHECK(a.q.w.shape[0] == int64_t(H) * hd && kn % hd == 0 && a.v.w.shape[0] == kn &&
                 H % (kn / hd) == 0,
             where_, ": ", L, "q/k/v projections of ", a.q.w.shape[0], "/", kn, "/", a.v.w.shape[0],
             " rows do not make whole heads of ", hd, " (", H,
             " query heads a multiple of the kv heads)");
    ES_CHECK(a.o.w.shape[1] == a.q.w.shape[0] && m.up.w.shape[0] == m.gate.w.shape[0] &&
                 m.down.w.shape[1] == m.gate.w.shape[0],
             where_, ": ", L, "o_proj / up_proj / down_proj widths disagree with q / gate");
    heads.push_back(H);
    kv_heads.push_back(int(kn / hd));
    ffn.push_back(m.gate.w.shape[0]);
    ES_CHECK(a.rotary_dim == c.rotary_dim, where_, ": ", L, "rotates ",
             a.rotary_dim ? a.rotary_dim : hd, " dims of each head, layer 0 ", c.rope_dim());
    ES_CHECK(a.q.has_bias() == c.attention_bias && a.k.has_bias() == c.attention_bias &&
                 a.v.has_bias() == c.attention_bias && a.o.has_bias() == c.attention_out_bias,
             where_, ": ", L, "q/k/v/o biases differ from layer 0's");
    ES_CHECK(m.gate.has_bias() == c.mlp_bias && m.up.has_bias() == c.mlp_bias &&
                 m.down.has_bias() == c.mlp_bias,
             where_, ": ", L, "MLP biases (gate/up/down) differ from layer 0's gate_proj");
    const float s = a.scale == 0 ? want_scale : a.scale;
    ES_CHECK(std::fabs(s - want_scale) <= 1e-5f * want_scale, where_, ": ", L, "attention scale ",
             s, " is not 1/sqrt(head_dim) = ", want_scale);
    ES_CHECK(std::fabs(a.eps - c.rms_norm_eps) <= 1e-3f * c.rms_norm_eps &&
                 std::fabs(m.eps - c.rms_norm_eps) <= 1e-3f * c.rms_norm_eps,
             where_, ": ", L, "RMSNorm epsilon differs from layer 0's");
    ES_CHECK(a.interleaved == c.rope_interleaved, where_, ": ", L,
             "rotary layout differs from layer 0's");
  }
  c.n_heads = *std::max_element(heads.begin(), heads.end());
  c.n_kv_heads = *std::max_element(kv_heads.begin(), kv_heads.end());
  c.intermediate_size = *std::max_element(ffn.begin(), ffn.end());
  auto uniform = [](const auto& v) {
    return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
  };
  if (!uniform(heads)) c.layer_heads = heads;
  if (!uniform(kv_heads)) c.layer_kv_heads = kv_heads;
  if (!uniform(ffn)) c.layer_intermediate = ffn;
}

// The weights under their Hugging Face names into out.tensors; ties the head when it reads the
// embedding's table.
void Lifter::PutTensors(const Layers& layers, const OpNode& final_norm, const Linear& head,
                        OnnxLifted& out) {
  ModelConfig& c = out.config;
  auto put = [&](const std::string& name, Tensor t) {
    // Small tensors (norm weights, biases) are copied out of the mapped file: the kernel maps a
    // file's large folios as whole 2 MiB pages, so a 6 KB norm read every token would keep 2 MiB
    // of the file resident (~100 MB over a 1.5B model's layers). Large ones stay views.
    constexpr size_t kCopyBelow = size_t(1) << 20;
    if (t.data && t.nbytes > 0 && t.nbytes < kCopyBelow) {
      Tensor copy = AllocTensor(name, t.dtype, t.shape);
      std::memcpy(MutableData(copy), t.data, t.nbytes);
      MappedFile::ReleasePages(t.data, t.nbytes);
      t = std::move(copy);
    }
    t.name = name;
    out.tensors[name] = std::move(t);
  };
  auto put_norm = [&](const std::string& name, const std::string& src) {
    const Tensor* t = g_.Constant(src);
    ES_CHECK(t && t->shape == Shape{c.hidden_size}, where_, ": norm weight '", src, "' is not [",
             c.hidden_size, "]");
    put(name, *t);
  };
  put("model.embed_tokens.weight", embed_);
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& [a, m] = layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    put_norm(p + "input_layernorm.weight", a.norm_w);
    put_norm(p + "post_attention_layernorm.weight", m.norm_w);
    const std::pair<const char*, const Linear*> lin[] = {
        {"self_attn.q_proj", &a.q}, {"self_attn.k_proj", &a.k}, {"self_attn.v_proj", &a.v},
        {"self_attn.o_proj", &a.o}, {"mlp.gate_proj", &m.gate}, {"mlp.up_proj", &m.up},
        {"mlp.down_proj", &m.down}};
    for (const auto& [n, li] : lin) {
      put(p + n + ".weight", li->w);
      if (li->has_bias()) put(p + n + ".bias", li->bias);
    }
  }
  put_norm("model.norm.weight", Through(g_, final_norm.In(1)));
  c.tie_word_embeddings = head.source == embed_source_ && !head.has_bias();
  if (!c.tie_word_embeddings) {
    ES_CHECK(!head.has_bias(), where_, ": lm_head with a bias is not supported");
    put("lm_head.weight", head.w);
  } else if (head.w.dtype != embed_.dtype) {
    // A tied table stored once quantized for the head and once for the gather: keep both.
    c.tie_word_embeddings = false;
    put("lm_head.weight", head.w);
  }
}

// Notes for `inspect`: source ops, inputs with their dynamic axes, passes, what was lifted, how
// the weights were mapped.
void Lifter::AddNotes(const std::vector<std::pair<std::string, int>>& passes, const Attn& a0,
                      OnnxLifted& out) const {
  const ModelConfig& c = out.config;
  std::ostringstream ops;
  int shown = 0;
  for (const auto& [op, n] : source_ops_) ops << (shown++ ? ", " : "") << n << " " << op;
  out.notes.push_back("source ops: " + ops.str());
  // The graph's inputs with their dynamic axes (symbols), the first few.
  std::ostringstream ins;
  for (size_t i = 0; i < g_.inputs.size() && i < 4; ++i) {
    ins << (i ? ", " : "") << g_.inputs[i].name << " [";
    for (size_t d = 0; d < g_.inputs[i].dims.size(); ++d) {
      const OpDim& dim = g_.inputs[i].dims[d];
      ins << (d ? ", " : "")
          << (dim.size >= 0        ? std::to_string(dim.size)
              : dim.symbol.empty() ? "?"
                                   : dim.symbol);
    }
    ins << "]";
  }
  if (g_.inputs.size() > 4) ins << " and " << g_.inputs.size() - 4 << " more";
  out.notes.push_back("inputs: " + ins.str());
  std::ostringstream ps;
  for (size_t i = 0; i < passes.size(); ++i)
    ps << (i ? ", " : "") << passes[i].first << " " << passes[i].second;
  out.notes.push_back("passes: " + ps.str());
  out.notes.push_back(
      std::string("lifted: ") + ArchName(c.arch) + ", " + std::to_string(c.n_layers) +
      " layers, attention from " + a0.kind + (c.rope_interleaved ? " (interleaved rope)" : "") +
      (c.rope_freq_factors.empty() ? "" : ", rope with per-frequency factors") +
      (c.rotary_dim ? ", partial rotary (" + std::to_string(c.rotary_dim) + " of " +
                          std::to_string(c.head_dim) + " dims)"
                    : "") +
      (c.per_layer_shapes() ? ", per-layer shapes" : "") + (c.mlp_bias ? ", MLP biases" : "") +
      ", rope_theta " + std::to_string(int64_t(c.rope_theta)));
  for (const auto& [k, n] : mapped_)
    out.notes.push_back("weights: " + std::to_string(n) + " x " + k);
  for (const std::string& r : f32_reasons_)
    out.notes.push_back("dequantized to f32 (exact) because " + r);
}

OnnxLifted Lifter::Run() {
  CheckOps();
  const auto passes = RunPasses(g_, ImportPasses());
  Linear head;
  const OpNode& final_norm = MatchHead(&head);
  const Layers layers = WalkLayers(final_norm);
  OnnxLifted out;
  out.config = BaseConfig(layers);
  LayerShapes(layers, out.config);
  PutTensors(layers, final_norm, head, out);
  out.config.Validate(where_);
  AddNotes(passes, layers[0].first, out);
  return out;
}

}  // namespace

OnnxLifted LiftOnnxDecoder(OpGraph g, const std::string& where) {
  Lifter l(g, where);
  return l.Run();
}

}  // namespace es
