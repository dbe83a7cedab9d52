// Every GGUF block type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) on the Vulkan backend
// against the CPU reference (src/quant's Dequantize, backends/cpu/reference.h): embedding rows
// element for element (the repacked layouts of weights.cpp + wload.glsl dequantize exactly), the
// decode GEMV (R = 1, 3, 8) under every knob of the quantized GEMV (TPR 4, 8, 16 too: clustered
// subgroup sums), the plain GEMM (R = 9, 37), the fused SwiGLU GEMV, MoE experts and MLA's
// per-head GEMV. Sizes: N not a multiple of the outputs per workgroup, K of 1 and 3 blocks
// (32-blocks) or 1 and 3 super-blocks (K-quants). Tolerance: relative L2 1e-5 (both sides sum the
// same dequantized weights; ours in f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include "backends/cpu/reference.h"
#include "backends/vulkan/weights.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/model.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

constexpr double kTol = 1e-5;
constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                            DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// Row lengths of 1 and 3 blocks of the type.
std::vector<int> Ks(DType t) { return {BlockElems(t), 3 * BlockElems(t)}; }

std::vector<float> RefMatMul(const Tensor& X, const Tensor& W, const Tensor* B, int R) {
  std::vector<float> want(size_t(R * W.rows()));
  std::vector<float> bias = B ? Values(*B) : std::vector<float>();
  ref::MatMul(X.as<float>(), R, X.cols(), W, B ? bias.data() : nullptr, want.data());
  return want;
}

// A random product y = x Wᵀ (+ b) of R x K times N x K weights of type dt (seeds from `seed`),
// run on `be`; `where` names the case for failure messages.
struct MatMulRun {
  Tensor X, W, B;
  std::vector<float> got;
  std::string where;
};
MatMulRun RunMatMul(Backend& be, DType dt, int R, int K, int N, bool bias, uint64_t seed,
                    const std::string& what) {
  MatMulRun m{RandomTensor("x", DType::kF32, {R, K}, seed),
              RandomTensor("w", dt, {N, K}, seed + 1),
              RandomTensor("b", DType::kF32, {N}, seed + 2),
              {},
              {}};
  Graph g;
  std::vector<int> src = {Input(g, m.X, R), g.AddWeight(m.W)};
  if (bias) src.push_back(g.AddWeight(m.B));
  g.Add(Make(Op::kMatMul, "mm", src, {R, N}));
  m.got = RunGraph(be, g, RowsBatch(R));
  m.where = what + " R=" + std::to_string(R) + " K=" + std::to_string(K) +
            " N=" + std::to_string(N) + " " + std::string(Name(dt));
  return m;
}

// y = x Wᵀ (+ b) on `be` against the reference.
void CheckMatMul(Backend& be, DType dt, int R, int K, int N, bool bias, const std::string& what) {
  const MatMulRun m = RunMatMul(be, dt, R, K, N, bias, 61, what);
  ExpectClose(m.got, RefMatMul(m.X, m.W, bias ? &m.B : nullptr, R), kTol, m.where);
}

// Sets an environment variable for the life of the object.
class VulkanQuant : public VulkanTest {};

TEST_F(VulkanQuant, RepackedRowsKeepTheFileSize) {
  // Within 3% of the file's bytes per weight (Q4_K/Q5_K store their 6-bit scales as bytes).
  for (DType t : kTypes) {
    const int64_t K = 16 * BlockElems(t);
    const double file = double(RowBytes(t, K)), dev = double(vk::DeviceRowBytes(t, K));
    EXPECT_EQ(vk::DeviceRowBytes(t, K) % 16, 0u) << Name(t);
    EXPECT_GE(dev, file) << Name(t);
    EXPECT_LE(dev, file * 1.03) << Name(t);
  }
}

TEST_F(VulkanQuant, EmbeddingRowsDequantizeExactly) {
  for (DType dt : kTypes) {
    for (int K : Ks(dt)) {
      Tensor E = RandomTensor("embed", dt, {9, K}, 64, 2.0f);
      Graph g;
      Batch b;
      b.Add(0, 0, {8, 0, 3, 3, 5}, true);
      b.Finalize();
      g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {5, K}));
      std::vector<float> want(size_t(5 * K));
      ref::Embed(E, b.tokens.data(), 5, want.data());
      EXPECT_EQ(RunGraph(SharedVulkan(), g, b), want) << Name(dt) << " K=" << K;
    }
  }
}

TEST_F(VulkanQuant, RepackedUploadCrossesItsChunks) {
  // A Q4_0 table past kRepackChunkBytes goes up a chunk of rows at a time: rows on both sides of
  // each chunk boundary, and the last, read back exactly.
  const int K = 4096;
  const int64_t chunk = int64_t(vk::kRepackChunkBytes / vk::DeviceRowBytes(DType::kQ4_0, K));
  const int V = int(2 * chunk + 3);
  Tensor E = RandomTensor("embed", DType::kQ4_0, {V, K}, 65, 2.0f);
  const std::vector<int32_t> rows = {0, int(chunk - 1), int(chunk), int(2 * chunk), V - 1};
  Graph g;
  Batch b;
  b.Add(0, 0, rows, true);
  b.Finalize();
  g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {int64_t(rows.size()), K}));
  std::vector<float> want(rows.size() * size_t(K));
  ref::Embed(E, b.tokens.data(), int(rows.size()), want.data());
  EXPECT_EQ(RunGraph(SharedVulkan(), g, b), want);
}

TEST_F(VulkanQuant, GemvOverTypesAndRows) {
  for (DType dt : kTypes)
    for (int K : Ks(dt))
      for (int R : {1, 3, 8}) CheckMatMul(SharedVulkan(), dt, R, K, 37, R == 3, "gemv");
}

TEST_F(VulkanQuant, PlainGemmOverTypes) {
  for (DType dt : kTypes)
    for (int R : {9, 37})
      CheckMatMul(SharedVulkan(), dt, R, Ks(dt)[R == 9 ? 1 : 0], 19, R == 9, "gemm");
}

// The quantized GEMV's knobs (ES_VK_GEMV_*: rows per invocation group, invocations per group,
// slices per step, int-to-float trick), each on a fresh backend: every setting must give the
// reference's values, for partial last workgroups (N = 45), 1 batch row (and 3 with QR = 8).
TEST_F(VulkanQuant, GemvKnobsAllGiveTheReference) {
  struct Setting {
    std::vector<std::pair<const char*, const char*>> env;
    std::vector<DType> types;
  };
  // Combined settings (lavapipe compiles each pipeline slowly): every value of every knob
  // appears once, over types with and without mins, 32-blocks and K-quants.
  const Setting settings[] = {
      {{{"ES_VK_GEMV_QR", "1"}, {"ES_VK_GEMV_SPL", "4"}, {"ES_VK_GEMV_TPR", "32"}},
       {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K}},
      {{{"ES_VK_GEMV_QR", "8"},
        {"ES_VK_GEMV_SPL", "2"},
        {"ES_VK_GEMV_TPR", "256"},
        {"ES_VK_GEMV_MAGIC", "0"}},
       {DType::kQ4_0, DType::kQ6_K, DType::kQ5_1}},
      {{{"ES_VK_GEMV_QR", "2"}, {"ES_VK_GEMV_TPR", "128"}},
       {DType::kQ5_0, DType::kQ5_K, DType::kQ4_1}}};
  for (const auto& s : settings) {
    vk::VulkanTuning t;
    std::string what;
    for (const auto& [name, value] : s.env) {
      t.knobs.Set(name, value);
      what += std::string(name) + "=" + value + " ";
    }
    auto be = MakeVulkan(t);
    // 3 batch rows (RB = 4: QR x 4 accumulators) with the largest QR only.
    const bool qr8 = s.env[0].second == std::string("8");
    for (DType dt : s.types)
      for (int R : qr8 ? std::vector<int>{1, 3} : std::vector<int>{1})
        CheckMatMul(*be, dt, R, Ks(dt)[1], 45, R == 3, what);
  }
}

// The float GEMVs with 4 outputs an invocation group (rows of at least 2,048: ops/matmul.cpp
// GemvSpecFor, matmul_gemv.comp AccumVecRows): f32, f16 and bf16 rows, a partial last workgroup
// (N = 301), 1 and 3 batch rows.
TEST_F(VulkanQuant, LongFloatRowsTakeFourOutputsAGroup) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int R : {1, 3}) CheckMatMul(SharedVulkan(), dt, R, 2048, 301, R == 3, "K=2048");
}

