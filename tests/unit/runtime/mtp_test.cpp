// DeepSeek-V3/R1 multi-token prediction (MTP) as the speculative drafter: the module's graph
// (ModelArch::BuildMtp + BuildHead) against a plain reference written here over odd sizes (MLA
// with q_lora, a dense MLP, interleaved rope), over one forward and over two that share its KV
// cache; the split target forward (BuildHidden + BuildHead) against the plain one; bad MTP
// tensors (a wrong shape, a missing one) named in one error; the drafter refused for a model
// without MTP layers; greedy output identical with and without MTP drafts on the golden dsv3_mtp
// checkpoint (k = 1, 2, 4, 7, the end of the context); every draft equal to that of a fresh
// drafter over the same history (the catch-up and roll-back of its cache); sampled drafts carry
// their distribution; the bench counts drafted and accepted tokens; on Vulkan (lavapipe) the
// greedy output is the plain one and the drafts the cpu drafter's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/bench.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/speculative.h"
#include "test_util.h"

namespace es {
namespace {

// ---- the module's graph against a plain reference ---------------------------------------------
// Odd sizes everywhere: D 37, 3 heads, nope 9, rope 6, v 7, kv_lora 13, q_lora 11, FFN 23, V 41.
ModelConfig OddConfig() {
  nlohmann::json j = {{"architectures", {"DeepseekV3ForCausalLM"}},
                      {"model_type", "deepseek_v3"},
                      {"vocab_size", 41},
                      {"hidden_size", 37},
                      {"intermediate_size", 23},
                      {"moe_intermediate_size", 5},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 3},
                      {"num_key_value_heads", 3},
                      {"q_lora_rank", 11},
                      {"kv_lora_rank", 13},
                      {"qk_nope_head_dim", 9},
                      {"qk_rope_head_dim", 6},
                      {"v_head_dim", 7},
                      {"n_routed_experts", 4},
                      {"n_shared_experts", 1},
                      {"num_experts_per_tok", 2},
                      {"n_group", 1},
                      {"topk_group", 1},
                      {"first_k_dense_replace", 99},  // every layer dense, the MTP one too
                      {"max_position_embeddings", 64},
                      {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},
                      {"rope_interleave", true},
                      {"tie_word_embeddings", false},
                      {"num_nextn_predict_layers", 1}};
  return ParseHfConfig(j, "odd config");
}

using Weights = std::map<std::string, Tensor>;

Weights RandomWeights(const ModelConfig& c) {
  Weights w;
  uint64_t seed = 1;
  auto specs = ExpectedWeights(c);
  const auto mtp = ExpectedMtpWeights(c);
  specs.insert(specs.end(), mtp.begin(), mtp.end());
  for (const WeightSpec& s : specs) {
    if (s.optional && s.name.find("shared_head.head") == std::string::npos) continue;
    Tensor t = AllocTensor(s.name, DType::kF32, s.shape);
    const std::vector<float> v =
        test::RandomFloats(size_t(t.numel()), seed++, s.is_norm ? 0.2f : 0.3f);
    float* d = static_cast<float*>(MutableData(t));
    for (size_t i = 0; i < v.size(); ++i) d[i] = s.is_norm ? 1.0f + v[i] : v[i];
    w.emplace(s.name, std::move(t));
  }
  return w;
}

WeightLookup LookupIn(const Weights& w) {
  return [&w](const std::string& n) -> const Tensor* {
    auto it = w.find(n);
    return it == w.end() ? nullptr : &it->second;
  };
}

const float* F(const Weights& w, const std::string& n) { return w.at(n).as<float>(); }

// y[n] = sum_k W[n, k] x[k], W [N, K]
std::vector<float> MatVec(const Weights& w, const std::string& n, const std::vector<float>& x) {
  const Tensor& t = w.at(n);
  EXPECT_EQ(t.cols(), int64_t(x.size())) << n;
  std::vector<float> y(size_t(t.rows()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    double s = 0;
    for (int64_t k = 0; k < t.cols(); ++k)
      s += double(t.as<float>()[r * t.cols() + k]) * x[size_t(k)];
    y[size_t(r)] = float(s);
  }
  return y;
}

std::vector<float> Norm(const std::vector<float>& x, const float* w, double eps) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = float(x[i] * inv * w[i]);
  return y;
}

// Rotates x[off, off + dim) at position pos as the model's rope table says.
void Rope(const RopeTable& rt, int64_t pos, float* x) {
  const int half = rt.dim / 2;
  for (int k = 0; k < half; ++k) {
    const double a = double(pos) * rt.inv_freq[size_t(k)];
    const double cs = std::cos(a) * rt.attention_factor, sn = std::sin(a) * rt.attention_factor;
    float* p = rt.mode == RopeMode::kNeox ? x + k : x + 2 * k;
    float* q = rt.mode == RopeMode::kNeox ? x + k + half : x + 2 * k + 1;
    const double x0 = *p, x1 = *q;
    *p = float(x0 * cs - x1 * sn);
    *q = float(x1 * cs + x0 * sn);
  }
}

// The MTP module over rows [e_t | h_t] at positions 0..T-1 (one causal sequence):
// shared_head.norm(layer(eh_proj([enorm(e) | hnorm(h)]))) per row, written out in plain loops.
std::vector<std::vector<float>> RefMtp(const ModelConfig& c, const Weights& w,
                                       const std::vector<std::vector<float>>& e,
                                       const std::vector<std::vector<float>>& h) {
  const std::string p = "model.layers." + std::to_string(c.n_layers) + ".";
  const int64_t D = c.hidden_size, H = c.n_heads, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim,
                dv = c.v_head_dim, r = c.kv_lora_rank;
  const RopeTable rt = c.MakeRope();
  const size_t T = e.size();
  std::vector<std::vector<float>> x(T), q(T), c_lat(T), kpe(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<float> cat = Norm(e[t], F(w, p + "enorm.weight"), c.rms_norm_eps);
    const std::vector<float> hn = Norm(h[t], F(w, p + "hnorm.weight"), c.rms_norm_eps);
    cat.insert(cat.end(), hn.begin(), hn.end());  // [enorm(e) | hnorm(h)]: the checkpoint's order
    x[t] = MatVec(w, p + "eh_proj.weight", cat);
    const std::vector<float> xn = Norm(x[t], F(w, p + "input_layernorm.weight"), c.rms_norm_eps);
    const std::vector<float> qa = Norm(MatVec(w, p + "self_attn.q_a_proj.weight", xn),
                                       F(w, p + "self_attn.q_a_layernorm.weight"), 1e-6);
    q[t] = MatVec(w, p + "self_attn.q_b_proj.weight", qa);
    for (int64_t hh = 0; hh < H; ++hh) Rope(rt, int64_t(t), q[t].data() + hh * (dn + dr) + dn);
    const std::vector<float> kva = MatVec(w, p + "self_attn.kv_a_proj_with_mqa.weight", xn);
    c_lat[t] = Norm(std::vector<float>(kva.begin(), kva.begin() + r),
                    F(w, p + "self_attn.kv_a_layernorm.weight"), 1e-6);
    kpe[t].assign(kva.begin() + r, kva.end());
    Rope(rt, int64_t(t), kpe[t].data());
  }
  std::vector<std::vector<float>> out(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<float> att(size_t(H * dv), 0.0f);
    for (int64_t hh = 0; hh < H; ++hh) {
      std::vector<double> s(t + 1);
      double mx = -1e300;
      std::vector<std::vector<float>> kv(t + 1);
      for (size_t j = 0; j <= t; ++j) {
        kv[j] = MatVec(w, p + "self_attn.kv_b_proj.weight", c_lat[j]);  // [H * (dn + dv)]
        const float* kn = kv[j].data() + hh * (dn + dv);
        const float* qh = q[t].data() + hh * (dn + dr);
        double d = 0;
        for (int64_t i = 0; i < dn; ++i) d += double(qh[i]) * kn[i];
        for (int64_t i = 0; i < dr; ++i) d += double(qh[dn + i]) * kpe[j][size_t(i)];
        s[j] = d * c.AttentionScale();
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - mx));
      for (size_t j = 0; j <= t; ++j)
        for (int64_t i = 0; i < dv; ++i)
          att[size_t(hh * dv + i)] += float(s[j] / z * kv[j][size_t(hh * (dn + dv) + dn + i)]);
    }
    const std::vector<float> o = MatVec(w, p + "self_attn.o_proj.weight", att);
    std::vector<float> y = x[t];
    for (int64_t i = 0; i < D; ++i) y[size_t(i)] += o[size_t(i)];
    const std::vector<float> yn =
        Norm(y, F(w, p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    std::vector<float> g = MatVec(w, p + "mlp.gate_proj.weight", yn),
                       u = MatVec(w, p + "mlp.up_proj.weight", yn);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    const std::vector<float> dn_out = MatVec(w, p + "mlp.down_proj.weight", g);
    for (int64_t i = 0; i < D; ++i) y[size_t(i)] += dn_out[size_t(i)];
    out[t] = Norm(y, F(w, p + "shared_head.norm.weight"), c.rms_norm_eps);
  }
  return out;
}

// Runs BuildMtp over rows [from, to) of `in` ([T, 2D]) at their positions, on `kv`.
std::vector<float> RunModule(const ModelArch& a, Backend& be, KvStorage& kv,
                             const std::vector<float>& in, int64_t from, int64_t to) {
  const int64_t D = a.config().hidden_size;
  Batch b;
  b.Add(0, from, std::vector<int32_t>(size_t(to - from), 0), true);
  b.Finalize();
  b.input = in.data() + from * 2 * D;
  b.input_cols = 2 * D;
  std::vector<float> out(size_t((to - from) * D));
  be.Compute(a.BuildMtp(b), b, kv, out.data());
  return out;
}

TEST(MtpModule, MatchesThePlainReference) {
  const ModelConfig c = OddConfig();
  const Weights w = RandomWeights(c);
  const ModelArch a(c, LookupIn(w));
  ASSERT_NE(a.mtp(), nullptr);
  EXPECT_EQ(a.mtp()->head, &w.at("model.layers.2.shared_head.head.weight"));
  EXPECT_EQ(a.mtp()->embed, a.embedding());  // no embed_tokens of its own: the model's
  const int64_t D = c.hidden_size, T = 7;
  std::vector<std::vector<float>> e(T), h(T);
  std::vector<float> in;
  for (int64_t t = 0; t < T; ++t) {
    e[size_t(t)] = test::RandomFloats(size_t(D), 100 + uint64_t(t));
    h[size_t(t)] = test::RandomFloats(size_t(D), 200 + uint64_t(t), 3.0f);
    in.insert(in.end(), e[size_t(t)].begin(), e[size_t(t)].end());
    in.insert(in.end(), h[size_t(t)].begin(), h[size_t(t)].end());
  }
  const auto want = RefMtp(c, w, e, h);
  auto be = CreateBackend("cpu", {});
  for (const Tensor* t : a.MtpWeightList()) be->PrepareWeight(*t);
  KvSpec spec = c.MakeKvSpec(DType::kF32);
  spec.n_layers = 1;
  // One forward of all rows, and the same rows in two forwards sharing the module's cache.
  for (int64_t split : {T, int64_t(3)}) {
    SCOPED_TRACE("split " + std::to_string(split));
    auto kv = be->CreateKv(spec, 1, 32);
    std::vector<float> got = RunModule(a, *be, *kv, in, 0, split);
    if (split < T) {
      const std::vector<float> rest = RunModule(a, *be, *kv, in, split, T);
      got.insert(got.end(), rest.begin(), rest.end());
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i)
        ASSERT_NEAR(got[size_t(t * D + i)], want[size_t(t)][size_t(i)], 2e-4)
            << "row " << t << " col " << i;
  }
  // The head: logits = shared_head.head h'.
  Batch b;
  b.Add(0, 4, {0}, true);
  b.Finalize();
  b.input = want[4].data();
  b.input_cols = D;
  auto kv = be->CreateKv(spec, 1, 32);
  std::vector<float> logits(size_t(c.vocab_size));
  be->Compute(a.BuildHead(b, /*mtp=*/true), b, *kv, logits.data());
  const std::vector<float> ref = MatVec(w, "model.layers.2.shared_head.head.weight", want[4]);
  for (int64_t v = 0; v < c.vocab_size; ++v) EXPECT_NEAR(logits[size_t(v)], ref[size_t(v)], 1e-4);
}

std::string ArchError(const ModelConfig& c, const Weights& w) {
  try {
    ModelArch a(c, LookupIn(w));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MtpModule, BadTensorsAreNamed) {
  const ModelConfig c = OddConfig();
  {
    Weights w = RandomWeights(c);
    w["model.layers.2.eh_proj.weight"] = AllocTensor("x", DType::kF32, {37, 37});
    const std::string e = ArchError(c, w);
    EXPECT_NE(e.find("'model.layers.2.eh_proj.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("[37, 37]"), std::string::npos) << e;
    EXPECT_NE(e.find("[37, 74]"), std::string::npos) << e;
  }
  {
    Weights w = RandomWeights(c);
    w["model.layers.2.shared_head.head.weight"] = AllocTensor("x", DType::kF32, {40, 37});
    const std::string e = ArchError(c, w);
    EXPECT_NE(e.find("'model.layers.2.shared_head.head.weight'"), std::string::npos) << e;
  }
  {
    Weights w = RandomWeights(c);
    w.erase("model.layers.2.self_attn.kv_b_proj.weight");
    const std::string e = ArchError(c, w);
    EXPECT_NE(
        e.find("missing tensor 'model.layers.2.self_attn.kv_b_proj.weight' of the MTP module"),
        std::string::npos)
        << e;
  }
  {
    // Without its tensors (a file converted without them) the model simply has no module.
    Weights w = RandomWeights(c);
    for (auto it = w.begin(); it != w.end();)
      it = it->first.rfind("model.layers.2.", 0) == 0 ? w.erase(it) : std::next(it);
    EXPECT_EQ(ModelArch(c, LookupIn(w)).mtp(), nullptr);
  }
}

// ---- the drafter on the golden dsv3_mtp checkpoint
// ------------------------------------------------
std::string Dir(const std::string& name) {
  return test::SourceDir() + "/tests/golden/data/models/" + name;
}

std::unique_ptr<Runner> MakeRunner(std::shared_ptr<const Model> m, int64_t context = 0) {
  RunnerOptions ro;
  ro.context = context;
  return std::make_unique<Runner>(std::move(m), CreateBackend("cpu", {}), ro);
}

std::vector<int32_t> Prompt() { return {0, 5, 17, 42, 42, 9, 100, 250, 3, 17, 42, 42, 61}; }

// The split forward (hidden rows to a sink, then the head) gives the plain forward's logits.
TEST(MtpDrafter, HiddenSinkKeepsTheLogits) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  auto plain = MakeRunner(m), split = MakeRunner(m);
  int64_t rows = 0;
  split->SetHiddenSink([&](const Batch& b, const float*) { rows += b.n_tokens(); });
  Batch b;
  b.Add(0, 0, Prompt(), true);
  b.Finalize();
  std::vector<float> a, s;
  plain->Forward(b, &a);
  split->Forward(b, &s);
  EXPECT_EQ(rows, int64_t(Prompt().size()));
  ASSERT_EQ(a.size(), s.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], s[i], 1e-5f * (1 + std::fabs(a[i]))) << i;
}

TEST(MtpDrafter, RefusedWithoutMtpLayers) {
  auto m = Model::Load(Dir("dsv3"));
  auto r = MakeRunner(m);
  try {
    MtpDrafter d(*r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'dsv3' has no MTP layers"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("num_nextn_predict_layers is 0"), std::string::npos)
        << e.what();
  }
}

struct GenRun {
  std::vector<int32_t> out;
  GenerateStats stats;
};

GenRun GenerateMtp(const std::shared_ptr<Model>& m, int k, GenerateOptions go, int64_t context = 0,
                   Drafter* wrap = nullptr) {
  auto r = MakeRunner(m, context);
  std::unique_ptr<MtpDrafter> d;
  if (k > 0) d = std::make_unique<MtpDrafter>(*r);
  go.drafter = wrap ? wrap : d.get();
  go.spec_k = k;
  GenRun run;
  run.out = Generate(*r, r->AcquireSlot(), Prompt(), go, &run.stats);
  return run;
}

GenerateOptions Greedy(int n) {
  GenerateOptions go;
  go.max_new_tokens = n;
  go.sampling.temperature = 0;
  return go;
}

TEST(MtpDrafter, GreedyOutputIdenticalToPlain) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  const GenRun plain = GenerateMtp(m, 0, Greedy(30));
  ASSERT_EQ(plain.out.size(), 30u);
  for (int k : {1, 2, 4, 7}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    const GenRun s = GenerateMtp(m, k, Greedy(30));
    EXPECT_EQ(s.out, plain.out);
    EXPECT_GT(s.stats.spec.drafted, 0);
    EXPECT_LE(s.stats.spec.accepted, s.stats.spec.drafted);
  }
  // The end of the context cuts the chain (its positions never pass it).
  const int64_t ctx = int64_t(Prompt().size()) + 12;
  const GenRun pc = GenerateMtp(m, 0, Greedy(12), ctx), sc = GenerateMtp(m, 5, Greedy(12), ctx);
  EXPECT_EQ(sc.out, pc.out);
}

// Quantized at load (--dtype q8_0): the module's matrices too, and drafts stay lossless.
TEST(MtpDrafter, QuantizedAtLoadToo) {
  LoadOptions lo;
  lo.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy("q8_0"));
  auto m = Model::Load(Dir("dsv3_mtp"), lo);
  ASSERT_NE(m->arch().mtp(), nullptr);
  EXPECT_EQ(m->arch().mtp()->eh_proj->dtype, DType::kQ8_0);
  EXPECT_EQ(m->arch().mtp()->eh_e.dtype, DType::kQ8_0);  // 128 columns: whole blocks
  EXPECT_EQ(m->arch().mtp()->block.kv_a->dtype, DType::kQ8_0);
  EXPECT_EQ(GenerateMtp(m, 3, Greedy(20)).out, GenerateMtp(m, 0, Greedy(20)).out);
}

// Records every draft of the drafter it wraps.
class RecordingDrafter : public Drafter {
 public:
  explicit RecordingDrafter(Drafter* inner) : inner_(inner) {}
  std::string name() const override { return "recording"; }
  void Begin(const std::vector<int32_t>& p) override { inner_->Begin(p); }
  void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sp,
               Draft* out) override {
    inner_->Propose(history, k, sp, out);
    drafts.push_back(out->tokens);
  }
  std::vector<std::vector<int32_t>> drafts;

 private:
  Drafter* inner_;
};

// On Vulkan the module's rows and the head's enter their graphs as kInput rows uploaded every
// forward into programs recorded once: the greedy output is the plain one, and every draft is
// the cpu drafter's (a program that kept an earlier forward's rows would draft from stale rows).
TEST(MtpDrafter, GreedyOutputIdenticalToPlainOnVulkan) {
  if (!VulkanBackendBuilt()) GTEST_SKIP() << "built without Vulkan";
  auto m = Model::Load(Dir("dsv3_mtp"));
  using Drafts = std::vector<std::vector<int32_t>>;
  auto run = [&](const std::string& backend, int k, Drafts* drafts) {
    RunnerOptions ro;
    ro.context = 40;
    Runner r(m, CreateBackend(backend, {}), ro);
    std::unique_ptr<MtpDrafter> d;
    std::unique_ptr<RecordingDrafter> w;
    GenerateOptions go = Greedy(16);
    if (k > 0) {
      d = std::make_unique<MtpDrafter>(r);
      w = std::make_unique<RecordingDrafter>(d.get());
      go.drafter = w.get();
      go.spec_k = k;
    }
    GenRun out;
    out.out = Generate(r, r.AcquireSlot(), Prompt(), go, &out.stats);
    if (drafts) *drafts = w->drafts;
    return out;
  };
  const GenRun plain = run("vulkan", 0, nullptr);
  ASSERT_EQ(plain.out.size(), 16u);
  for (int k : {1, 3}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    Drafts vk, cpu;
    const GenRun s = run("vulkan", k, &vk);
    const GenRun c = run("cpu", k, &cpu);
    EXPECT_EQ(s.out, plain.out);
    EXPECT_GT(s.stats.spec.drafted, 0);
    EXPECT_EQ(vk, cpu);
    EXPECT_EQ(s.stats.spec.accepted, c.stats.spec.accepted);
  }
}

// Records the drafts of an MtpDrafter and, for each, what a fresh drafter over a fresh runner
// that ran the same history in one forward proposes: the cached rows it kept, recomputed and
// overwrote across steps must give the same drafts.
class CheckingDrafter : public Drafter {
 public:
  CheckingDrafter(std::shared_ptr<Model> m, Drafter* inner) : m_(std::move(m)), inner_(inner) {}
  std::string name() const override { return "checking"; }
  void Begin(const std::vector<int32_t>& p) override { inner_->Begin(p); }
  void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sp,
               Draft* out) override {
    inner_->Propose(history, k, sp, out);
    auto r = MakeRunner(m_);
    MtpDrafter fresh(*r);
    Batch b;
    b.Add(r->AcquireSlot(), 0, history);
    b.Finalize();
    std::vector<int32_t> ids;
    r->ForwardArgmax(b, &ids);
    Draft want;
    fresh.Propose(history, k, sp, &want);
    EXPECT_EQ(out->tokens, want.tokens) << "history of " << history.size();
    ++checked;
  }
  int checked = 0;

