// Per-layer shapes (a pruned checkpoint: fewer heads, kv heads or FFN channels in some layers),
// partial rotary (rope on the first part of each head) and MLP biases, end to end:
//  - the Hugging Face folder against a plain forward written here from the transformers modeling
//    code's math (scalar loops, double accumulation), which knows nothing of edgeseek's graph;
//  - the folder written as ONNX (both styles, onnx_writer_util.h), imported, against the folder;
//  - the same on the Vulkan backend (lavapipe in CI).
// The variants are cut from the tiny qwen2_tied golden checkpoint (GQA 4:2, q/k/v biases, tied
// embeddings): rows and columns of its tensors dropped, biases added.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "onnx_logits_util.h"
#include "onnx_writer_util.h"
#include "test_util.h"

namespace es::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Golden(const std::string& v) { return SourceDir() + "/tests/golden/data/models/" + v; }

// ---- the plain reference -----------------------------------------------------------------------
// Logits [T, V] of a prefill of `ids` at positions 0..T-1 for a Llama/Qwen2 folder (default rope).
std::vector<float> PlainLogits(const std::string& dir, const std::vector<int32_t>& ids) {
  const ModelConfig c = LoadHfConfig(dir + "/config.json");
  const auto st = SafetensorsSet::Open(dir);
  auto W = [&](const std::string& n) { return ToF32(st->Get(n)); };
  const int64_t T = int64_t(ids.size()), D = c.hidden_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t rot = c.rotary_dim ? c.rotary_dim : hd;
  EXPECT_EQ(c.rope.type, "default");
  // y [T, N] = x [T, K] Wᵀ (+ b)
  auto linear = [&](const std::vector<double>& x, const std::string& name, int64_t K) {
    const std::vector<float> w = W(name + ".weight");
    const int64_t N = int64_t(w.size()) / K;
    const Tensor* bt = st->Find(name + ".bias");
    const std::vector<float> b = bt ? ToF32(*bt) : std::vector<float>();
    std::vector<double> y(size_t(T * N));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double s = b.empty() ? 0.0 : b[size_t(n)];
        for (int64_t k = 0; k < K; ++k) s += x[size_t(t * K + k)] * w[size_t(n * K + k)];
        y[size_t(t * N + n)] = s;
      }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::string& name) {
    const std::vector<float> w = W(name);
    std::vector<double> y(x.size());
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += x[size_t(t * D + d)] * x[size_t(t * D + d)];
      const double r = 1.0 / std::sqrt(ss / double(D) + c.rms_norm_eps);
      for (int64_t d = 0; d < D; ++d)
        y[size_t(t * D + d)] = x[size_t(t * D + d)] * r * w[size_t(d)];
    }
    return y;
  };
  // transformers: inv_freq = 1 / base^(arange(0, rot, 2) / rot) in float32; rotate_half on the
  // first rot dims of each head, the rest passed through.
  auto rope = [&](std::vector<double>& x, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < rot / 2; ++i) {
          const float inv = 1.0f / float(std::pow(double(float(c.rope_theta)),
                                                  double(float(2 * i) / float(rot))));
          const double a = double(float(t) * inv);
          double* v = x.data() + (t * heads + h) * hd;
          const double x0 = v[i], x1 = v[i + rot / 2];
          v[i] = x0 * std::cos(a) - x1 * std::sin(a);
          v[i + rot / 2] = x1 * std::cos(a) + x0 * std::sin(a);
        }
  };
  const std::vector<float> emb = W("model.embed_tokens.weight");
  std::vector<double> x(size_t(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) x[size_t(t * D + d)] = emb[size_t(ids[size_t(t)] * D + d)];
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t H = c.HeadsOf(l), Hkv = c.KvHeadsOf(l), I = c.IntermediateOf(l);
    std::vector<double> h = rms(x, p + "input_layernorm.weight");
    std::vector<double> q = linear(h, p + "self_attn.q_proj", D),
                        k = linear(h, p + "self_attn.k_proj", D),
                        v = linear(h, p + "self_attn.v_proj", D);
    rope(q, H);
    rope(k, Hkv);
    std::vector<double> att(size_t(T * H * hd), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t kvh = hh / (H / Hkv);
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += q[size_t((t * H + hh) * hd + d)] * k[size_t((j * Hkv + kvh) * hd + d)];
          s[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hd; ++d)
            att[size_t((t * H + hh) * hd + d)] +=
                s[size_t(j)] / sum * v[size_t((j * Hkv + kvh) * hd + d)];
      }
    const std::vector<double> o = linear(att, p + "self_attn.o_proj", H * hd);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = rms(x, p + "post_attention_layernorm.weight");
    const std::vector<double> g = linear(h, p + "mlp.gate_proj", D),
                              u = linear(h, p + "mlp.up_proj", D);
    std::vector<double> a(g.size());
    for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const std::vector<double> dn = linear(a, p + "mlp.down_proj", I);
    for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
  }
  const std::vector<double> hf = rms(x, "model.norm.weight");
  const std::vector<double> logits =
      linear(hf, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head", D);
  EXPECT_EQ(int64_t(logits.size()), T * V);
  return std::vector<float>(logits.begin(), logits.end());
}