TEST_F(VulkanQuant, UnsupportedTypeIsOneErrorNamingTensorAndType) {
  Tensor W = RandomTensor("blk.0.ffn_up.weight", DType::kI4G, {4, 128}, 66);
  Tensor X = RandomTensor("x", DType::kF32, {1, 128}, 67);
  Graph g;
  g.Add(Make(Op::kMatMul, "mm", {Input(g, X, 1), g.AddWeight(W)}, {1, 4}));
  EXPECT_FALSE(SharedVulkan().Supports(g, g.node(g.output())));
  try {
    RunGraph(SharedVulkan(), g, RowsBatch(1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i4g"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanQuant, GemvKnobOutOfRangeIsAClearError) {
  try {
    ScopedKnobs env("ES_VK_GEMV_QR", "3");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ES_VK_GEMV_QR"), std::string::npos) << e.what();
  }
}

// The decode FFN block of AddFfnBlock (T rows, D -> I -> D, weights of type dt, seeds from
// `seed`) run on `be`, and in `want` its reference with `mm(x rows, W, rows)` as the matmul.
using RefMm = std::function<std::vector<float>(const std::vector<float>&, const Tensor&, int)>;
// `h` (optional): the SwiGLU output the reference computed, and `down` the down weight, for
// checks that need them (IdotFusedFfnMatchesQuantizedReference).
// `down_dt`: the down weight's type where it differs (a Q4_K_M file's Q5_K / Q6_K down).
std::vector<float> RunFfn(Backend& be, DType dt, int T, int D, int I, uint64_t seed,
                          const RefMm& mm, std::vector<float>* want,
                          std::vector<float>* h = nullptr, Tensor* down = nullptr,
                          std::optional<DType> down_dt = std::nullopt) {
  Tensor X = RandomTensor("x", DType::kF32, {T, D}, seed);
  Tensor Rs = RandomTensor("res", DType::kF32, {T, D}, seed + 1);
  Tensor Wg = RandomTensor("wg", dt, {I, D}, seed + 2),
         Wu = RandomTensor("wu", dt, {I, D}, seed + 3);
  Tensor Wd = RandomTensor("wd", down_dt.value_or(dt), {D, I}, seed + 4);
  Tensor Nw = RandomTensor("norm.w", DType::kF32, {D}, seed + 5);
  Graph g;
  const int res = Input(g, Rs, T), x0 = Input(g, X, T);
  AddFfnBlock(g, res, x0, Nw, Wg, Wu, Wd, T, D, I);
  std::vector<float> got = RunGraph(be, g, RowsBatch(T));
  std::vector<float> xn(size_t(T * D));
  ref::RmsNorm(X.as<float>(), Nw.as<float>(), T, D, 1e-5f, xn.data());
  const std::vector<float> gv = mm(xn, Wg, T), uv = mm(xn, Wu, T);
  std::vector<float> a(gv.size());
  for (size_t i = 0; i < gv.size(); ++i) a[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
  *want = mm(a, Wd, T);
  if (h) *h = a;
  if (down) *down = Wd;
  const auto rv = Values(Rs);
  for (size_t i = 0; i < want->size(); ++i) (*want)[i] += rv[i];
  return got;
}

// Decode FFN with every fusion (norm folded, gate/up as one dual GEMV + SwiGLU, down + residual)
// against the unfused reference: 2 embeddings + 2 dispatches per type.
TEST_F(VulkanQuant, FusedSwiGluGemvOverTypes) {
  const RefMm mm = [](const std::vector<float>& x, const Tensor& W, int T) {
    Tensor X = AllocTensor("x", DType::kF32, {T, W.cols()});
    std::copy(x.begin(), x.end(), static_cast<float*>(MutableData(X)));
    return RefMatMul(X, W, nullptr, T);
  };
  for (DType dt : kTypes) {
    const int D = 2 * BlockElems(dt), I = 3 * BlockElems(dt);
    // 3 rows for two types only: lavapipe compiles each (type, rows) pipeline slowly.
    const bool three = dt == DType::kQ4_K || dt == DType::kQ5_1;
    for (int T : three ? std::vector<int>{1, 3} : std::vector<int>{1}) {
      std::vector<float> want;
      const std::vector<float> got = RunFfn(SharedVulkan(), dt, T, D, I, 71, mm, &want);
      EXPECT_EQ(SharedVulkan().counters().dispatches, 4) << Name(dt);
      ExpectClose(got, want, kTol,
                  "fused FFN T=" + std::to_string(T) + " " + std::string(Name(dt)));
    }
  }
}

// I4F (edgeseek's int4 with an f32 scale and zero point per 32: imported MatMulNBits of f32
// models): the float paths only (wload.glsl: the zero point as the levels' bias, d as f32 bits).
// Embedding rows exactly, GEMV (R = 1, 3, 8, with the clustered sums under TPR 8), the plain GEMM
// and the fused gate/up GEMV against the reference, K of 1 and 3 blocks, N odd.
TEST_F(VulkanQuant, I4FOverEveryPathItTakes) {
  const DType dt = DType::kI4F;
  EXPECT_EQ(vk::DeviceRowBytes(dt, 96), 80u);  // qs 48 | d, z 24 -> 32: each section padded
  for (int K : Ks(dt)) {
    Tensor E = RandomTensor("embed", dt, {9, K}, 64, 2.0f);
    Graph g;
    Batch b;
    b.Add(0, 0, {8, 0, 3, 3, 5}, true);
    b.Finalize();
    g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {5, K}));
    std::vector<float> want(size_t(5 * K));
    ref::Embed(E, b.tokens.data(), 5, want.data());
    EXPECT_EQ(RunGraph(SharedVulkan(), g, b), want) << "K=" << K;
    for (int R : {1, 3, 8}) CheckMatMul(SharedVulkan(), dt, R, K, 37, R == 3, "gemv");
  }
  for (int R : {9, 37})
    CheckMatMul(SharedVulkan(), dt, R, Ks(dt)[R == 9 ? 1 : 0], 19, R == 9, "gemm");
  {
    vk::VulkanTuning t;
    t.knobs.Set("ES_VK_GEMV_TPR", "8");
    auto be = MakeVulkan(t);
    CheckMatMul(*be, dt, 1, Ks(dt)[1], 45, false, "ES_VK_GEMV_TPR=8");
  }
  const RefMm mm = [](const std::vector<float>& x, const Tensor& W, int T) {
    Tensor X = AllocTensor("x", DType::kF32, {T, W.cols()});
    std::copy(x.begin(), x.end(), static_cast<float*>(MutableData(X)));
    return RefMatMul(X, W, nullptr, T);
  };
  std::vector<float> want;
  const std::vector<float> got = RunFfn(SharedVulkan(), dt, 1, 64, 96, 71, mm, &want);
  EXPECT_EQ(SharedVulkan().counters().dispatches, 4);
  ExpectClose(got, want, kTol, "fused FFN i4f");
}

// Routed experts (only the chosen experts' rows are read): 3 rows, 5 experts, top 2, softmax
// routing, expert matrices [I, D] / [D, I] of 1-3 blocks per row; gate/up of one type and down
// of the same or another (q4_k_m files: Q4_K gate/up, Q6_K down), a quantized router too.
std::vector<float> MoeGotWant(DType gu, DType down, std::vector<float>* want, int R = 3) {
  const int D = 2 * std::max(BlockElems(gu), BlockElems(down)), E = 5;
  const int I = std::max(BlockElems(gu), BlockElems(down)) == 32 ? 96 : 256;
  auto p = std::make_shared<MoeParams>();
  p->n_experts = E;
  p->top_k = 2;
  p->n_group = 1;
  p->topk_group = 1;
  p->scoring = ScoringFunc::kSoftmax;
  p->topk_method = TopkMethod::kGreedy;
  p->norm_topk_prob = true;
  p->routed_scaling_factor = 1.0f;
  p->ffn_dim = I;
  Tensor X = RandomTensor("x", DType::kF32, {R, D}, 81);
  Tensor G = RandomTensor("router", gu, {E, D}, 82);
  std::vector<Tensor> ex;
  ex.reserve(size_t(3 * E));
  for (int e = 0; e < E; ++e) {
    ex.push_back(RandomTensor("g" + std::to_string(e), gu, {I, D}, uint64_t(200 + 3 * e), 0.5f));
    ex.push_back(RandomTensor("u" + std::to_string(e), gu, {I, D}, uint64_t(201 + 3 * e), 0.5f));
    ex.push_back(RandomTensor("d" + std::to_string(e), down, {D, I}, uint64_t(202 + 3 * e), 0.5f));
  }
  Graph g;
  Node n = Make(Op::kMoE, "moe", {Input(g, X, R), g.AddWeight(G), -1}, {R, D});
  for (auto& t : ex) n.src.push_back(g.AddWeight(t));
  n.params = MoeOpParams{*p};
  g.Add(n);
  std::vector<const Tensor*> eptr;
  for (auto& t : ex) eptr.push_back(&t);
  want->assign(size_t(R * D), 0.0f);
  ref::MoE(X.as<float>(), R, D, G, nullptr, eptr, *p, want->data());
  return RunGraph(SharedVulkan(), g, RowsBatch(R));
}

// (gate/up type, down type): every block type with itself, then `mixes`.
std::vector<std::pair<DType, DType>> MoeTypePairs(
    std::initializer_list<std::pair<DType, DType>> mixes) {
  std::vector<std::pair<DType, DType>> cases;
  for (DType dt : kTypes) cases.push_back({dt, dt});
  cases.insert(cases.end(), mixes);
  return cases;
}

TEST_F(VulkanQuant, MoeExpertsOverTypes) {
  for (const auto& [gu, down] : MoeTypePairs({{DType::kQ4_K, DType::kQ6_K},
                                              {DType::kQ4_0, DType::kQ8_0},
                                              {DType::kF16, DType::kQ5_1}})) {
    std::vector<float> want;
    const std::vector<float> got = MoeGotWant(gu, down, &want);
    ExpectClose(got, want, kTol, "moe " + std::string(Name(gu)) + "/" + std::string(Name(down)));
  }
}

// The grouped expert GEMMs (more than 8 rows: moe_compact + moe_gemm, ops/moe.cpp) over the same
// types: 150 rows over 5 experts, top 2, so experts take more than one row tile (64 rows on
// tensor cores, 128 on the plain GEMM) and partial ones. f16 math (the tensor-core GEMM rounds
// activations to f16): 3e-3.
TEST_F(VulkanQuant, MoeGroupedExpertsOverTypes) {
  const double tol = SharedVulkan().device().f16_math() ? 3e-3 : kTol;
  for (const auto& [gu, down] : MoeTypePairs({{DType::kQ4_K, DType::kQ6_K},
                                              {DType::kF16, DType::kQ5_1},
                                              {DType::kBF16, DType::kBF16}})) {
    std::vector<float> want;
    const std::vector<float> got = MoeGotWant(gu, down, &want, 150);
    ExpectClose(got, want, tol,
                "grouped moe " + std::string(Name(gu)) + "/" + std::string(Name(down)));
  }
}

TEST_F(VulkanQuant, MoeGateAndUpOfDifferentTypesIsAClearError) {
  Tensor X = RandomTensor("x", DType::kF32, {1, 32}, 1);
  Tensor G = RandomTensor("router", DType::kF32, {1, 32}, 2);
  Tensor Wg = RandomTensor("expert.gate", DType::kQ4_0, {32, 32}, 3);
  Tensor Wu = RandomTensor("expert.up", DType::kQ8_0, {32, 32}, 4);
  Tensor Wd = RandomTensor("expert.down", DType::kQ4_0, {32, 32}, 5);
  auto p = std::make_shared<MoeParams>();
  p->n_experts = 1;
  p->top_k = 1;
  p->ffn_dim = 32;
  Graph g;
  Node n =
      Make(Op::kMoE, "moe",
           {Input(g, X, 1), g.AddWeight(G), -1, g.AddWeight(Wg), g.AddWeight(Wu), g.AddWeight(Wd)},
           {1, 32});
  n.params = MoeOpParams{*p};
  g.Add(n);
  try {
    RunGraph(SharedVulkan(), g, RowsBatch(1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert.up"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
}

// MLA's per-head GEMVs (q_nope · WukT per head, o_lat · Wuv per head) with block-quantized
// weights: a 3-row prefill then a 1-row decode over the latent cache.
TEST_F(VulkanQuant, MlaPerHeadGemvOverTypes) {
  for (DType dt : kTypes) {
    const int H = 2, dn = BlockElems(dt), dr = 4, dv = 6, r = BlockElems(dt) == 32 ? 64 : 256;
    Tensor Q = RandomTensor("q", DType::kF32, {4, H * (dn + dr)}, 91);
    Tensor C = RandomTensor("c", DType::kF32, {4, r}, 92);
    Tensor PE = RandomTensor("pe", DType::kF32, {4, dr}, 93);
    Tensor WukT = RandomTensor("wuk_t", dt, {H * r, dn}, 94, 0.5f);
    Tensor Wuv = RandomTensor("wuv", dt, {H * dv, r}, 95, 0.5f);
    auto kv = SharedVulkan().CreateKv(KvSpec{1, {r, dr}, DType::kF32}, 1, 8);
    Batch pre, dec;
    pre.Add(0, 0, {0, 1, 2}, true);
    pre.Finalize();
    dec.Add(0, 3, {3}, true);
    dec.Finalize();
    for (const Batch* b : {&pre, &dec}) {
      const int T = b->n_tokens();
      Graph g;
      const int q = Input(g, Q, T), c = Input(g, C, T), pe = Input(g, PE, T);
      Node s0 = Make(Op::kKvStore, "sc", {c}, {T, r});
      s0.layer = 0;
      s0.params = KvStoreParams{0};
      Node s1 = Make(Op::kKvStore, "spe", {pe}, {T, dr});
      s1.layer = 0;
      s1.params = KvStoreParams{1};
      const int cs = g.Add(s0), ps = g.Add(s1);
      Node m = Make(Op::kMlaAttention, "mla", {q, cs, ps, g.AddWeight(WukT), g.AddWeight(Wuv)},
                    {T, H * dv});
      m.layer = 0;
      m.params = MlaParams{H, dn, dr, dv, r, 0.3f};
      g.Add(m);
      std::vector<float> got(size_t(T * H * dv));
      SharedVulkan().Compute(g, *b, *kv, got.data());
      // Tokens 0..pos are at positions 0..pos (token t at position t).
      std::vector<float> want(got.size());
      const auto qv = Values(Q), cv = Values(C), pv = Values(PE);
      for (int t = 0; t < T; ++t) {
        const int pos = int(b->positions[size_t(t)]), tok = b->tokens[size_t(t)];
        ref::MlaAttentionRow(&qv[size_t(tok * H * (dn + dr))], cv.data(), pv.data(), pos + 1, H, dn,
                             dr, dv, r, WukT, Wuv, m.Params<MlaParams>().scale,
                             &want[size_t(t * H * dv)]);
      }
      ExpectClose(got, want, kTol, "mla T=" + std::to_string(T) + " " + std::string(Name(dt)));
    }
  }
}

// ---- integer-dot GEMV (Q4_0 and the K-quants over x quantized to int8, Q8_0 to int16) --------
// The reference quantizes each row of x as quantize_q8.comp does (d = max|v| / L, q =
// round-half-even(v / d) in [-L, L]; L = 127, for Q8_0 32512) and takes the dequantized weights
// times d·q, summed in f64. Only the f32 summation order differs (and, on GPUs whose division is
// not correctly rounded, a rare one-level difference of q): 1e-4.
constexpr double kIdotTol = 1e-4;
constexpr DType kIdotTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_K, DType::kQ6_K};
// Inner sizes of the tests below: 256-element blocks for the K-quants (their rows hold whole
// blocks), else the 32-block sizes the Q4_0 / Q8_0 cases were written with.
int IdotK(DType dt, int k32, int k256) { return BlockElems(dt) == 256 ? k256 : k32; }

// x [R, K] with every 32-block replaced by its quantization (int8; int16 for Q8_0 weights) times
// the block's scale.
Tensor QuantizedRows(const std::vector<float>& x, int R, int K, DType wt) {
  const float levels = wt == DType::kQ8_0 ? 32512.0f : 127.0f;  // int16 x for Q8_0, int8 for Q4_0
  Tensor out = AllocTensor("xq", DType::kF32, {R, K});
  float* o = static_cast<float*>(MutableData(out));
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < K / 32; ++b) {
      const float* v = &x[size_t(r * K + 32 * b)];
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / levels, id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < 32; ++i) {
        const float q = std::min(levels, std::max(-levels, std::nearbyint(v[i] * id)));
        o[r * K + 32 * b + i] = d * q;
      }
    }
  return out;
}

// Σ_k W[n, k] xq[r, k] in f64 (+ bias).
std::vector<float> RefIdot(const Tensor& Xq, const Tensor& W, const std::vector<float>* bias,
                           int R) {
  const int N = int(W.rows()), K = int(W.cols());
  std::vector<float> w(size_t(N) * size_t(K));
  Dequantize(W.dtype, W.data, w.data(), int64_t(w.size()));
  const std::vector<float> x = Values(Xq);
  std::vector<float> y(size_t(R * N));
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      double s = bias ? double((*bias)[size_t(n)]) : 0.0;
      for (int k = 0; k < K; ++k) s += double(w[size_t(n * K + k)]) * double(x[size_t(r * K + k)]);
      y[size_t(r * N + n)] = float(s);
    }
  return y;
}

void CheckIdot(Backend& be, DType dt, int R, int K, int N, bool bias, const std::string& what) {
  const MatMulRun m = RunMatMul(be, dt, R, K, N, bias, 161, what);
  const Tensor &X = m.X, &W = m.W, &B = m.B;
  const std::vector<float>& got = m.got;
  const std::string& where = m.where;
  const std::vector<float> bv = Values(B);
  ExpectClose(got, RefIdot(QuantizedRows(Values(X), R, K, dt), W, bias ? &bv : nullptr, R),
              kIdotTol, where);
  // ... and within int8 activation error of the f32 product: the test can tell the paths apart.
  const double f32_err = RelL2(got, RefMatMul(X, W, bias ? &B : nullptr, R));
  // (int8 x: ~4e-3 here; Q8_0's int16 x: ~1e-5; f32 x: ~1e-7, the summation order's.)
  EXPECT_LT(f32_err, dt == DType::kQ8_0 ? 1e-4 : 3e-2) << where;
  EXPECT_GT(f32_err, dt == DType::kQ8_0 ? 3e-6 : 1e-5)
      << where << ": the integer-dot path did not run";
}

// A backend whose GEMVs of Q8_0, Q4_0, Q5_K, and Q4_K and Q6_K of any output count (by default
// from kIdotKQuantMinRows) take the integer-dot path, with `t`'s other knobs.
std::unique_ptr<vk::VulkanBackend> IdotVulkan(vk::VulkanTuning t = {}) {
  t.knobs.Set(vk::Knob::kGemvIdot, "1");
  t.knobs.Set(vk::Knob::kGemvIdotQ4K, "1");
  t.knobs.Set(vk::Knob::kGemvIdotQ6K, "1");
  return MakeVulkan(t);
}

// Whether the last run's one GEMV was an integer-dot one (a matmul_gemv_*_idot* shader).
bool RanIdotGemv(vk::VulkanBackend& be) {
  int idot = 0, gemv = 0;
  for (const std::string& n : be.counters().shaders) {
    if (n.rfind("matmul_gemv_", 0) != 0) continue;
    ++gemv;
    idot += n.find("_idot") != std::string::npos;
  }
  EXPECT_EQ(gemv, 1);
  return idot == 1;
}

// By default (ES_VK_GEMV_IDOT_Q4K / _Q6K auto) the dense one-row Q4_K and Q6_K GEMVs take the
// integer dots from kIdotKQuantMinRows outputs (the 7B's FFN and lm_head), the float GEMV below
// (V2-Lite's 576-3,072-output ones, where the dots lost); steps of 2+ rows take the dots at any
// output count; all against their references.
TEST_F(VulkanQuant, KQuantGemvTakesIntegerDotsFromItsOutputCount) {
  vk::VulkanTuning t;
  t.knobs.Set(vk::Knob::kGemvIdot, "1");
  auto be = MakeVulkan(t);
  const int at = int(vk::kIdotKQuantMinRows);
  for (DType dt : {DType::kQ4_K, DType::kQ6_K}) {
    CheckIdot(*be, dt, 1, 256, at, false, "k-quant idot at the rule's outputs");
    EXPECT_TRUE(RanIdotGemv(*be)) << Name(dt);
    const MatMulRun m = RunMatMul(*be, dt, 1, 256, at - 1, false, 161, "below the rule");
    EXPECT_FALSE(RanIdotGemv(*be)) << Name(dt);
    ExpectClose(m.got, RefMatMul(m.X, m.W, nullptr, 1), 1e-5, m.where);
    CheckIdot(*be, dt, 3, 256, 77, false, "k-quant idot of 3 rows below the outputs rule");
    EXPECT_TRUE(RanIdotGemv(*be)) << Name(dt) << " 3 rows";
  }
}

// The dense Q4_K GEMVs on the integer-dot path too (IDOT_K, as Q5_K), against the int8-x
// reference and apart from the f32 product (ES_VK_GEMV_IDOT_Q4K=0: it fails), over odd output
// counts and batch rows.
TEST_F(VulkanQuant, IdotQ4KDenseGemvUnderItsKnob) {
  auto be = IdotVulkan();
  for (int K : {256, 2304})
    for (int R : {1, 3, 8})
      CheckIdot(*be, DType::kQ4_K, R, K, R == 8 ? 19 : 37, R == 3, "q4_k idot");
}

// The dense Q6_K GEMVs (a Q4_K_M file's lm_head, some attn_v / ffn_down) on the integer-dot path
// (IDOT_K6, the experts' unit), against the int8-x reference and apart from the f32 product
// (ES_VK_GEMV_IDOT_Q6K=0: it fails), over odd output counts, batch rows 1 / 3 / 8 and the 7B's
// two row lengths (3,584: x quantized in the workgroups; 18,944, its ffn_down: x apart).
TEST_F(VulkanQuant, IdotQ6KDenseGemvUnderItsKnob) {
  auto be = IdotVulkan();
  for (int K : {3584, 18944})
    for (int R : {1, 3, 8})
      CheckIdot(*be, DType::kQ6_K, R, K, R == 8 ? 19 : 37, R == 3, "q6_k idot");
}

// A one-row GEMV of more outputs than ops/matmul.cpp kIdotLocalMaxN (an lm_head's) reads x
// quantized by a dispatch of its own (quantize_q8, then matmul_gemv_*_idot), not again in each of
// its workgroups; with 16,384 outputs x is quantized in the workgroups (matmul_gemv_*_idotl).
TEST_F(VulkanQuant, IdotWideGemvQuantizesXOnce) {
  auto be = IdotVulkan();
  for (const auto& [N, gemv] :
       {std::pair{16384, "matmul_gemv_q6_k_idotl"}, std::pair{16389, "matmul_gemv_q6_k_idot"}}) {
    CheckIdot(*be, DType::kQ6_K, 1, 512, N, false, "wide idot");
    const std::vector<std::string> sh = be->counters().shaders;
    const std::string g = gemv;  // or its clustered variant; "/" then the spec constants
    const bool wanted = std::count_if(sh.begin(), sh.end(), [&](const std::string& n) {
                          return n.rfind(g + "/", 0) == 0 || n.rfind(g + "_c/", 0) == 0;
                        }) == 1;
    const bool quantize = std::count(sh.begin(), sh.end(), std::string("quantize_q8")) == 1;
    EXPECT_EQ(quantize, N > 16384) << "N=" << N;
    EXPECT_TRUE(wanted) << "N=" << N;
  }
}

TEST_F(VulkanQuant, IdotGemvMatchesQuantizedReference) {
  auto be = IdotVulkan();
  // K: 1 block, 3 blocks, 65 blocks (more units than a group's invocations; Q4_K: 9 blocks of
  // 256, 36 chunks); N: partial last workgroups; R = 3 and 8: several batch rows per workgroup.
  for (DType dt : kIdotTypes)
    for (int K : {IdotK(dt, 32, 256), IdotK(dt, 96, 768), IdotK(dt, 2080, 2304)})
      for (int R : {1, 3, 8}) CheckIdot(*be, dt, R, K, R == 8 ? 19 : 37, R == 3, "idot");
  // 8 rows of 81 blocks: the in-workgroup quantization takes two steps (2432 + 160 elements;
  // Q4_K: 2304 + 256, steps of whole 256-blocks).
  for (DType dt : kIdotTypes)
    CheckIdot(*be, dt, 8, IdotK(dt, 2592, 2560), 13, true, "idot two steps");
  // By default rows longer than 8192 are quantized by a dispatch of their own (257 blocks: three
  // quantize_q8 workgroups a row), the GEMV taking QR 1 for want of workgroups.
  for (DType dt : kIdotTypes)
    CheckIdot(*be, dt, 2, IdotK(dt, 8224, 8448), 23, false, "idot, long rows");
  // ... and every row with ES_VK_GEMV_IDOT_LOCAL=0 (131 blocks: two workgroups a row).
  ScopedKnobs local(*be, {{"ES_VK_GEMV_IDOT_LOCAL", "0"}});
  for (DType dt : kIdotTypes)
    CheckIdot(*be, dt, 3, IdotK(dt, 4192, 4352), 11, false, "idot, x quantized apart");
}

// Invocations per row group, rows per group, workgroup size, x quantized by a dispatch of its
// own (ES_VK_GEMV_IDOT_TPR, _QR, _WG, _LOCAL=0), units loaded ahead (_UNROLL), and the
// workgroups the default QR keeps (ES_VK_GEMV_MIN_GROUPS).
TEST_F(VulkanQuant, IdotGemvKnobsAllGiveTheReference) {
  const std::vector<std::pair<const char*, const char*>> settings[] = {
      {{"ES_VK_GEMV_IDOT_TPR", "128"}, {"ES_VK_GEMV_IDOT_QR", "1"}},
      {{"ES_VK_GEMV_IDOT_TPR", "256"}, {"ES_VK_GEMV_IDOT_QR", "8"}},
      {{"ES_VK_GEMV_IDOT_TPR", "32"}, {"ES_VK_GEMV_IDOT_QR", "4"}, {"ES_VK_GEMV_IDOT_WG", "256"}},
      {{"ES_VK_GEMV_IDOT_LOCAL", "0"}, {"ES_VK_GEMV_IDOT_TPR", "64"}, {"ES_VK_GEMV_IDOT_QR", "2"}},
      // Units loaded ahead of their sums (65 units a row: the last step is partial).
      {{"ES_VK_GEMV_IDOT_UNROLL", "2"}},
      {{"ES_VK_GEMV_IDOT_UNROLL", "4"}, {"ES_VK_GEMV_IDOT_TPR", "16"}, {"ES_VK_GEMV_IDOT_QR", "4"}},
      {{"ES_VK_GEMV_IDOT_UNROLL", "2"},
       {"ES_VK_GEMV_IDOT_LOCAL", "0"},
       {"ES_VK_GEMV_IDOT_QR", "8"}},
      // The default QR with fewer workgroups wanted than a QR of 4 gives (45 outputs), and
      // QR 0 (the default, said explicitly) with x quantized apart.
      {{"ES_VK_GEMV_MIN_GROUPS", "0"}},
      {{"ES_VK_GEMV_IDOT_QR", "0"}, {"ES_VK_GEMV_IDOT_LOCAL", "0"}}};
  for (const auto& s : settings) {
    vk::VulkanTuning t;
    std::string what;
    for (const auto& [name, value] : s) {
      t.knobs.Set(name, value);
      what += std::string(name) + "=" + value + " ";
    }
    auto be = IdotVulkan(t);
    // Every other type a setting, alternating (IdotFusedFfnMatchesQuantizedReference says why).
    for (size_t ti = (&s - settings) % 2; ti < std::size(kIdotTypes); ti += 2) {
      const DType dt = kIdotTypes[ti];
      CheckIdot(*be, dt, 3, IdotK(dt, 2080, 2304), 45, true, what);
    }
  }
}

// The output projection over a split decode attention: the attention's combine step writes its
// output quantized (attention_combine QUANT, int8 for Q4_0, int16 for Q8_0) and the integer-dot
// GEMV reads that instead of quantizing x in its workgroups. Against the quantized-x reference
// over the attention's own f32 output, and against ES_VK_ATTN_QUANT=0 (the in-workgroup
// quantization of the same x: the same levels); heads of 32 over the kv-head kernel
// (attention_decode.comp) and of 64 with 16-wide keys over attention.comp; one step of 8 rows,
// two slots.
TEST_F(VulkanQuant, IdotOutputProjectionReadsTheAttentionsQuantizedOutput) {
  struct Shape {
    int Hq, Hkv, dk, dv;
  };
  Batch b;
  b.Add(0, 0, {1, 2, 3, 4, 5}, true);
  b.Add(1, 0, {6, 7, 8}, true);
  b.Finalize();
  const int T = 8, N = 40;
  for (const Shape s0 : {Shape{4, 2, 32, 32}, Shape{3, 1, 16, 64}})
    for (DType dt : kIdotTypes) {
      Shape s = s0;
      if (BlockElems(dt) == 256) s.Hq = 256 / s.dv;  // rows of whole 256-blocks: 8 and 4 heads
      const int K = s.Hq * s.dv;
      Tensor Q = RandomTensor("q", DType::kF32, {9, s.Hq * s.dk}, 191);
      Tensor Kt = RandomTensor("k", DType::kF32, {9, s.Hkv * s.dk}, 192);
      Tensor V = RandomTensor("v", DType::kF32, {9, s.Hkv * s.dv}, 193);
      Tensor W = RandomTensor("wo", dt, {N, K}, 194);
      auto build = [&](bool project) {
        Graph g;
        const int a = AddCachedAttention(g, Input(g, Q, T), Input(g, Kt, T), Input(g, V, T), T,
                                         s.Hq, s.Hkv, s.dk, s.dv, 0);
        if (project) g.Add(Make(Op::kMatMul, "o", {a, g.AddWeight(W)}, {T, N}));
        return g;
      };
      const std::string where = std::string(Name(dt)) + " dv=" + std::to_string(s.dv);
      const KvSpec spec{1, {s.Hkv * s.dk, s.Hkv * s.dv}, DType::kF32};
      auto be = IdotVulkan();
      auto kv = be->CreateKv(spec, 2, 16);
      const std::vector<float> attn = RunGraph(*be, build(false), b, kv.get());
      auto kv2 = be->CreateKv(spec, 2, 16);
      const std::vector<float> got = RunGraph(*be, build(true), b, kv2.get());
      ExpectClose(got, RefIdot(QuantizedRows(attn, T, K, dt), W, nullptr, T), kIdotTol, where);
      ScopedKnobs off("ES_VK_ATTN_QUANT", "0");
      auto be_local = IdotVulkan();
      auto kv3 = be_local->CreateKv(spec, 2, 16);
      ExpectClose(got, RunGraph(*be_local, build(true), b, kv3.get()), 1e-6,
                  where + " vs in-workgroup x");
    }
}

// h (the SwiGLU output, [T, I]) is quantized to int8 per 32-block for the down GEMV, on the GPU
// from its f32 sums and in the reference from f64 ones: an element within a rounding step's
// error of a level boundary may take the neighbouring level (seen on the H200: one level of one
// element, 1.7e-3 of the output). Returns `want` moved towards `got`, for each output, by at most
// what such flips can explain: Σ over h's elements within 1e-3 of a level's half of |W[d, i]|
// times the block's step. What is left is checked at the usual tolerance, so a wrong sum still
// fails.
// For one row h [I] of a down GEMV's x: the most its int8 (Q8_0: int16) levels flipping at a
// rounding boundary can move each output of Wd [D, I] — Σ over h's elements within 1e-3 of a
// level's half of |W[d, i]| times the block's step.
std::vector<double> LevelFlipSlack(const float* h, const std::vector<float>& w, int D, int I,
                                   DType wt) {
  const float levels = wt == DType::kQ8_0 ? 32512.0f : 127.0f;
  std::vector<std::pair<int, float>> near;  // (element, step)
  for (int b = 0; b < I / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(h[32 * b + i]));
    const float d = amax / levels;
    if (d == 0.0f) continue;
    for (int i = 0; i < 32; ++i) {
      const float v = h[32 * b + i] / d;
      if (std::fabs(std::fabs(v - std::trunc(v)) - 0.5f) < 1e-3f) near.push_back({32 * b + i, d});
    }
  }
  std::vector<double> slack(size_t(D), 0.0);
  for (int n = 0; n < D; ++n)
    for (const auto& [i, d] : near) slack[size_t(n)] += std::fabs(double(w[size_t(n * I + i)])) * d;
  return slack;
}