 private:
  std::shared_ptr<Model> m_;
  Drafter* inner_;
};

TEST(MtpDrafter, DraftsEqualAFreshDrafterOverTheSameHistory) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  for (int k : {1, 3}) {
    auto r = MakeRunner(m);
    MtpDrafter d(*r);
    CheckingDrafter check(m, &d);
    GenerateOptions go = Greedy(16);
    go.drafter = &check;
    go.spec_k = k;
    Generate(*r, r->AcquireSlot(), Prompt(), go);
    EXPECT_GT(check.checked, 5);
    EXPECT_GT(d.cached(0), int64_t(Prompt().size()));  // the prompt's rows and the steps'
  }
}

// Verification steps as the generator takes them, with 0..3 of the drafts accepted (the random
// MTP layer of dsv3_mtp drafts what the target rarely picks, so acceptance is forced here): the
// cache then holds accepted rows computed from the chain's own hidden states, rows of rejected
// drafts, and hidden rows of the verification forward; every draft must still equal a fresh
// drafter's over the same history.
TEST(MtpDrafter, CatchUpAfterAcceptedDraftsEqualsAFreshDrafter) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  auto r = MakeRunner(m);
  MtpDrafter d(*r);
  CheckingDrafter check(m, &d);
  const int slot = r->AcquireSlot();
  std::vector<int32_t> history = Prompt(), ids;
  Batch b;
  b.Add(slot, 0, history);
  b.Finalize();
  r->ForwardArgmax(b, &ids);
  check.Begin(history);
  int32_t next = 7;
  for (int step = 0; step < 10; ++step) {
    const int k = 1 + step % 3, accept = step % 4 <= k ? step % 4 : k;
    Draft dr;
    check.Propose(history, k, SamplingParams{0.0f}, &dr);
    ASSERT_EQ(int(dr.tokens.size()), k);
    std::vector<int32_t> rows = {history.back()};
    rows.insert(rows.end(), dr.tokens.begin(), dr.tokens.end());
    Batch v;
    v.Add(slot, int64_t(history.size()) - 1, rows, true);
    v.Finalize();
    r->ForwardArgmax(v, &ids);
    history.insert(history.end(), dr.tokens.begin(), dr.tokens.begin() + accept);
    history.push_back(next = (next * 37 + 11) % 290);  // the target's own token
  }
  EXPECT_EQ(check.checked, 10);
}