// ---- variants of a golden checkpoint -----------------------------------------------------------
struct Variant {
  std::string name;
  // Per layer: the query heads kept (indices of the source's heads; whole kv groups or the same
  // number from each group), and the FFN channels kept (empty: all).
  std::vector<std::vector<int>> heads;
  std::vector<int> ffn;  // per layer: keep the first N channels (0: all)
  double partial_rotary = 1.0;
  bool mlp_bias = false;
  // Layers written with one kv head per query head (the GQA layer as the MHA layer it equals, its
  // k/v heads duplicated): wider than the others, whose kv heads the cache then repeats.
  std::vector<int> mha_layers = {};
};

// Writes the variant of the golden folder `src` to `dir` (config.json + model.safetensors).
void WriteVariant(const std::string& src, const std::string& dir, const Variant& v) {
  fs::create_directories(dir);
  json j = json::parse(ReadFile(src + "/config.json"));
  const ModelConfig c = LoadHfConfig(src + "/config.json");
  const auto st = SafetensorsSet::Open(src);
  const int64_t D = c.hidden_size, hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  std::vector<Tensor> out;
  auto put = [&](const std::string& name, Shape shape, const std::vector<float>& vals) {
    Tensor t = AllocTensor(name, DType::kF32, std::move(shape));
    std::memcpy(MutableData(t), vals.data(), vals.size() * 4);
    out.push_back(std::move(t));
  };
  // rows of a [N, K] (or [N]) tensor, by index
  auto rows = [&](const std::string& name, const std::vector<int64_t>& keep) {
    const Tensor& t = st->Get(name);
    const std::vector<float> f = ToF32(t);
    const int64_t K = t.shape.size() == 2 ? t.shape[1] : 1;
    std::vector<float> r;
    for (int64_t i : keep) r.insert(r.end(), f.begin() + i * K, f.begin() + (i + 1) * K);
    put(name, t.shape.size() == 2 ? Shape{int64_t(keep.size()), K} : Shape{int64_t(keep.size())},
        r);
  };
  auto cols = [&](const std::string& name, const std::vector<int64_t>& keep) {
    const Tensor& t = st->Get(name);
    const std::vector<float> f = ToF32(t);
    const int64_t N = t.shape[0], K = t.shape[1];
    std::vector<float> r;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i : keep) r.push_back(f[size_t(n * K + i)]);
    put(name, {N, int64_t(keep.size())}, r);
  };
  auto head_rows = [&](const std::vector<int>& hs) {
    std::vector<int64_t> r;
    for (int h : hs)
      for (int64_t d = 0; d < hd; ++d) r.push_back(h * hd + d);
    return r;
  };
  auto iota = [](int64_t n) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < n; ++i) r.push_back(i);
    return r;
  };
  json lh = json::array(), lkv = json::array(), li = json::array();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<int> qh = v.heads.empty() ? std::vector<int>() : v.heads[size_t(l)];
    if (qh.empty())
      for (int h = 0; h < c.n_heads; ++h) qh.push_back(h);
    std::vector<int> kvh;  // the kv heads the kept query heads read, in order
    const bool mha = std::count(v.mha_layers.begin(), v.mha_layers.end(), l) != 0;
    for (int h : qh)
      if (mha || kvh.empty() || kvh.back() != h / group) kvh.push_back(int(h / group));
    const int64_t I =
        v.ffn.empty() || v.ffn[size_t(l)] == 0 ? c.intermediate_size : v.ffn[size_t(l)];
    lh.push_back(qh.size());
    lkv.push_back(kvh.size());
    li.push_back(I);
    rows(p + "self_attn.q_proj.weight", head_rows(qh));
    rows(p + "self_attn.k_proj.weight", head_rows(kvh));
    rows(p + "self_attn.v_proj.weight", head_rows(kvh));
    if (st->Find(p + "self_attn.q_proj.bias")) {
      rows(p + "self_attn.q_proj.bias", head_rows(qh));
      rows(p + "self_attn.k_proj.bias", head_rows(kvh));
      rows(p + "self_attn.v_proj.bias", head_rows(kvh));
    }
    cols(p + "self_attn.o_proj.weight", head_rows(qh));
    rows(p + "mlp.gate_proj.weight", iota(I));
    rows(p + "mlp.up_proj.weight", iota(I));
    cols(p + "mlp.down_proj.weight", iota(I));
    if (v.mlp_bias) {
      put(p + "mlp.gate_proj.bias", {I}, RandomFloats(size_t(I), 100 + l, 0.5f));
      put(p + "mlp.up_proj.bias", {I}, RandomFloats(size_t(I), 200 + l, 0.5f));
      put(p + "mlp.down_proj.bias", {D}, RandomFloats(size_t(D), 300 + l, 0.5f));
    }
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"})
      rows(p + n, iota(D));
  }
  rows("model.embed_tokens.weight", iota(c.vocab_size));
  rows("model.norm.weight", iota(D));
  if (!c.tie_word_embeddings) rows("lm_head.weight", iota(c.vocab_size));
  if (!v.heads.empty() || !v.mha_layers.empty()) {
    j["num_attention_heads"] = lh;
    j["num_key_value_heads"] = lkv;
    j["head_dim"] = hd;
  }
  if (!v.ffn.empty()) j["intermediate_size"] = li;
  if (v.partial_rotary != 1.0) j["partial_rotary_factor"] = v.partial_rotary;
  if (v.mlp_bias) j["mlp_bias"] = true;
  std::ofstream(dir + "/config.json") << j.dump(2);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : out) ptrs.push_back(&t);
  WriteSafetensors(dir + "/model.safetensors", ptrs);
}

