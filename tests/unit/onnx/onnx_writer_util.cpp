// Test ONNX files from tiny Hugging Face checkpoints (onnx_writer_util.h), written with the
// generated protobuf classes of libonnx-dev.
#include "onnx_writer_util.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::test {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

class Builder {
 public:
  explicit Builder(bool external) : external_(external) {
    model_.set_ir_version(8);
    model_.set_producer_name("edgeseek-test");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(17);
    auto* ms = model_.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
    g_ = model_.mutable_graph();
    g_->set_name("main");
  }

  std::string Init(const std::string& name, int type, const std::vector<int64_t>& dims,
                   const void* data, size_t n) {
    TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    if (external_ && n >= 64) {
      t->set_data_location(TensorProto::EXTERNAL);
      auto kv = [&](const char* k, const std::string& v) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      kv("location", "model.onnx.data");
      kv("offset", std::to_string(ext_.size()));
      kv("length", std::to_string(n));
      ext_.append(static_cast<const char*>(data), n);
    } else {
      t->set_raw_data(data, n);
    }
    return name;
  }
  std::string F32(const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<float>& v) {
    return Init(name, TensorProto::FLOAT, dims, v.data(), v.size() * 4);
  }
  std::string F16(const std::string& name, const std::vector<int64_t>& dims,
                  const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToF16(v[i]);
    return Init(name, TensorProto::FLOAT16, dims, h.data(), h.size() * 2);
  }
  std::string I64(const std::string& name, const std::vector<int64_t>& v, bool scalar = false) {
    return Init(name, TensorProto::INT64,
                scalar ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(v.size())}, v.data(),
                v.size() * 8);
  }
  std::string Scalar(const std::string& name, float x) {
    return Init(name, TensorProto::FLOAT, {}, &x, 4);
  }

  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& domain = "") {
    onnx::NodeProto* n = g_->add_node();
    n->set_name("/" + op + "_" + std::to_string(g_->node_size()));
    n->set_op_type(op);
    if (!domain.empty()) n->set_domain(domain);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  // One-output node; returns its output name.
  std::string Op(const std::string& op, const std::vector<std::string>& in,
                 const std::string& domain = "") {
    const std::string out = "v" + std::to_string(next_++);
    Node(op, in, {out}, domain);
    return out;
  }
  static void AttrI(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void AttrF(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void AttrInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  onnx::NodeProto* Last() { return g_->mutable_node(g_->node_size() - 1); }
  std::string OpA(const std::string& op, const std::vector<std::string>& in,
                  const std::function<void(onnx::NodeProto*)>& attrs,
                  const std::string& domain = "") {
    const std::string o = Op(op, in, domain);
    attrs(Last());
    return o;
  }

  void Value(bool input, const std::string& name, int type, const std::vector<std::string>& dims) {
    onnx::ValueInfoProto* v = input ? g_->add_input() : g_->add_output();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    for (const std::string& d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0])))
        dim->set_dim_value(std::stoll(d));
      else
        dim->set_dim_param(d);
    }
  }

  void Save(const std::string& dir, const std::string& replace_op, const std::string& with_op) {
    if (!replace_op.empty())
      for (int i = 0; i < g_->node_size(); ++i)
        if (g_->node(i).op_type() == replace_op) {
          g_->mutable_node(i)->set_op_type(with_op);
          break;
        }
    std::ofstream f(dir + "/model.onnx", std::ios::binary);
    ES_CHECK(model_.SerializeToOstream(&f), "cannot write ", dir, "/model.onnx");
    if (external_) {
      std::ofstream e(dir + "/model.onnx.data", std::ios::binary);
      e.write(ext_.data(), std::streamsize(ext_.size()));
    }
  }

 private:
  bool external_;
  onnx::ModelProto model_;
  onnx::GraphProto* g_;
  std::string ext_;
  int next_ = 0;
};

std::vector<float> TransposeKN(const std::vector<float>& w, int64_t N,
                               int64_t K) {  // [N,K] -> [K,N]
  std::vector<float> t(w.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) t[size_t(k * N + n)] = w[size_t(n * K + k)];
  return t;
}