// Two sequences in two slots, forwarded in one batch at the same positions: each history's drafts
// come from its own slot (the rows' tokens tell them apart), as a fresh drafter's.
TEST(MtpDrafter, TwoSlotsInOneBatch) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  RunnerOptions ro;
  ro.n_slots = 2;
  Runner r(m, CreateBackend("cpu", {}), ro);
  MtpDrafter d(r);
  CheckingDrafter check(m, &d);
  std::vector<int32_t> a = Prompt(), b = Prompt(), ids;
  b[3] = 200;  // the same length, another sequence
  const int sa = r.AcquireSlot(), sb = r.AcquireSlot();
  Batch both;
  both.Add(sa, 0, a);
  both.Add(sb, 0, b);
  both.Finalize();
  r.ForwardArgmax(both, &ids);
  for (int round = 0; round < 2; ++round) {  // b was forwarded last in the batch: order matters not
    Draft da, db;
    check.Propose(b, 2, SamplingParams{0.0f}, &db);
    check.Propose(a, 2, SamplingParams{0.0f}, &da);
    a.push_back(5), b.push_back(6);
    Batch step;
    step.Add(sa, int64_t(a.size()) - 2, {a[a.size() - 2], a.back()}, true);
    step.Add(sb, int64_t(b.size()) - 2, {b[b.size() - 2], b.back()}, true);
    step.Finalize();
    r.ForwardArgmax(step, &ids);
  }
  EXPECT_EQ(check.checked, 4);
}