// qwen2_tied: 4 heads in 2 kv groups of 2, head_dim 32, FFN 224, 2 layers.
const Variant kPruned{"pruned", {{0, 1}, {0, 2}}, {160, 0}};  // a whole kv group; one per group
const Variant kPartial{"partial_rotary", {}, {}, 0.5};
const Variant kMlpBias{"mlp_bias", {}, {}, 1.0, true};
const Variant kAll{"all_three", {{2, 3}, {1, 0, 3, 2}}, {96, 200}, 0.25, true};
// layer 0 with 4 kv heads, layer 1 with its 2 (each repeated twice in the cache)
const Variant kRepeat{"kv_repeat", {}, {}, 1.0, false, {0}};

std::vector<int32_t> Ids() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back(int32_t((1 + 37 * i) % 384));
  return ids;
}

// Logits of a prefill of `ids` (every row), then of one decode step after it.
std::vector<float> Logits(const std::shared_ptr<Model>& m, const std::string& backend = "cpu") {
  // An f32 cache: a GPU's default f16 is 3e-4 off the plain reference here.
  return PrefillThenStepLogits(m, Ids(), backend, DType::kF32);
}

// max |a - b| over the first min(|a|, |b|) elements, relative to max |b| (at least 1).
double Diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, mx = 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    mx = std::max(mx, double(std::fabs(b[i])));
  }
  return d / mx;
}

// (heads, kv heads, FFN width) of every layer
std::vector<int64_t> LayerShapes(const ModelConfig& c) {
  std::vector<int64_t> v;
  for (int l = 0; l < c.n_layers; ++l)
    v.insert(v.end(), {c.HeadsOf(l), c.KvHeadsOf(l), c.IntermediateOf(l)});
  return v;
}

class OnnxShapes : public ::testing::TestWithParam<Variant> {};

TEST_P(OnnxShapes, FolderMatchesThePlainReference) {
  const Variant& v = GetParam();
  const std::string dir = TempDir() + "/" + v.name;
  WriteVariant(Golden("qwen2_tied"), dir, v);
  const auto m = Model::Load(dir);
  // The prefill rows (the decode step's continuation is checked against the ONNX import below).
  const std::vector<float> got = Logits(m), want = PlainLogits(dir, Ids());
  ASSERT_GT(got.size(), want.size());
  EXPECT_LE(Diff(got, want), 1e-4) << v.name;
}