// Q4_0 rows of w [N, K] in onnxruntime's 4-bit layout: data [N, K/32, 16], f32 scales [N, K/32],
// and the dequantized values.
struct Q4Rows {
  std::vector<uint8_t> q;
  std::vector<float> scales, deq;
};
Q4Rows QuantizeQ4(const std::vector<float>& w, int64_t N, int64_t K) {
  Q4Rows r;
  const int64_t nb = K / kQK;
  std::vector<BlockQ4_0> blocks(static_cast<size_t>(nb));
  r.q.resize(size_t(N * nb * 16));
  r.scales.resize(size_t(N * nb));
  r.deq.resize(size_t(N * K));
  for (int64_t n = 0; n < N; ++n) {
    Quantize(DType::kQ4_0, w.data() + n * K, blocks.data(), K);
    Dequantize(DType::kQ4_0, blocks.data(), r.deq.data() + n * K, K);
    for (int64_t b = 0; b < nb; ++b) {
      r.scales[size_t(n * nb + b)] = F16ToF32(blocks[size_t(b)].d);
      uint8_t* dst = r.q.data() + (n * nb + b) * 16;
      int q[32];
      for (int j = 0; j < 16; ++j) {
        q[j] = blocks[size_t(b)].qs[j] & 0xF;
        q[j + 16] = blocks[size_t(b)].qs[j] >> 4;
      }
      for (int j = 0; j < 16; ++j) dst[j] = uint8_t(q[2 * j] | q[2 * j + 1] << 4);
    }
  }
  return r;
}