TEST(MtpDrafter, SampledDraftsCarryTheirDistribution) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  auto r = MakeRunner(m);
  MtpDrafter d(*r);
  Batch b;
  b.Add(r->AcquireSlot(), 0, Prompt());
  b.Finalize();
  std::vector<int32_t> ids;
  r->ForwardArgmax(b, &ids);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 9;
  Draft dr;
  d.Propose(Prompt(), 3, sp, &dr);
  ASSERT_EQ(dr.tokens.size(), 3u);
  ASSERT_EQ(dr.probs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    double s = 0;
    bool has = false;
    for (const auto& [p, id] : dr.probs[i]) s += p, has = has || id == dr.tokens[i];
    EXPECT_TRUE(has);
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
  // And a sampled generation runs to its length with MTP drafts.
  GenerateOptions go;
  go.max_new_tokens = 20;
  go.sampling = sp;
  const GenRun s = GenerateMtp(m, 3, go);
  EXPECT_EQ(s.out.size(), 20u);
  EXPECT_GT(s.stats.spec.drafted, 0);
}

TEST(MtpDrafter, BenchCountsDraftsAndAcceptance) {
  auto m = Model::Load(Dir("dsv3_mtp"));
  auto r = MakeRunner(m, 64);
  MtpDrafter d(*r);
  BenchOptions bo;
  bo.n_prompt = 9;
  bo.n_gen = 12;
  bo.reps = 1;
  bo.drafter = &d;
  bo.spec_k = 2;
  const BenchResult res = RunBench(*r, bo, 0.0);
  EXPECT_EQ(res.spec_drafter, "mtp");
  EXPECT_GT(res.spec.drafted, 0);
  EXPECT_LE(res.spec.accepted, res.spec.drafted);
  const nlohmann::json j = res.ToJson();
  EXPECT_NE(j.dump().find("\"mtp\""), std::string::npos) << j.dump();
}