// `want` moved towards `got` by at most `slack` per element.
std::vector<float> WithinSlack(const std::vector<float>& got, std::vector<float> want,
                               const std::vector<double>& slack) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = double(got[i]) - double(want[i]);
    want[i] += float(std::max(-slack[i], std::min(slack[i], diff)));
  }
  return want;
}

std::vector<float> ExplainLevelFlips(const std::vector<float>& got, std::vector<float> want,
                                     const std::vector<float>& h, const Tensor& Wd, int T) {
  const int D = int(Wd.rows()), I = int(Wd.cols());
  std::vector<float> w(size_t(D) * size_t(I));
  Dequantize(Wd.dtype, Wd.data, w.data(), int64_t(w.size()));
  std::vector<double> slack;
  for (int r = 0; r < T; ++r) {
    const std::vector<double> s = LevelFlipSlack(&h[size_t(r * I)], w, D, I, Wd.dtype);
    slack.insert(slack.end(), s.begin(), s.end());
  }
  return WithinSlack(got, std::move(want), slack);
}

// The decode FFN with every fusion: the folded norm is applied while quantizing x, gate/up are
// one dual integer-dot GEMV, down adds the residual: 2 inputs + 2 GEMVs, with x quantized in the
// GEMV workgroups (ES_VK_GEMV_IDOT_LOCAL=1; also with units loaded ahead,
// ES_VK_GEMV_IDOT_UNROLL=2), or the dual's x by a dispatch of its own (=3, the default, and =0; =3
// takes every x of a step of more than one row apart, as =0: `dispatches` for 1 and for 3 rows) —
// then the dual GEMV also writes down's x quantized (QOUT, ES_VK_GEMV_DUAL_QUANT 1: QR 8, 2: TPR
// 32, the default for Q4_0; 0, the default for Q8_0: down's x is quantized in its workgroups (=3)
// or by a dispatch of its own (=0)).
TEST_F(VulkanQuant, IdotFusedFfnMatchesQuantizedReference) {
  const RefMm mm = [](const std::vector<float>& x, const Tensor& W, int T) {
    return RefIdot(QuantizedRows(x, T, int(W.cols()), W.dtype), W, nullptr, T);
  };
  struct Setting {
    const char *local, *unroll, *dual_quant;
    int dispatches[2];
  };
  const Setting settings[] = {Setting{"1", "1", "1", {4, 4}}, Setting{"1", "2", "1", {4, 4}},
                              Setting{"0", "1", "1", {5, 5}}, Setting{"0", "1", "0", {6, 6}},
                              Setting{"3", "1", "1", {5, 5}}, Setting{"3", "2", "2", {5, 5}},
                              Setting{"3", "1", "0", {5, 6}}};
  const DType types[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_K, DType::kQ4_K, DType::kQ6_K};
  // Each setting over every other type (by index parity: 2 or 3 types a setting, 3 or 4 settings
  // a type), as the settings change the shared GEMV code and the types only its unit decode: on
  // lavapipe each (setting, type) pair compiles its own pipelines, ~2 s each on CI's 2 cores
  // (the whole cross product took 152 s of session 38's CI).
  for (size_t si = 0; si < std::size(settings); ++si)
    for (size_t ti = 0; ti < std::size(types); ++ti)
      for (int T : {1, 3}) {
        if ((si + ti) % 2) continue;
        const Setting& st = settings[si];
        const DType dt = types[ti];
        ScopedKnobs env{{"ES_VK_GEMV_IDOT_LOCAL", st.local},
                        {"ES_VK_GEMV_IDOT_UNROLL", st.unroll},
                        {"ES_VK_GEMV_DUAL_QUANT", st.dual_quant}};
        auto be = IdotVulkan();
        std::vector<float> want, h;
        Tensor Wd;
        const int D = IdotK(dt, 64, 256), I = IdotK(dt, 96, 512);
        const std::vector<float> got = RunFfn(*be, dt, T, D, I, 171, mm, &want, &h, &Wd);
        const std::string what = std::string("idot fused FFN local=") + st.local +
                                 " unroll=" + st.unroll + " dual_quant=" + st.dual_quant +
                                 " T=" + std::to_string(T) + " " + std::string(Name(dt));
        EXPECT_EQ(be->counters().dispatches, st.dispatches[T == 1 ? 0 : 1]) << what;
        ExpectClose(got, ExplainLevelFlips(got, want, h, Wd, T), kIdotTol, what);
      }
}