// The float mask [B, 1, S, T] as torch.onnx's dynamo exporter writes transformers' causal +
// padding mask: causal = kv_idx <= q_idx from Ranges over the past and total lengths, the
// padding bits picked by GatherND(attention_mask, (batch, kv_idx) pairs), And, then
// Where(mask, 0, -FLT_MAX). `shape(v, start, end)` is Shape with start/end attributes.
template <typename ShapeFn>
std::string DynamoMask(Builder& b, const ShapeFn& shape) {
  auto sq = [&](const std::string& v) { return b.Op("Squeeze", {v}); };
  auto unsq = [&](const std::string& v, const std::string& axes) {
    return b.Op("Unsqueeze", {v, axes});
  };
  const std::string zero = b.I64("dyn_zero", {0}, true), one = b.I64("dyn_one", {1}, true);
  const std::string ax0 = b.I64("dyn_ax0", {0}), ax1 = b.I64("dyn_ax1", {1}),
                    axm1 = b.I64("dyn_axm1", {-1}), ax01 = b.I64("dyn_ax01", {0, 1}),
                    ax12 = b.I64("dyn_ax12", {1, 2});
  const std::string seq = sq(shape("input_ids", 1, 2)), bsz = sq(shape("input_ids", 0, 1));
  const std::string past = sq(shape("past_key_values.0.key", 2, 3));
  const std::string total = sq(shape("attention_mask", 1, 2));
  const std::string kv_idx = b.Op("Range", {zero, total, one});                           // [T]
  const std::string q_idx = b.Op("Add", {b.Op("Range", {zero, seq, one}), past});         // [S]
  const std::string causal = b.Op("LessOrEqual", {unsq(kv_idx, ax0), unsq(q_idx, ax1)});  // [S, T]
  const std::string bi = unsq(b.Op("Range", {zero, bsz, one}), ax1);                      // [B, 1]
  const std::string kj = unsq(kv_idx, ax0);                                               // [1, T]
  const std::string bt = b.OpA("Shape", {b.Op("Max", {bi, kj})},
                               [](onnx::NodeProto* n) { Builder::AttrI(n, "start", 0); });
  const std::string idx =
      b.OpA("Concat", {unsq(b.Op("Expand", {bi, bt}), axm1), unsq(b.Op("Expand", {kj, bt}), axm1)},
            [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", -1); });  // [B, T, 2]
  const std::string am = b.OpA("Cast", {"attention_mask"}, [](onnx::NodeProto* n) {
    Builder::AttrI(n, "to", TensorProto::BOOL);
  });
  const std::string pad = b.OpA("GatherND", {am, idx}, [](onnx::NodeProto* n) {
    Builder::AttrI(n, "batch_dims", 0);
  });  // [B, T]
  const std::string m = b.Op("And", {unsq(causal, ax01), unsq(pad, ax12)});
  return b.Op("Where", {m, b.Scalar("dyn_zero_f", 0.0f),
                        b.Scalar("dyn_min_f", -std::numeric_limits<float>::max())});
}

}  // namespace

void WriteOnnxFromHf(const std::string& hf_dir, const std::string& out_dir,
                     const OnnxWriteOptions& o) {
  fs::create_directories(out_dir);
  const ModelConfig c = LoadHfConfig(hf_dir + "/config.json");
  const auto st = SafetensorsSet::Open(hf_dir);
  auto W = [&](const std::string& n) { return ToF32(st->Get(n)); };
  // Heads and FFN width are per layer (pruned checkpoints: lists in config.json); the rope turns
  // the first `rot` dims of each head (partial_rotary_factor).
  const int64_t D = c.hidden_size, V = c.vocab_size, hd = c.head_dim, rot = c.rope_dim();
  int64_t H = c.n_heads, Hkv = c.n_kv_heads, I = c.intermediate_size;
  const int64_t P = c.max_position_embeddings;
  Builder b(o.external_data);
  const bool genai = o.style == OnnxStyle::kGenAi;
  const bool dynamo = o.style == OnnxStyle::kDynamo;

  // Linear layer y = x Wᵀ (+ bias) in the chosen form.
  auto linear = [&](const std::string& x, const std::string& name, int64_t N, int64_t K,
                    bool quantizable) {
    const std::vector<float> w = W(name + ".weight");
    std::string y;
    if (o.int4 && quantizable) {
      const Q4Rows q = QuantizeQ4(w, N, K);
      const std::string B =
          b.Init(name + ".qweight", TensorProto::UINT8, {N, K / 32, 16}, q.q.data(), q.q.size());
      const std::string S = b.F32(name + ".scales", {N * (K / 32)}, q.scales);
      std::vector<std::string> in = {x, B, S};
      if (o.explicit_zero_points) {
        const int64_t zb = (K / 32 + 1) / 2;
        std::vector<uint8_t> zp(size_t(N * zb), 0x88);
        in.push_back(b.Init(name + ".qzeros", TensorProto::UINT8, {N * zb}, zp.data(), zp.size()));
      }
      y = b.OpA(
          "MatMulNBits", in,
          [&](onnx::NodeProto* n) {
            Builder::AttrI(n, "K", K);
            Builder::AttrI(n, "N", N);
            Builder::AttrI(n, "bits", 4);
            Builder::AttrI(n, "block_size", 32);
            Builder::AttrI(n, "accuracy_level", 4);
          },
          "com.microsoft");
    } else {
      const std::vector<float> t = TransposeKN(w, N, K);
      const std::string wn = "onnx::MatMul_" + name;
      y = b.Op("MatMul", {x, o.f16 ? b.F16(wn, {K, N}, t) : b.F32(wn, {K, N}, t)});
      if (o.f16)
        y = b.OpA("Cast", {y},
                  [](onnx::NodeProto* n) { Builder::AttrI(n, "to", TensorProto::FLOAT); });
    }
    if (const Tensor* bias = st->Find(name + ".bias"))
      y = b.Op("Add", {y, b.F32(name + ".bias", {N}, ToF32(*bias))});
    return y;
  };
  auto norm_w = [&](const std::string& name) { return b.F32(name, {D}, W(name)); };

  // Inputs.
  b.Value(true, "input_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
  b.Value(true, "attention_mask", TensorProto::INT64, {"batch_size", "total_sequence_length"});
  if (!genai || o.rotary_nodes)
    b.Value(true, "position_ids", TensorProto::INT64, {"batch_size", "sequence_length"});
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* kv : {"key", "value"})
      b.Value(true, "past_key_values." + std::to_string(l) + "." + kv, TensorProto::FLOAT,
              {"batch_size", std::to_string(c.KvHeadsOf(l)), "past_sequence_length",
               std::to_string(hd)});

  // Embedding.
  std::string x;
  const std::vector<float> emb = W("model.embed_tokens.weight");
  if (o.int4_embedding || o.dequantized_embedding) {
    const Q4Rows q = QuantizeQ4(emb, V, D);
    if (o.int4_embedding) {
      const std::string data =
          b.Init("embed.qdata", TensorProto::UINT8, {V, D / 2}, q.q.data(), q.q.size());
      const std::string sc = b.F32("embed.scales", {V, D / 32}, q.scales);
      x = b.OpA(
          "GatherBlockQuantized", {data, "input_ids", sc},
          [](onnx::NodeProto* n) {
            Builder::AttrI(n, "gather_axis", 0);
            Builder::AttrI(n, "quantize_axis", 1);
            Builder::AttrI(n, "block_size", 32);
            Builder::AttrI(n, "bits", 4);
          },
          "com.microsoft");
    } else {
      x = b.Op("Gather", {b.F32("model.embed_tokens.weight", {V, D}, q.deq), "input_ids"});
    }
  } else {
    x = b.Op("Gather", {b.F32("model.embed_tokens.weight", {V, D}, emb), "input_ids"});
  }

  const RopeTable rope = c.MakeRope();
  const float eps = c.rms_norm_eps;
  std::string seqlens, total, cos_cache, sin_cache, cos4, sin4, mask4;
  if (genai) {
    // Mask plumbing as the builder writes it (ignored by the lift).
    const std::string rs = b.OpA("ReduceSum", {"attention_mask", b.I64("axes1", {1})},
                                 [](onnx::NodeProto* n) { Builder::AttrI(n, "keepdims", 0); });
    seqlens = b.OpA("Cast", {b.Op("Sub", {rs, b.I64("one", {1}, true)})},
                    [](onnx::NodeProto* n) { Builder::AttrI(n, "to", TensorProto::INT32); });
    total = b.OpA("Cast",
                  {b.Op("Gather", {b.Op("Shape", {"attention_mask"}), b.I64("idx1", {1}, true)})},
                  [](onnx::NodeProto* n) { Builder::AttrI(n, "to", TensorProto::INT32); });
    std::vector<float> cc(size_t(P * rot / 2)), sc(cc.size());
    for (int64_t p = 0; p < P; ++p)
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double a = double(float(p) * rope.inv_freq[size_t(i)]);
        cc[size_t(p * rot / 2 + i)] = float(std::cos(a));
        sc[size_t(p * rot / 2 + i)] = float(std::sin(a));
      }
    cos_cache = b.F32("cos_cache", {P, rot / 2}, cc);
    sin_cache = b.F32("sin_cache", {P, rot / 2}, sc);
  } else {
    // cos/sin from inv_freq and position_ids, as transformers' rotary embedding exports.
    // TorchScript keeps inv_freq [hd/2] and unsqueezes it; dynamo folds that into a [1, hd/2, 1]
    // constant and expands it to the batch.
    const std::vector<float> inv(rope.inv_freq.begin(), rope.inv_freq.end());
    auto shape = [&](const std::string& v, int64_t start, int64_t end) {  // [end - start] dims
      return b.OpA("Shape", {v}, [&](onnx::NodeProto* n) {
        Builder::AttrI(n, "start", start);
        Builder::AttrI(n, "end", end);
      });
    };
    const std::string inv3 =
        dynamo
            ? b.Op("Expand",
                   {b.F32("unsqueeze_13", {1, rot / 2, 1}, inv),
                    b.OpA("Concat",
                          {shape("position_ids", 0, 1), b.I64("one_d", {1}), b.I64("one_e", {1})},
                          [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", 0); })})
            : b.Op("Unsqueeze", {b.F32("model.rotary_emb.inv_freq", {rot / 2}, inv),
                                 b.I64("axes02", {0, 2})});  // [1, hd/2, 1]
    const std::string pos =
        b.OpA("Cast", {b.Op("Unsqueeze", {"position_ids", b.I64("axes1b", {1})})},
              [](onnx::NodeProto* n) { Builder::AttrI(n, "to", TensorProto::FLOAT); });
    const std::string fr =
        b.OpA("Transpose", {b.Op("MatMul", {inv3, pos})}, [](onnx::NodeProto* n) {
          Builder::AttrInts(n, "perm", {0, 2, 1});
        });
    const std::string em =
        b.OpA("Concat", {fr, fr}, [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", -1); });
    cos4 = b.Op("Unsqueeze", {b.Op("Cos", {em}), b.I64("axes1c", {1})});
    sin4 = b.Op("Unsqueeze", {b.Op("Sin", {em}), b.I64("axes1d", {1})});
    if (dynamo) {
      mask4 = DynamoMask(b, shape);
    } else {
      const std::string am = b.OpA("Cast", {"attention_mask"}, [](onnx::NodeProto* n) {
        Builder::AttrI(n, "to", TensorProto::FLOAT);
      });
      mask4 = b.Op(
          "Unsqueeze",
          {b.Op("Mul", {b.Op("Sub", {b.Scalar("onef", 1.0f), am}), b.Scalar("neg_big", -1e9f)}),
           b.I64("axes12", {1, 2})});
    }
  }
  auto rms = [&](const std::string& in, const std::string& w) {
    const std::string sq = b.Op("Pow", {in, b.Scalar("two_" + w, 2.0f)});
    const std::string mean = b.OpA("ReduceMean", {sq}, [](onnx::NodeProto* n) {
      Builder::AttrInts(n, "axes", {-1});
      Builder::AttrI(n, "keepdims", 1);
    });
    const std::string r =
        b.Op("Reciprocal", {b.Op("Sqrt", {b.Op("Add", {mean, b.Scalar("eps_" + w, eps)})})});
    return b.Op("Mul", {norm_w(w), b.Op("Mul", {in, r})});
  };
  auto heads = [&](const std::string& v, int64_t h) {  // [b, s, h*hd] -> [b, h, s, hd]
    const std::string r = b.Op("Reshape", {v, b.I64("shape_" + v, {0, 0, h, hd})});
    return b.OpA("Transpose", {r}, [](onnx::NodeProto* n) {
      Builder::AttrInts(n, "perm", {0, 2, 1, 3});
    });
  };
  const int64_t last = dynamo ? 3 : -1;  // the Slices' axis: dynamo writes it as 3
  auto rope4 = [&](const std::string& v_in) {
    // Partial rotary as transformers writes it: cat(rope(x[..., :rot]), x[..., rot:]).
    const std::string v =
        rot == hd ? v_in
                  : b.Op("Slice", {v_in, b.I64("rs_" + v_in, {0}), b.I64("re_" + v_in, {rot}),
                                   b.I64("ra_" + v_in, {last})});
    const std::string x1 = b.Op(
        "Slice", {v, b.I64("s0_" + v, {0}), b.I64("e0_" + v, {rot / 2}), b.I64("a0_" + v, {last})});
    const std::string x2 = b.Op("Slice", {v, b.I64("s1_" + v, {rot / 2}),
                                          b.I64("e1_" + v, {INT64_MAX}), b.I64("a1_" + v, {last})});
    const std::string rh = b.OpA("Concat", {b.Op("Neg", {x2}), x1},
                                 [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", -1); });
    const std::string r = b.Op("Add", {b.Op("Mul", {v, cos4}), b.Op("Mul", {rh, sin4})});
    if (rot == hd) return r;
    const std::string pass =
        b.Op("Slice", {v_in, b.I64("ps_" + v_in, {rot}), b.I64("pe_" + v_in, {INT64_MAX}),
                       b.I64("pa_" + v_in, {last})});
    return b.OpA("Concat", {r, pass}, [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", -1); });
  };
  auto repeat = [&](const std::string& v) {
    if (H == Hkv) return v;
    const std::string u = b.Op("Unsqueeze", {v, b.I64("ax2_" + v, {2})});
    const std::string e = b.Op("Expand", {u, b.I64("rep_" + v, {1, 1, H / Hkv, 1, 1})});
    return b.Op("Reshape", {e, b.I64("rs_" + v, {0, H, -1, hd})});
  };

  std::string residual = x, h, pending;  // pending: the MLP output not yet added (GenAi)
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string L = std::to_string(l);
    H = c.HeadsOf(l);
    Hkv = c.KvHeadsOf(l);
    I = c.IntermediateOf(l);
    // input norm
    if (genai) {
      if (l == 0) {
        h = b.OpA("SimplifiedLayerNormalization", {residual, norm_w(p + "input_layernorm.weight")},
                  [&](onnx::NodeProto* n) {
                    Builder::AttrI(n, "axis", -1);
                    Builder::AttrF(n, "epsilon", eps);
                  });
      } else {
        const std::string hn = "h_" + L, sum = "sum_in_" + L;
        onnx::NodeProto* n = b.Node("SkipSimplifiedLayerNormalization",
                                    {pending, residual, norm_w(p + "input_layernorm.weight")},
                                    {hn, "", "", sum}, "com.microsoft");
        Builder::AttrF(n, "epsilon", eps);
        h = hn;
        residual = sum;
      }
    } else {
      h = rms(residual, p + "input_layernorm.weight");
    }
    // attention
    std::string attn;
    if (genai) {
      std::string q, k, v;
      if (o.packed_qkv) {
        // one MatMul over [q; k; v] rows
        std::vector<float> w = W(p + "self_attn.q_proj.weight");
        for (const char* n : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
          const std::vector<float> t = W(p + n);
          w.insert(w.end(), t.begin(), t.end());
        }
        const int64_t N = (H + 2 * Hkv) * hd;
        q = b.Op("MatMul", {h, b.F32("qkv_" + L, {D, N}, TransposeKN(w, N, D))});
        if (st->Find(p + "self_attn.q_proj.bias")) {
          std::vector<float> bias = W(p + "self_attn.q_proj.bias");
          for (const char* n : {"self_attn.k_proj.bias", "self_attn.v_proj.bias"}) {
            const std::vector<float> t = W(p + n);
            bias.insert(bias.end(), t.begin(), t.end());
          }
          q = b.Op("Add", {q, b.F32("qkv_bias_" + L, {N}, bias)});
        }
      } else {
        q = linear(h, p + "self_attn.q_proj", H * hd, D, true);
        k = linear(h, p + "self_attn.k_proj", Hkv * hd, D, true);
        v = linear(h, p + "self_attn.v_proj", Hkv * hd, D, true);
        if (o.rotary_nodes) {
          auto rotary = [&](const std::string& t, int64_t heads) {
            return b.OpA(
                "RotaryEmbedding", {t, "position_ids", cos_cache, sin_cache},
                [&](onnx::NodeProto* n) {
                  Builder::AttrI(n, "interleaved", 0);
                  Builder::AttrI(n, "num_heads", heads);
                  if (rot != hd) Builder::AttrI(n, "rotary_embedding_dim", rot);
                },
                "com.microsoft");
          };
          q = rotary(q, H);
          k = rotary(k, Hkv);
        }
      }
      attn = "attn_" + L;
      onnx::NodeProto* n =
          b.Node("GroupQueryAttention",
                 {q, k, v, "past_key_values." + L + ".key", "past_key_values." + L + ".value",
                  seqlens, total, cos_cache, sin_cache},
                 {attn, "present." + L + ".key", "present." + L + ".value"}, "com.microsoft");
      Builder::AttrI(n, "num_heads", H);
      Builder::AttrI(n, "kv_num_heads", Hkv);
      Builder::AttrI(n, "do_rotary", o.rotary_nodes ? 0 : 1);
      Builder::AttrI(n, "rotary_interleaved", 0);
    } else {
      const std::string q = rope4(heads(linear(h, p + "self_attn.q_proj", H * hd, D, true), H));
      const std::string k = rope4(heads(linear(h, p + "self_attn.k_proj", Hkv * hd, D, true), Hkv));
      const std::string v = heads(linear(h, p + "self_attn.v_proj", Hkv * hd, D, true), Hkv);
      const std::string kc = "present." + L + ".key", vc = "present." + L + ".value";
      b.Node("Concat", {"past_key_values." + L + ".key", k}, {kc});
      Builder::AttrI(b.Last(), "axis", 2);
      b.Node("Concat", {"past_key_values." + L + ".value", v}, {vc});
      Builder::AttrI(b.Last(), "axis", 2);
      const std::string kt = b.OpA("Transpose", {repeat(kc)}, [](onnx::NodeProto* n) {
        Builder::AttrInts(n, "perm", {0, 1, 3, 2});
      });
      const std::string s = b.Op(
          "Mul",
          {b.Op("MatMul", {q, kt}), b.Scalar("scale_" + L, float(1.0 / std::sqrt(double(hd))))});
      const std::string pr = b.OpA("Softmax", {b.Op("Add", {s, mask4})},
                                   [](onnx::NodeProto* n) { Builder::AttrI(n, "axis", -1); });
      const std::string ctx =
          b.OpA("Transpose", {b.Op("MatMul", {pr, repeat(vc)})}, [](onnx::NodeProto* n) {
            Builder::AttrInts(n, "perm", {0, 2, 1, 3});
          });
      attn = b.Op("Reshape", {ctx, b.I64("ctx_shape_" + L, {0, 0, H * hd})});
    }
    const std::string o_out = linear(attn, p + "self_attn.o_proj", D, H * hd, true);
    // post-attention norm + residual
    std::string h2;
    if (genai) {
      const std::string hn = "h2_" + L, sum = "sum_mid_" + L;
      onnx::NodeProto* n = b.Node("SkipSimplifiedLayerNormalization",
                                  {o_out, residual, norm_w(p + "post_attention_layernorm.weight")},
                                  {hn, "", "", sum}, "com.microsoft");
      Builder::AttrF(n, "epsilon", eps);
      h2 = hn;
      residual = sum;
    } else {
      residual = b.Op("Add", {residual, o_out});
      h2 = rms(residual, p + "post_attention_layernorm.weight");
    }
    // MLP
    const std::string g = linear(h2, p + "mlp.gate_proj", I, D, true);
    const std::string silu = b.Op("Mul", {g, b.Op("Sigmoid", {g})});
    const std::string u = linear(h2, p + "mlp.up_proj", I, D, true);
    const std::string d = linear(b.Op("Mul", {silu, u}), p + "mlp.down_proj", D, I, true);
    if (genai) {
      pending = d;
    } else {
      residual = b.Op("Add", {residual, d});
    }
  }
  std::string hf;
  if (genai) {
    hf = "h_final";
    onnx::NodeProto* n =
        b.Node("SkipSimplifiedLayerNormalization", {pending, residual, norm_w("model.norm.weight")},
               {hf, "", "", ""}, "com.microsoft");
    Builder::AttrF(n, "epsilon", eps);
  } else {
    hf = rms(residual, "model.norm.weight");
  }
  std::string logits;
  if (c.tie_word_embeddings) {
    logits = b.Op("MatMul",
                  {hf, b.OpA("Transpose", {"model.embed_tokens.weight"}, [](onnx::NodeProto* n) {
                     Builder::AttrInts(n, "perm", {1, 0});
                   })});
  } else {
    logits = linear(hf, "lm_head", V, D, true);
  }
  b.Node("Identity", {logits}, {"logits"});
  b.Value(false, "logits", TensorProto::FLOAT,
          {"batch_size", "sequence_length", std::to_string(V)});
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* kv : {"key", "value"})
      b.Value(false, "present." + std::to_string(l) + "." + kv, TensorProto::FLOAT,
              {"batch_size", std::to_string(c.KvHeadsOf(l)), "total_sequence_length",
               std::to_string(hd)});
  b.Save(out_dir, o.replace_op, o.with_op);

  if (genai && o.genai_config) {
    nlohmann::json j;
    j["model"]["bos_token_id"] = c.bos_token_id;
    j["model"]["context_length"] = P;
    j["model"]["eos_token_id"] = c.eos_token_ids;
    j["model"]["type"] = c.arch == Arch::kQwen2 ? "qwen2" : "llama";
    j["model"]["decoder"] = {{"filename", "model.onnx"},
                             {"head_size", hd},
                             {"hidden_size", D},
                             {"num_attention_heads", c.n_heads},
                             {"num_hidden_layers", c.n_layers},
                             {"num_key_value_heads", c.n_kv_heads}};
    std::ofstream(out_dir + "/genai_config.json") << j.dump(2);
  }
}

}  // namespace es::test