// `edgeseek convert` keeps the module (blk.3.nextn.* and the block's own tensors, block_count 4,
// nextn_predict_layers 1); the GGUF loader binds the same values, and drafts with it are lossless.
TEST(MtpDrafter, GgufKeepsTheModule) {
  const std::string out = test::TempDir() + "/dsv3_mtp.gguf";
  ConvertHfToGguf(Dir("dsv3_mtp"), out, BuiltinQuantPolicy("bf16"));
  auto hf = Model::Load(Dir("dsv3_mtp"));
  auto gg = Model::Load(out);
  ASSERT_NE(gg->arch().mtp(), nullptr);
  EXPECT_EQ(gg->config().n_layers, 3);
  EXPECT_EQ(gg->config().num_nextn_predict_layers, 1);
  const std::vector<const Tensor*> a = hf->arch().MtpWeightList(), b = gg->arch().MtpWeightList();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i]->name);
    ASSERT_EQ(a[i]->shape, b[i]->shape);
    EXPECT_EQ(ToF32(*a[i]), ToF32(*b[i]));  // bf16 kept, norms widened to f32
  }
  EXPECT_NE(gg->arch().mtp()->embed, gg->arch().embedding());  // its own embed_tokens, kept
  EXPECT_EQ(GenerateMtp(gg, 3, Greedy(20)).out, GenerateMtp(gg, 0, Greedy(20)).out);
}