// A Q4_K_M file's dense FFN: gate/up of one type, down of another of the same x format (int8:
// Q4_K gate/up over a Q5_K or Q6_K down, Q4_0 over Q4_K). The dual GEMV writes h quantized
// (QOUT, a `_idot_dual_q` variant) for the down GEMV: 2 inputs, the norm's quantize_q8, the dual
// GEMV, the down GEMV — 5 dispatches. Without (a Q8_0 down, int16 x, under Q4_0; every mixed
// pair while the producer's and the reader's weight types had to be equal) a 3-row step's down
// GEMV has a quantize_q8 of its own (6), a one-row step's quantizes h in its workgroups (5).
// Against the int8-x reference (level flips of h explained).
TEST_F(VulkanQuant, IdotDualQuantizesHForADownOfAnotherType) {
  const RefMm mm = [](const std::vector<float>& x, const Tensor& W, int T) {
    return RefIdot(QuantizedRows(x, T, int(W.cols()), W.dtype), W, nullptr, T);
  };
  struct Case {
    DType gate_up, down;
    bool shared;  // the dual GEMV writes the down GEMV's x
  };
  auto be = IdotVulkan();
  for (const Case c :
       {Case{DType::kQ4_K, DType::kQ5_K, true}, Case{DType::kQ4_K, DType::kQ6_K, true},
        Case{DType::kQ4_0, DType::kQ4_K, true}, Case{DType::kQ4_0, DType::kQ8_0, false}})
    for (int T : {1, 3}) {
      std::vector<float> want, h;
      Tensor Wd;
      const std::vector<float> got =
          RunFfn(*be, c.gate_up, T, 256, 512, 181, mm, &want, &h, &Wd, c.down);
      const std::string what = "idot FFN " + std::string(Name(c.gate_up)) + "/" +
                               std::string(Name(c.down)) + " T=" + std::to_string(T);
      EXPECT_EQ(be->counters().dispatches, c.shared || T == 1 ? 5 : 6) << what;
      const std::vector<std::string>& sh = be->counters().shaders;
      const bool qout = std::any_of(sh.begin(), sh.end(), [](const std::string& n) {
        return n.find("_idot_dual_q/") != std::string::npos;
      });
      EXPECT_EQ(qout, c.shared) << what;
      ExpectClose(got, ExplainLevelFlips(got, want, h, Wd, T), kIdotTol, what);
    }
}