TEST_P(OnnxShapes, ImportedOnnxMatchesTheFolder) {
  const Variant& v = GetParam();
  const std::string dir = TempDir() + "/" + v.name;
  WriteVariant(Golden("qwen2_tied"), dir, v);
  const auto ref = Model::Load(dir);
  const std::vector<float> want = Logits(ref);
  for (OnnxStyle s : {OnnxStyle::kGenAi, OnnxStyle::kTorch, OnnxStyle::kDynamo}) {
    for (bool rotary_nodes : {false, true}) {
      if (s != OnnxStyle::kGenAi && rotary_nodes) continue;
      OnnxWriteOptions o;
      o.style = s;
      o.rotary_nodes = rotary_nodes;
      const std::string od = dir +
                             (s == OnnxStyle::kGenAi   ? "_genai"
                              : s == OnnxStyle::kTorch ? "_torch"
                                                       : "_dynamo") +
                             (rotary_nodes ? "_rotary" : "");
      WriteOnnxFromHf(dir, od, o);
      const auto m = Model::Load(od);
      const ModelConfig& c = m->config();
      EXPECT_EQ(LayerShapes(c), LayerShapes(ref->config())) << od;
      EXPECT_EQ(c.rotary_dim, ref->config().rotary_dim) << od;
      EXPECT_EQ(c.mlp_bias, ref->config().mlp_bias) << od;
      EXPECT_LE(Diff(Logits(m), want), 1e-5) << od;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, OnnxShapes,
                         ::testing::Values(kPruned, kPartial, kMlpBias, kAll, kRepeat),
                         [](const auto& i) { return i.param.name; });

TEST(OnnxShapesVulkan, ImportedAndFolderMatchThePlainReferenceOnVulkan) {
  if (!VulkanBackendBuilt()) GTEST_SKIP() << "built without the Vulkan backend";
  try {
    CreateBackend("vulkan", {});
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  for (const Variant& v : {kPruned, kPartial, kMlpBias, kAll, kRepeat}) {
    const std::string dir = TempDir() + "/" + v.name;
    WriteVariant(Golden("qwen2_tied"), dir, v);
    OnnxWriteOptions o;
    o.style = OnnxStyle::kTorch;
    WriteOnnxFromHf(dir, dir + "_onnx", o);
    const std::vector<float> cpu = Logits(Model::Load(dir));
    EXPECT_LE(Diff(Logits(Model::Load(dir), "vulkan"), PlainLogits(dir, Ids())), 1e-4) << v.name;
    EXPECT_LE(Diff(Logits(Model::Load(dir + "_onnx"), "vulkan"), cpu), 1e-4) << v.name;
  }
}

// `convert`: MLP biases go to GGUF (blk.N.ffn_*.bias) and load back to the same logits; per-layer
// shapes and partial rotary are refused with one line saying why.
TEST(OnnxShapesCli, ConvertWritesMlpBiasesAndRefusesWhatGgufCannotSay) {
  for (const Variant& v : {kMlpBias, kPruned, kPartial}) {
    const std::string dir = TempDir() + "/" + v.name;
    WriteVariant(Golden("qwen2_tied"), dir, v);
    WriteOnnxFromHf(dir, dir + "_onnx", {});
    const std::string gguf = dir + ".gguf";
    std::string out, err;
    const int rc = RunCommand(
        CliPath() + " convert " + dir + "_onnx/model.onnx -o " + gguf + " --type f32", &out, &err);
    if (v.mlp_bias) {
      ASSERT_EQ(rc, 0) << err;
      EXPECT_LE(Diff(Logits(Model::Load(gguf)), Logits(Model::Load(dir))), 1e-5);
    } else {
      EXPECT_NE(rc, 0);
      EXPECT_NE(err.find(v.heads.empty() ? "partial rotary (16 of 32 dims per head) cannot be"
                                         : "per-layer shapes"),
                std::string::npos)
          << err;
    }
  }
}

// A pruned layer whose heads cannot read a cache of the widest layer's kv heads (the cache has
// one width for all layers) is one error naming the layer; a per-layer list of the wrong length
// names the field.
TEST(OnnxShapesErrors, HeadsThatCannotShareTheCacheNameTheLayer) {
  const std::string dir = TempDir() + "/odd";
  WriteVariant(Golden("qwen2_tied"), dir, {"odd", {{0, 1, 2, 3}, {0}}, {}});
  auto load_error = [&] {
    try {
      Model::Load(dir);
    } catch (const Error& x) {
      return std::string(x.what());
    }
    return std::string();
  };
  std::string e = load_error();
  EXPECT_NE(e.find("layer 1 has 1 heads and 1 kv heads: a KV cache of 2 heads"), std::string::npos)
      << e;
  json j = json::parse(ReadFile(dir + "/config.json"));
  j["num_attention_heads"] = {4, 1, 1};
  std::ofstream(dir + "/config.json") << j.dump(2);
  e = load_error();
  EXPECT_NE(e.find("'num_attention_heads' lists 3 layers, the model has 2"), std::string::npos)
      << e;
}

}  // namespace
}  // namespace es::test