// Against the module built by hand from transformers' pieces in float64
// (scripts/golden/make_mtp_golden.py, run on the GPU machine; it writes mtp_golden.json,
// mtp_logits.f32 and mtp_chain_logits.f32 into the dsv3_mtp folder): the catch-up rows' logits
// over the golden prompt, and the greedy chain of drafts.
TEST(MtpGolden, MatchesTheTransformersBuiltModule) {
  const std::string dir = Dir("dsv3_mtp");
  if (!std::filesystem::exists(dir + "/mtp_golden.json"))
    GTEST_SKIP()
        << "no MTP golden yet: run python3 scripts/golden/make_mtp_golden.py on the GPU machine";
  const nlohmann::json g = nlohmann::json::parse(test::ReadFile(dir + "/mtp_golden.json"));
  const std::vector<int32_t> ids = g.at("input_ids").get<std::vector<int32_t>>();
  auto m = Model::Load(dir);
  const ModelArch& a = m->arch();
  const int64_t T = int64_t(ids.size()), D = m->config().hidden_size, V = m->vocab_size();
  auto r = MakeRunner(m);
  std::vector<float> hidden;
  r->SetHiddenSink([&](const Batch&, const float* h) { hidden.assign(h, h + T * D); });
  Batch b;
  b.Add(0, 0, ids);
  b.Finalize();
  std::vector<int32_t> out;
  r->ForwardArgmax(b, &out);
  // Rows [embed(t_{i+1}) (0 at position 0) | h_i], i = 0..T-2, through the module and the head.
  std::vector<float> in(size_t((T - 1) * 2 * D), 0.0f);
  const Tensor& E = *a.mtp()->embed;
  for (int64_t i = 0; i < T - 1; ++i) {
    float* row = in.data() + i * 2 * D;
    if (i > 0) Dequantize(E.dtype, E.bytes() + size_t(ids[size_t(i + 1)]) * E.row_bytes(), row, D);
    std::copy(hidden.begin() + i * D, hidden.begin() + (i + 1) * D, row + D);
  }
  auto be = CreateBackend("cpu", {});
  for (const Tensor* t : a.MtpWeightList()) be->PrepareWeight(*t);
  KvSpec spec = m->config().MakeKvSpec(DType::kF32);
  spec.n_layers = 1;
  auto kv = be->CreateKv(spec, 1, 64);
  const std::vector<float> hp = RunModule(a, *be, *kv, in, 0, T - 1);
  Batch hb;
  hb.Add(0, 0, std::vector<int32_t>(size_t(T - 1), 0), true);
  hb.Finalize();
  hb.input = hp.data();
  hb.input_cols = D;
  std::vector<float> logits(size_t((T - 1) * V));
  be->Compute(a.BuildHead(hb, /*mtp=*/true), hb, *kv, logits.data());
  const std::string raw = test::ReadFile(dir + "/mtp_logits.f32");
  std::vector<float> want(raw.size() / sizeof(float));
  std::memcpy(want.data(), raw.data(), want.size() * sizeof(float));
  ASSERT_EQ(want.size(), logits.size());
  EXPECT_LT(test::RelL2(logits, want), 1e-4);  // as the model goldens
  // The drafter's greedy chain.
  auto r2 = MakeRunner(m);
  MtpDrafter d(*r2);
  r2->ForwardArgmax(b, &out);
  Draft dr;
  d.Propose(ids, g.at("chain").get<int>(), SamplingParams{0.0f}, &dr);
  EXPECT_EQ(dr.tokens, g.at("chain_ids").get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace es