// E experts' gate, up [I, D] of type dt and down [D, I] of type `down` (dt if not given; seeds
// seed + 10 + 3e ..), scaled 0.5.
std::vector<Tensor> RandomExperts(int E, int D, int I, DType dt, uint64_t seed,
                                  std::optional<DType> down = std::nullopt) {
  std::vector<Tensor> ex;
  ex.reserve(size_t(3 * E));
  for (int e = 0; e < E; ++e) {
    const uint64_t s = seed + 10 + 3 * uint64_t(e);
    ex.push_back(RandomTensor("g" + std::to_string(e), dt, {I, D}, s, 0.5f));
    ex.push_back(RandomTensor("u" + std::to_string(e), dt, {I, D}, s + 1, 0.5f));
    ex.push_back(RandomTensor("d" + std::to_string(e), down.value_or(dt), {D, I}, s + 2, 0.5f));
  }
  return ex;
}

// A DeepSeek decode FFN block as models/arch.cpp MlpBlock builds it, from the normed x on:
// norm(x0) → shared experts (gate, up, SwiGLU, down) added to `shared_res` → t; MoE (router G,
// experts ex, routing p) over the normed x → t + moe, the graph's output.
void AddMoeDecodeBlock(Graph& g, int x0, int shared_res, const Tensor& Nw, const Tensor& G,
                       const Tensor& Sg, const Tensor& Su, const Tensor& Sd,
                       const std::vector<Tensor>& ex, std::shared_ptr<MoeParams> p, int T, int D,
                       int I) {
  Node nn = Make(Op::kRmsNorm, "norm", {x0, g.AddWeight(Nw)}, {T, D});
  nn.params = RmsNormParams{1e-5f};
  const int xn = g.Add(nn);
  const int sg = g.Add(Make(Op::kMatMul, "sh.gate", {xn, g.AddWeight(Sg)}, {T, I}));
  const int su = g.Add(Make(Op::kMatMul, "sh.up", {xn, g.AddWeight(Su)}, {T, I}));
  const int sa = g.Add(Make(Op::kSwiGLU, "sh.act", {sg, su}, {T, I}));
  const int sd = g.Add(Make(Op::kMatMul, "sh.down", {sa, g.AddWeight(Sd)}, {T, D}));
  const int t = g.Add(Make(Op::kAdd, "shared_residual", {shared_res, sd}, {T, D}));
  Node m = Make(Op::kMoE, "moe", {xn, g.AddWeight(G), -1}, {T, D});
  for (const Tensor& w : ex) m.src.push_back(g.AddWeight(w));
  m.params = MoeOpParams{*p};
  const int mo = g.Add(m);
  g.Add(Make(Op::kAdd, "mlp_residual", {t, mo}, {T, D}));
}

// A DeepSeek decode FFN block as the model builds it (models/arch.cpp MlpBlock): norm → shared
// experts (dual GEMV, down + residual) → t; MoE over the normed x (router, routing, the routed
// experts' integer-dot GEMVs) → t + moe. With every fusion the norm is folded into the shared
// dual GEMV, the router and the experts' up GEMV, and the last add into the experts' down GEMV:
// 7 dispatches against 11 unfused (9 if the MoE took neither), each + 2 for the inputs' embeddings;
// 6 fused for up to 4 rows, whose router GEMV also routes (ops/moe.cpp RouteInRouterGemv).
// Reference: x quantized per 32-block wherever the GPU quantizes it (the normed x for every GEMV
// reading it, h for each down), routing on the f32 logits, each token's choices added in order.
TEST_F(VulkanQuant, IdotMoeDecodeBlockMatchesQuantizedReference) {
  const int E = 8;
  for (DType dt : kIdotTypes)
    for (int T : {1, 3, 8})
      for (const char* fuse : {"1", "0"}) {
        const int D = IdotK(dt, 64, 256), I = IdotK(dt, 96, 512);
        auto p = std::make_shared<MoeParams>();
        p->n_experts = E;
        p->top_k = 3;
        p->ffn_dim = I;
        p->norm_topk_prob = T == 3;
        p->routed_scaling_factor = T == 3 ? 2.5f : 1.0f;
        const uint64_t seed = 300 + uint64_t(T);
        Tensor X = RandomTensor("x", DType::kF32, {T, D}, seed),
               Rs = RandomTensor("res", DType::kF32, {T, D}, seed + 1);
        Tensor Nw = RandomTensor("norm.w", DType::kF32, {D}, seed + 2);
        Tensor G = RandomTensor("router", DType::kF32, {E, D}, seed + 3);
        Tensor Sg = RandomTensor("sg", dt, {I, D}, seed + 4),
               Su = RandomTensor("su", dt, {I, D}, seed + 5);
        Tensor Sd = RandomTensor("sd", dt, {D, I}, seed + 6);
        std::vector<Tensor> ex = RandomExperts(E, D, I, dt, seed);
        Graph g;
        const int res = Input(g, Rs, T), x0 = Input(g, X, T);
        AddMoeDecodeBlock(g, x0, res, Nw, G, Sg, Su, Sd, ex, p, T, D, I);
        ScopedKnobs env("ES_VK_FUSE", fuse);
        auto be = IdotVulkan();
        const std::vector<float> got = RunGraph(*be, g, RowsBatch(T));
        const std::string what =
            "idot moe block " + std::string(Name(dt)) + " T=" + std::to_string(T) + " fuse=" + fuse;
        // Steps of 2+ rows quantize every x apart (ops/matmul.cpp IdotQuantizeOnce): fused, the
        // shared down's x (Q8_0, whose dual GEMV does not write it quantized); unfused, the
        // normed x of the shared gate/up and the shared down's x.
        const int apart = T == 1 ? 0 : std::string(fuse) == "1" ? (dt == DType::kQ8_0 ? 1 : 0) : 2;
        EXPECT_EQ(be->counters().dispatches,
                  2 + (std::string(fuse) == "1" ? (T <= 4 ? 6 : 7) : 11) + apart)
            << what;

        std::vector<float> xnv(size_t(T * D));
        ref::RmsNorm(X.as<float>(), Nw.as<float>(), T, D, 1e-5f, xnv.data());
        const Tensor xq = QuantizedRows(xnv, T, D, dt);
        auto ffn = [&](const Tensor& Wg, const Tensor& Wu, const Tensor& Wd) {
          const std::vector<float> gv = RefIdot(xq, Wg, nullptr, T),
                                   uv = RefIdot(xq, Wu, nullptr, T);
          std::vector<float> a(gv.size());
          for (size_t i = 0; i < gv.size(); ++i) a[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
          return RefIdot(QuantizedRows(a, T, I, dt), Wd, nullptr, T);
        };
        std::vector<float> want = ffn(Sg, Su, Sd);
        Tensor XN = AllocTensor("xn", DType::kF32, {T, D});
        std::copy(xnv.begin(), xnv.end(), static_cast<float*>(MutableData(XN)));
        const std::vector<float> rv = Values(Rs), gl = RefMatMul(XN, G, nullptr, T);
        for (int r = 0; r < T; ++r) {
          std::vector<int32_t> ids(size_t(p->top_k));
          std::vector<float> wts(size_t(p->top_k));
          ref::MoeRoute(&gl[size_t(r * E)], nullptr, *p, ids.data(), wts.data());
          std::vector<float> routed(size_t(D), 0.0f);
          for (int j = 0; j < p->top_k; ++j) {
            const int e = ids[size_t(j)];
            const std::vector<float> y =
                ffn(ex[size_t(3 * e)], ex[size_t(3 * e + 1)], ex[size_t(3 * e + 2)]);
            for (int d = 0; d < D; ++d) routed[size_t(d)] += wts[size_t(j)] * y[size_t(r * D + d)];
          }
          for (int d = 0; d < D; ++d) {
            const size_t i = size_t(r * D + d);
            want[i] = (rv[i] + want[i]) + routed[size_t(d)];
          }
        }
        // h, the down GEMVs' x, is quantized from the GPU's f32 sums and in the reference from
        // f64 ones: a level apart at times (q5_k T=1: 1.02e-4 of the block's output).
        ExpectClose(got, want, 2 * kIdotTol, what);
      }
}

// The same decode FFN block over float and block types without integer-dot GEMVs (and Q8_0 /
// Q4_0 / Q5_K on a device whose dot products are not in hardware): the routed experts take the
// float / block-type expert GEMVs (matmul_gemv.comp MOE over f32 x, ops/moe.cpp
// RecordVecExperts), so with every fusion the norm folds into the shared dual GEMV, the router and
// the up GEMV, and the last add into the down GEMV: 6 dispatches (shared gate/up, shared down +
// residual, router, routing, the experts' up and down; 11 unfused; 5 for up to 4 rows, whose
// router GEMV also routes), + 2 for the inputs. gate/up and
// down may differ in type (q4_k_m files: Q4_K and Q6_K). The small cases (D 32) are shaped as the
// model builds the block: x comes from an output projection with its residual folded in, the
// shared experts are added to x itself (x read by the folded norms and by the shared down), and
// V2's group-limited routing. Reference: f32 math over the weights' values.
TEST_F(VulkanQuant, MoeDecodeBlockOverFloatAndBlockTypes) {
  const int E = 8;
  struct Case {
    DType gu, dn;
    int D, I;
  };
  const Case cases[] = {
      {DType::kBF16, DType::kBF16, 32, 24},   {DType::kF32, DType::kF32, 32, 16},
      {DType::kF16, DType::kF16, 256, 512},   {DType::kBF16, DType::kBF16, 256, 512},
      {DType::kF32, DType::kF32, 256, 512},   {DType::kQ4_K, DType::kQ6_K, 256, 512},
      {DType::kQ6_K, DType::kQ6_K, 256, 512}, {DType::kQ4_1, DType::kQ8_0, 256, 512},
      {DType::kF16, DType::kQ5_1, 256, 512}};
  for (const auto& [gu, dn, D, I] : cases)
    for (int T : {1, 3, 8})
      for (const char* fuse : {"1", "0"}) {
        if (T == 8 && gu != DType::kF16 && gu != DType::kQ4_K && D != 32)
          continue;  // lavapipe compiles slowly
        auto p = std::make_shared<MoeParams>();
        p->n_experts = E;
        p->top_k = 3;
        p->ffn_dim = I;
        p->norm_topk_prob = T == 3;
        p->routed_scaling_factor = T == 3 ? 2.5f : 1.0f;
        if (D == 32) {  // DeepSeek-V2's group-limited routing
          p->n_group = 4;
          p->topk_group = 2;
          p->topk_method = TopkMethod::kGroupLimitedGreedy;
          p->norm_topk_prob = false;
          p->routed_scaling_factor = 2.0f;
        }
        const uint64_t seed = 900 + uint64_t(T);
        Tensor X = RandomTensor("x", DType::kF32, {T, D}, seed),
               Rs = RandomTensor("res", DType::kF32, {T, D}, seed + 1);
        Tensor Nw = RandomTensor("norm.w", DType::kF32, {D}, seed + 2);
        Tensor G = RandomTensor("router", gu == DType::kF32 ? DType::kF32 : DType::kBF16, {E, D},
                                seed + 3);
        Tensor Sg = RandomTensor("sg", gu, {I, D}, seed + 4),
               Su = RandomTensor("su", gu, {I, D}, seed + 5);
        Tensor Sd = RandomTensor("sd", dn, {D, I}, seed + 6);
        std::vector<Tensor> ex = RandomExperts(E, D, I, gu, seed, dn);
        Graph g;
        const int res = Input(g, Rs, T), xin = Input(g, X, T);
        Tensor Wo =
            RandomTensor("wo", gu == DType::kF32 ? DType::kF32 : DType::kBF16, {D, D}, seed + 7);
        const bool model_like = D == 32;
        int x0 = xin;
        if (model_like) {
          const int o = g.Add(Make(Op::kMatMul, "o", {xin, g.AddWeight(Wo)}, {T, D}));
          x0 = g.Add(Make(Op::kAdd, "attn_residual", {res, o}, {T, D}));
        }
        // The small cases add the shared experts to x itself, as the model does (x is then read
        // by the folded norms and by the shared down's residual).
        AddMoeDecodeBlock(g, x0, model_like ? x0 : res, Nw, G, Sg, Su, Sd, ex, p, T, D, I);
        ScopedKnobs env("ES_VK_FUSE", fuse);
        auto be = MakeVulkan({});  // the float GEMVs (no integer-dot ones)
        if (model_like)            // weights uploaded one by one first, as a model load does
          for (const Tensor* w : {&Nw, &G, &Sg, &Su, &Sd, &Wo}) be->PrepareWeight(*w);
        if (model_like)
          for (const Tensor& w : ex) be->PrepareWeight(w);
        const std::vector<float> got = RunGraph(*be, g, RowsBatch(T));
        const std::string what = "moe block " + std::string(Name(gu)) + "/" +
                                 std::string(Name(dn)) + " T=" + std::to_string(T) +
                                 " fuse=" + fuse;
        // model_like: + the output projection (its residual add folded in, or apart).
        EXPECT_EQ(be->counters().dispatches,
                  2 + (std::string(fuse) == "1" ? (T <= 4 ? 5 : 6) : 11) +
                      (model_like ? (fuse[0] == '1' ? 1 : 2) : 0))
            << what;

        // x0: X, or (model_like) Rs + X Woᵀ.
        std::vector<float> x0v = Values(X);
        if (model_like) {
          x0v = RefMatMul(X, Wo, nullptr, T);
          const std::vector<float> r = Values(Rs);
          for (size_t i = 0; i < x0v.size(); ++i) x0v[i] = r[i] + x0v[i];
        }
        std::vector<float> xnv(size_t(T * D));
        ref::RmsNorm(x0v.data(), Nw.as<float>(), T, D, 1e-5f, xnv.data());
        Tensor XN = AllocTensor("xn", DType::kF32, {T, D});
        std::copy(xnv.begin(), xnv.end(), static_cast<float*>(MutableData(XN)));
        const std::vector<float> gv = RefMatMul(XN, Sg, nullptr, T),
                                 uv = RefMatMul(XN, Su, nullptr, T);
        Tensor A = AllocTensor("a", DType::kF32, {T, I});
        float* a = static_cast<float*>(MutableData(A));
        for (size_t i = 0; i < gv.size(); ++i) a[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
        std::vector<float> want = RefMatMul(A, Sd, nullptr, T);
        std::vector<float> routed(size_t(T * D), 0.0f);
        std::vector<const Tensor*> eptr;
        for (auto& w : ex) eptr.push_back(&w);
        ref::MoE(xnv.data(), T, D, G, nullptr, eptr, *p, routed.data());
        const std::vector<float> rv = model_like ? x0v : Values(Rs);
        for (size_t i = 0; i < want.size(); ++i) want[i] = (rv[i] + want[i]) + routed[i];
        ExpectClose(got, want, 1e-4, what);
      }
}

// The routed experts' GEMVs past 8 rows (ops.h kMoeGemvMaxRows): a lone MoE node over 20 and 33
// rows (no norm to fold, no shared experts: the matmuls past 8 rows are GEMMs on f32 x), against
// the reference over x quantized per 32-block, h quantized again for each down.
TEST_F(VulkanQuant, IdotMoeGemvPastEightRows) {
  const int E = 8;
  for (DType dt : kIdotTypes)
    for (int T : {20, 33}) {
      const int D = IdotK(dt, 64, 256), I = IdotK(dt, 96, 512);
      auto p = std::make_shared<MoeParams>();
      p->n_experts = E;
      p->top_k = 3;
      p->ffn_dim = I;
      p->norm_topk_prob = true;
      p->routed_scaling_factor = 2.5f;
      const uint64_t seed = 700 + uint64_t(T);
      Tensor X = RandomTensor("x", DType::kF32, {T, D}, seed);
      Tensor G = RandomTensor("router", DType::kF32, {E, D}, seed + 3);
      std::vector<Tensor> ex = RandomExperts(E, D, I, dt, seed);
      Graph g;
      Node m = Make(Op::kMoE, "moe", {Input(g, X, T), g.AddWeight(G), -1}, {T, D});
      for (auto& w : ex) m.src.push_back(g.AddWeight(w));
      m.params = MoeOpParams{*p};
      g.Add(m);
      auto be = IdotVulkan();
      const std::vector<float> got = RunGraph(*be, g, RowsBatch(T));
      const std::string what = "idot moe " + std::string(Name(dt)) + " T=" + std::to_string(T);
      const Tensor xq = QuantizedRows(Values(X), T, D, dt);
      const std::vector<float> gl = RefMatMul(X, G, nullptr, T);
      std::vector<float> want(size_t(T * D), 0.0f);
      for (int r = 0; r < T; ++r) {
        std::vector<int32_t> ids(size_t(p->top_k));
        std::vector<float> wts(size_t(p->top_k));
        ref::MoeRoute(&gl[size_t(r * E)], nullptr, *p, ids.data(), wts.data());
        for (int j = 0; j < p->top_k; ++j) {
          const int e = ids[size_t(j)];
          const std::vector<float> gv = RefIdot(xq, ex[size_t(3 * e)], nullptr, T),
                                   uv = RefIdot(xq, ex[size_t(3 * e + 1)], nullptr, T);
          std::vector<float> a(gv.size());
          for (size_t i = 0; i < gv.size(); ++i) a[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
          const std::vector<float> y =
              RefIdot(QuantizedRows(a, T, I, dt), ex[size_t(3 * e + 2)], nullptr, T);
          for (int d = 0; d < D; ++d)
            want[size_t(r * D + d)] += wts[size_t(j)] * y[size_t(r * D + d)];
        }
      }
      // h quantized from f32 sums here and f64 ones in the reference: over 60-99 pairs a few
      // levels apart (q5_k T=20: 2.3e-4).
      ExpectClose(got, want, 3 * kIdotTol, what);
      EXPECT_EQ(be->counters().dispatches, 1 + 4) << what;  // x; router, route, up, down
    }
}

// The routed experts' integer-dot GEMVs over every block type a K-quant mix puts in experts,
// gate/up and down of different types (the up GEMV writes h in its own x format: int16 for a
// Q8_0 gate/up, else int8, which a Q8_0 down then reads, "_down8"), forced on (lavapipe has no
// dot products in hardware): norm → MoE →
// + residual, the norm folded into the router and the up GEMV and the add into the down GEMV (6
// dispatches with the inputs'). Sizes: rows of 3 to 65 blocks (the downs of Q4_1 / Q5_1 and Q6_K
// hold more units than a group's 64 invocations), top_k 1 to 8 (the down GEMV loads 1 to 4
// choices before using them, some rounds partial), 1 to 8 rows (V2-Lite's mix also 20, where the
// norm and the add are not folded: the matmuls past 8 rows are GEMMs). A Q8_0 gate/up over a down
// of another type keeps the float expert GEMVs. Reference: each pair's gate/up over the normed x
// quantized per 32-block, its down over its h quantized again, in f64, the choices weighted and
// added; h's levels may flip at a rounding boundary (ExplainLevelFlips' allowance, weighted by the
// choice's routing weight), the rest within kIdotTol. The case also fails if the output is within
// f32 error of the float product (the integer-dot path did not run).
TEST_F(VulkanQuant, IdotMoeExpertsOverKQuantMixTypes) {
  struct Case {
    DType gu, dn;
    int D, I, top_k;
    bool idot;
  };
  const Case cases[] = {
      {DType::kQ4_K, DType::kQ5_1, 256, 352, 6, true},  // V2-Lite Q4_K_M's experts (I 1408)
      {DType::kQ4_K, DType::kQ6_K, 512, 512, 3, true},
      {DType::kQ5_K, DType::kQ6_K, 256, 768, 2, true},
      {DType::kQ6_K, DType::kQ6_K, 256, 4352, 4, true},
      {DType::kQ5_0, DType::kQ5_0, 160, 96, 3, true},
      {DType::kQ4_1, DType::kQ5_1, 96, 2080, 8, true},
      {DType::kQ5_1, DType::kQ4_0, 160, 224, 1, true},
      {DType::kQ8_0, DType::kQ8_0, 96, 160, 5, true},
      {DType::kQ4_0, DType::kQ4_K, 64, 256, 3, true},
      {DType::kQ4_K, DType::kQ8_0, 256, 96, 3, true},
      {DType::kQ8_0, DType::kQ4_0, 96, 64, 3, false}};
  const int E = 8;
  auto dequant = [](const Tensor& W) {
    std::vector<float> w(size_t(W.rows()) * size_t(W.cols()));
    Dequantize(W.dtype, W.data, w.data(), int64_t(w.size()));
    return w;
  };
  // W [N, K] (dequantized) times one row of x quantized per 32-block as for weights of type wt.
  auto mv = [](const std::vector<float>& w, int N, int K, const float* x, DType wt) {
    const std::vector<float> xq = Values(QuantizedRows(std::vector<float>(x, x + K), 1, K, wt));
    std::vector<float> y(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(w[size_t(n) * size_t(K) + size_t(k)]) * double(xq[size_t(k)]);
      y[size_t(n)] = float(s);
    }
    return y;
  };
  for (const Case& c : cases)
    for (int T : {1, 3, 8, 20}) {
      if (T == 20 && &c != cases) continue;  // past 8 rows (V2-Lite's mix only): nothing folded
      const int D = c.D, I = c.I;
      auto p = std::make_shared<MoeParams>();
      p->n_experts = E;
      p->top_k = c.top_k;
      p->ffn_dim = I;
      p->norm_topk_prob = T == 3;
      p->routed_scaling_factor = T == 3 ? 2.5f : 1.0f;
      const uint64_t seed = 1300 + uint64_t(T) + 100 * uint64_t(&c - cases);
      Tensor X = RandomTensor("x", DType::kF32, {T, D}, seed),
             Rs = RandomTensor("res", DType::kF32, {T, D}, seed + 1);
      Tensor Nw = RandomTensor("norm.w", DType::kF32, {D}, seed + 2);
      Tensor G = RandomTensor("router", DType::kF32, {E, D}, seed + 3);
      std::vector<Tensor> ex = RandomExperts(E, D, I, c.gu, seed, c.dn);
      Graph g;
      const int res = Input(g, Rs, T), x0 = Input(g, X, T);
      Node nn = Make(Op::kRmsNorm, "norm", {x0, g.AddWeight(Nw)}, {T, D});
      nn.params = RmsNormParams{1e-5f};
      const int xn = g.Add(nn);
      Node m = Make(Op::kMoE, "moe", {xn, g.AddWeight(G), -1}, {T, D});
      for (const Tensor& w : ex) m.src.push_back(g.AddWeight(w));
      m.params = MoeOpParams{*p};
      const int mo = g.Add(m);
      g.Add(Make(Op::kAdd, "mlp_residual", {res, mo}, {T, D}));
      auto be = IdotVulkan();
      const std::vector<float> got = RunGraph(*be, g, RowsBatch(T));
      const std::string what = "idot moe " + std::string(Name(c.gu)) + "/" +
                               std::string(Name(c.dn)) + " T=" + std::to_string(T);
      // Shader names are keys: the variant, then its constants.
      const vk::VulkanCounters cnt = be->counters();
      auto ran = [&](const std::string& v) {
        return std::any_of(cnt.shaders.begin(), cnt.shaders.end(), [&](const std::string& n) {
          return n.rfind(v + "/", 0) == 0 || n == v;
        });
      };
      const bool down8 = c.dn == DType::kQ8_0 && c.gu != DType::kQ8_0;
      const std::string up = "moe_gemv_" + std::string(Name(c.gu)) + (c.idot ? "_up" : "_fup"),
                        down = "moe_gemv_" + std::string(Name(c.dn)) +
                               (c.idot ? (down8 ? "_down8" : "_down") : "_fdown");
      EXPECT_TRUE(ran(up)) << what << ": no " << up;
      EXPECT_TRUE(ran(down)) << what << ": no " << down;
      if (T <= 8) {
        EXPECT_EQ(be->counters().dispatches, T <= 4 ? 5 : 6) << what;  // routing in the router GEMV
      }
      if (&c == cases && T == 3) {
        // The same over stacks of several buffers (a 160 KiB largest range: gate and up 3
        // blocks each, down 4), each choice's loads from its own buffer.
        vk::VulkanTuning t;
        t.knobs.Set(vk::Knob::kGemvIdot, "1");
        t.weights.max_range = 160 << 10;
        t.weights.block_bytes = 160 << 10;
        auto split = MakeVulkan(t);
        ExpectClose(RunGraph(*split, g, RowsBatch(T)), got, 1e-6, what + " over several buffers");
      }

      std::vector<float> xnv(size_t(T * D));
      ref::RmsNorm(X.as<float>(), Nw.as<float>(), T, D, 1e-5f, xnv.data());
      Tensor XN = AllocTensor("xn", DType::kF32, {T, D});
      std::copy(xnv.begin(), xnv.end(), static_cast<float*>(MutableData(XN)));
      const std::vector<float> rv = Values(Rs), gl = RefMatMul(XN, G, nullptr, T);
      // The float product (ref::MoE) and, for the integer-dot path, the quantized one.
      std::vector<float> f32(size_t(T * D), 0.0f);
      std::vector<const Tensor*> eptr;
      for (auto& w : ex) eptr.push_back(&w);
      ref::MoE(xnv.data(), T, D, G, nullptr, eptr, *p, f32.data());
      if (!c.idot) {
        for (size_t i = 0; i < f32.size(); ++i) f32[i] = rv[i] + f32[i];
        ExpectClose(got, f32, 1e-4, what);
        continue;
      }
      std::vector<float> want(size_t(T * D), 0.0f);
      std::vector<double> slack(size_t(T * D), 0.0);
      std::vector<std::vector<float>> deq(size_t(3 * E));
      for (int r = 0; r < T; ++r) {
        std::vector<int32_t> ids(size_t(p->top_k));
        std::vector<float> wts(size_t(p->top_k));
        ref::MoeRoute(&gl[size_t(r * E)], nullptr, *p, ids.data(), wts.data());
        for (int j = 0; j < p->top_k; ++j) {
          const int e = ids[size_t(j)];
          for (int k = 0; k < 3; ++k)
            if (deq[size_t(3 * e + k)].empty())
              deq[size_t(3 * e + k)] = dequant(ex[size_t(3 * e + k)]);
          const std::vector<float> gv = mv(deq[size_t(3 * e)], I, D, &xnv[size_t(r * D)], c.gu),
                                   uv = mv(deq[size_t(3 * e + 1)], I, D, &xnv[size_t(r * D)], c.gu);
          std::vector<float> a(static_cast<size_t>(I));
          for (int i = 0; i < I; ++i)
            a[size_t(i)] = gv[size_t(i)] / (1.0f + std::exp(-gv[size_t(i)])) * uv[size_t(i)];
          // h in the up GEMV's x format (gate/up's type: int8 unless Q8_0).
          const std::vector<float> y = mv(deq[size_t(3 * e + 2)], D, I, a.data(), c.gu);
          const std::vector<double> s =
              LevelFlipSlack(a.data(), deq[size_t(3 * e + 2)], D, I, c.gu);
          for (int d = 0; d < D; ++d) {
            want[size_t(r * D + d)] += wts[size_t(j)] * y[size_t(d)];
            slack[size_t(r * D + d)] += std::fabs(double(wts[size_t(j)])) * s[size_t(d)];
          }
        }
      }
      std::vector<float> got_routed(got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        got_routed[i] = got[i] - rv[i];
        want[i] = rv[i] + want[i];
      }
      ExpectClose(got, WithinSlack(got, want, slack), kIdotTol, what);
      // (int8 x: ~1e-3 from the float product; Q8_0's int16 x: ~1e-5.)
      EXPECT_GT(RelL2(got_routed, f32), c.gu == DType::kQ8_0 ? 2e-6 : 1e-5)
          << what << ": the integer-dot path did not run";
    }
}

// With x quantized by a dispatch of its own, projections of one normed x share its quantization
// per format: q and k (Q4_0) one int8 copy, v (Q8_0) an int16 one — two dispatches more than the
// float GEMVs (which fold the norm each), not three.
TEST_F(VulkanQuant, IdotQuantizesSharedInputOnce) {
  ScopedKnobs env("ES_VK_GEMV_IDOT_LOCAL", "0");
  const int D = 64, N = 40;
  Tensor X = RandomTensor("x", DType::kF32, {1, D}, 181);
  Tensor Nw = RandomTensor("norm.w", DType::kF32, {D}, 182);
  Tensor Wq = RandomTensor("wq", DType::kQ4_0, {N, D}, 183),
         Wk = RandomTensor("wk", DType::kQ4_0, {N, D}, 184),
         Wv = RandomTensor("wv", DType::kQ8_0, {N, D}, 185);
  Graph g;
  Node nn = Make(Op::kRmsNorm, "norm", {Input(g, X, 1), g.AddWeight(Nw)}, {1, D});
  nn.params = RmsNormParams{1e-5f};
  const int x = g.Add(nn);
  const int q = g.Add(Make(Op::kMatMul, "q", {x, g.AddWeight(Wq)}, {1, N}));
  const int k = g.Add(Make(Op::kMatMul, "k", {x, g.AddWeight(Wk)}, {1, N}));
  const int v = g.Add(Make(Op::kMatMul, "v", {x, g.AddWeight(Wv)}, {1, N}));
  g.Add(Make(Op::kSwiGLU, "qk", {q, k}, {1, N}));
  g.Add(Make(Op::kAdd, "out", {g.output(), v}, {1, N}));
  auto be_f = MakeVulkan({});
  const auto want = RunGraph(*be_f, g, RowsBatch(1));
  auto be = IdotVulkan();
  const auto got = RunGraph(*be, g, RowsBatch(1));
  EXPECT_EQ(be->counters().dispatches, be_f->counters().dispatches + 2);
  ExpectClose(got, want, 5e-2, "q/k/v over one quantized x per format");
}

TEST_F(VulkanQuant, IdotKnobOutOfRangeIsAClearError) {
  try {
    ScopedKnobs env("ES_VK_GEMV_IDOT", "2");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ES_VK_GEMV_IDOT"), std::string::npos) << e.what();
  }
}

// ---- small TPR: 4, 8 or 16 invocations per output group (matmul_gemv.comp CLUSTER) ----------
// Below the subgroup size a group is one cluster of its subgroup, summed by subgroupClusteredAdd
// and written by its lane 0 (the "_c" shader variants). That needs clustered subgroup ops;
// without them the host raises TPR to the subgroup size, so such a setting would only repeat a
// larger one: it is skipped, saying why (lavapipe: subgroup 8, no clustered ops, so TPR 4 skips
// and 8, 16 take the shared-memory step; on the H200, subgroup 32, all three are clustered). A
// workgroup covers WG / TPR · QR outputs (up to 512 here): N = 37 and 301 leave partial ones.
// Every path of the GEMV: float (AccumQuant: Q8_0, Q4_0, Q4_K), integer dot with x quantized in
// the workgroup and by a dispatch of its own, R = 1 and 3 (+ bias), and the fused FFN (dual
// gate/up + SwiGLU, folded norm, residual epilogue).
class VulkanSmallTpr : public VulkanTest, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    const VulkanDeviceInfo& info = SharedVulkan().device().info();
    if (uint32_t(GetParam()) < info.max_subgroup_size && !info.subgroup_clustered)
      GTEST_SKIP() << "TPR " << GetParam() << " is below " << info.name << "'s subgroup size "
                   << info.max_subgroup_size << ", which needs clustered subgroup ops; it has none";
  }
  // The knob settings of this TPR with `qr` outputs per group, and what the case is called.
  std::string What(const char* path, uint32_t qr) const {
    const VulkanDeviceInfo& info = SharedVulkan().device().info();
    return std::string(path) + " TPR=" + std::to_string(GetParam()) + " QR=" + std::to_string(qr) +
           (uint32_t(GetParam()) < info.subgroup_size ? " (clustered)" : " (shared step)");
  }
};

// Outputs per group by TPR: each value of the QR knob once over the three TPRs and two paths.
uint32_t SmallTprQr(int tpr, bool idot) {
  if (tpr == 4) return idot ? 8 : 4;
  return tpr == 8 ? (idot ? 2 : 8) : (idot ? 4 : 2);
}

TEST_P(VulkanSmallTpr, FloatGemvGivesTheReference) {
  const uint32_t qr = SmallTprQr(GetParam(), false);
  ScopedKnobs tpr("ES_VK_GEMV_TPR", std::to_string(GetParam()));
  ScopedKnobs rows("ES_VK_GEMV_QR", std::to_string(qr));
  auto be = MakeVulkan({});
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K})
    for (int R : {1, 3})
      for (int N : {37, 301}) CheckMatMul(*be, dt, R, Ks(dt)[1], N, R == 3, What("float", qr));
}

TEST_P(VulkanSmallTpr, IdotGemvGivesTheReference) {
  const uint32_t qr = SmallTprQr(GetParam(), true);
  for (const char* local : {"1", "0"}) {
    ScopedKnobs tpr("ES_VK_GEMV_IDOT_TPR", std::to_string(GetParam()));
    ScopedKnobs rows("ES_VK_GEMV_IDOT_QR", std::to_string(qr));
    ScopedKnobs wg("ES_VK_GEMV_IDOT_WG", GetParam() == 8 ? "128" : "256");
    ScopedKnobs loc("ES_VK_GEMV_IDOT_LOCAL", local);
    auto be = IdotVulkan();
    const std::string what = What("idot", qr) + " LOCAL=" + local;
    // K = 65 blocks: 16 or 17 units per invocation at TPR 4, none for some at TPR 16 (Q4_0);
    // Q4_K: 9 blocks, 36 chunks (fewer units than invocations from TPR 64).
    for (DType dt : kIdotTypes)
      for (int R : {1, 3})
        for (int N : {37, 301}) CheckIdot(*be, dt, R, IdotK(dt, 2080, 2304), N, R == 3, what);
  }
}

TEST_P(VulkanSmallTpr, FusedFfnGivesTheReference) {
  const uint32_t qr = SmallTprQr(GetParam(), false), qr_idot = SmallTprQr(GetParam(), true);
  const RefMm mm = [](const std::vector<float>& x, const Tensor& W, int T) {
    Tensor X = AllocTensor("x", DType::kF32, {T, W.cols()});
    std::copy(x.begin(), x.end(), static_cast<float*>(MutableData(X)));
    return RefMatMul(X, W, nullptr, T);
  };
  const RefMm mm_idot = [](const std::vector<float>& x, const Tensor& W, int T) {
    return RefIdot(QuantizedRows(x, T, int(W.cols()), W.dtype), W, nullptr, T);
  };
  {  // the float GEMV: the folded norm's Σ x² is summed by the cluster too
    ScopedKnobs tpr("ES_VK_GEMV_TPR", std::to_string(GetParam()));
    ScopedKnobs rows("ES_VK_GEMV_QR", std::to_string(qr));
    auto be = MakeVulkan({});
    for (DType dt : {DType::kQ8_0, DType::kQ4_K})
      for (int T : {1, 3}) {
        std::vector<float> want;
        const int D = 2 * BlockElems(dt), I = 3 * BlockElems(dt);
        const std::vector<float> got = RunFfn(*be, dt, T, D, I, 191, mm, &want);
        EXPECT_EQ(be->counters().dispatches, 4) << Name(dt);
        ExpectClose(got, want, kTol,
                    "fused FFN " + What("float", qr) + " T=" + std::to_string(T) + " " +
                        std::string(Name(dt)));
      }
  }
  for (const char* local : {"1", "0"}) {
    ScopedKnobs tpr("ES_VK_GEMV_IDOT_TPR", std::to_string(GetParam()));
    ScopedKnobs rows("ES_VK_GEMV_IDOT_QR", std::to_string(qr_idot));
    ScopedKnobs loc("ES_VK_GEMV_IDOT_LOCAL", local);
    ScopedKnobs dq("ES_VK_GEMV_DUAL_QUANT",
                   "0");  // the dual's quantized output: IdotFusedFfn* above
    auto be = IdotVulkan();
    for (DType dt : kIdotTypes)
      for (int T : {1, 3}) {
        std::vector<float> want;
        const std::vector<float> got =
            RunFfn(*be, dt, T, IdotK(dt, 320, 512), IdotK(dt, 96, 256), 193, mm_idot, &want);
        EXPECT_EQ(be->counters().dispatches, local[0] == '1'   ? 4
                                             : local[0] == '3' ? 5
                                                               : 6)
            << Name(dt);
        ExpectClose(got, want, kIdotTol,
                    "fused FFN " + What("idot", qr_idot) + " LOCAL=" + local +
                        " T=" + std::to_string(T) + " " + std::string(Name(dt)));
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Tpr, VulkanSmallTpr, ::testing::Values(4, 8, 16),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "tpr" + std::to_string(i.param);
                         });

// A golden transformers checkpoint (DeepSeek-V2 at real head dims: MLA, MoE, and rows of 256)
// converted by `edgeseek convert --type q4_k_m` (Q4_K, Q5_K, Q6_K and Q5_1 tensors), and the same
// file dequantized to f32 by `edgeseek quantize --type f32` (paths in a temporary directory).
struct Q4KMFiles {
  std::string q, f32;
};
Q4KMFiles ConvertQ4KM() {
  const std::string dir = TempDir();
  Q4KMFiles f{dir + "/m.gguf", dir + "/m_f32.gguf"};
  std::string out, err;
  EXPECT_EQ(RunCommand(CliPath() + " convert " + SourceDir() +
                           "/tests/golden/data/models/dsv2_realdim -o " + f.q + " --type q4_k_m",
                       &out, &err),
            0)
      << err;
  for (const char* t : {"q4_k", "q5_k", "q6_k"}) EXPECT_NE(err.find(t), std::string::npos) << err;
  EXPECT_EQ(RunCommand(CliPath() + " quantize " + f.q + " " + f.f32 + " --type f32", &out, &err), 0)
      << err;
  return f;
}

// The logits of a prefill (10 tokens: GEMMs) and a decode step (GEMVs) of the q4_k_m file on
// `vk`, checked against the CPU backend on the f32 file within `tol[0]` and `tol[1]`; returns the
// decode step's shader variants.
std::vector<std::string> CheckQ4KMSteps(const Q4KMFiles& f, vk::VulkanBackend& vk,
                                        const double tol[2]) {
  auto mq = Model::Load(f.q), mf = Model::Load(f.f32);
  auto cpu = CreateCpuBackend(BackendOptions{});
  Batch b;
  b.Add(0, 0, {1, 17, 42, 99, 7, 200, 3, 5, 11, 13}, true);
  b.Finalize();
  Batch d;
  d.Add(0, 10, {23}, true);
  d.Finalize();
  const KvSpec spec = mq->config().MakeKvSpec(DType::kF32);
  auto kv_gpu = vk.CreateKv(spec, 1, 16);
  auto kv_cpu = cpu->CreateKv(spec, 1, 16);
  for (const Batch* step : {&b, &d}) {
    const Graph gq = mq->arch().Build(*step), gf = mf->arch().Build(*step);
    const Node& o = gq.node(gq.output());
    std::vector<float> got(size_t(o.shape[0] * o.shape[1])), ref(got.size());
    vk.Compute(gq, *step, *kv_gpu, got.data());
    cpu->Compute(gf, *step, *kv_cpu, ref.data());
    ExpectClose(got, ref, tol[step == &b ? 0 : 1],
                "q4_k_m dsv2_realdim T=" + std::to_string(step->n_tokens()));
  }
  return vk.counters().shaders;
}

// End to end: the q4_k_m file (ConvertQ4KM) gives on the Vulkan backend the logits of the CPU
// backend on the same file dequantized to f32 (both see the same weights but for the absorbed
// MLA pair, f16 from a quantized kv_b; measured ~3e-4, ~1e-6 without that rounding). The CPU
// backend on the quantized file itself differs by ~1-4% (its kernels quantize activations to
// int8 per 32), so it is not the reference. The files come from the CLI; the forward passes run
// in this process (the shared backend's pipelines are already built: lavapipe compiles slowly).
TEST_F(VulkanQuant, GoldenModelInQ4KMMatchesTheCpuBackend) {
  // The quantized file's absorbed MLA weights are f16 (built from its Q-typed kv_b: the
  // dequantized values rounded to f16, measured 2.6-2.8e-4 here), the f32 file's f32. f16 math
  // (devices with NV coopmat: the H200) also rounds the prefill GEMM's activations to f16.
  const double t = SharedVulkan().device().f16_math() ? 2e-3 : 6e-4, tol[2] = {t, t};
  CheckQ4KMSteps(ConvertQ4KM(), SharedVulkan(), tol);
}

// The same file's decode step with the integer-dot GEMVs forced (ES_VK_GEMV_IDOT=1, as on a GPU
// with 4x8-bit dot products): every dense Q4_K, Q5_K and Q6_K GEMV (the Q6_K ones: lm_head and
// some down projections) and the experts' reads x quantized to int8 per 32. Against the same f32
// reference within int8 activation error, measured on lavapipe: the prefill 2.9e-3 (its experts'
// GEMVs), the decode step 1.8e-2 (1.6e-2 with ES_VK_GEMV_IDOT_Q6K=0, 2.6e-4 on the float GEMVs;
// the CPU backend on the quantized file, int8 activations too, is 1.6-1.9e-2 from either). The
// decode step's Q6_K GEMVs must have taken the integer dots (ES_VK_GEMV_IDOT_Q6K=0: it fails);
// each one is checked exactly against its int8-x reference by IdotQ6KDenseGemvByDefault. The
// dense layer's dual gate/up GEMV writes its down GEMV's x (another type, the same int8 format).
TEST_F(VulkanQuant, GoldenModelInQ4KMDecodesOnIntegerDots) {
  auto be = IdotVulkan();
  const double tol[2] = {be->device().f16_math() ? 6e-3 : 5e-3, 2.5e-2};
  const std::vector<std::string> sh = CheckQ4KMSteps(ConvertQ4KM(), *be, tol);
  auto ran = [&](const std::string& prefix) {
    return std::count_if(sh.begin(), sh.end(),
                         [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  };
  EXPECT_GT(ran("matmul_gemv_q6_k_idot"), 0) << "no dense Q6_K GEMV on integer dots";
  EXPECT_EQ(ran("matmul_gemv_q6_k_vec"), 0) << "a dense Q6_K GEMV on the float path";
  EXPECT_GT(ran("matmul_gemv_q4_k_idot"), 0) << "no dense Q4_K GEMV on integer dots";
  // The dense layer's Q4_K gate/up GEMV writes its Q5_K down GEMV's x quantized.
  EXPECT_EQ(ran("matmul_gemv_q4_k_idot_dual_q"), 1) << "the down GEMV quantized its own x";
}

}  // namespace
}  // namespace es::test
