// Every op of the Vulkan backend against the plain CPU reference (backends/cpu/reference.h),
// over odd sizes, each weight type, and both matmul paths (GEMV for <= 8 rows, tiled GEMM).
// Tolerances: relative L2 1e-5 for f32 math (reference accumulates in double; ours in f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "backends/cpu/reference.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

constexpr double kTol = 1e-5;

class VulkanOps : public VulkanTest {};

TEST_F(VulkanOps, EmbedAllTypes) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor E = RandomTensor("embed", dt, {37, 29}, 1);
    Graph g;
    Batch b;
    b.Add(0, 0, {36, 0, 5, 5, 17}, true);
    b.Finalize();
    g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {5, 29}));
    std::vector<float> want(5 * 29);
    ref::Embed(E, b.tokens.data(), 5, want.data());
    EXPECT_EQ(RunGraph(SharedVulkan(), g, b), want) << Name(dt);
  }
}

TEST_F(VulkanOps, EmbedRejectsTokenOutsideVocab) {
  Tensor E = RandomTensor("embed", DType::kF32, {7, 8}, 1);
  Graph g;
  g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {1, 8}));
  Batch b;
  b.Add(0, 0, {7}, true);
  b.Finalize();
  try {
    RunGraph(SharedVulkan(), g, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanOps, RmsNorm) {
  for (int D : {1, 13, 300}) {
    Tensor X = RandomTensor("x", DType::kF32, {3, D}, 2);
    Tensor W = RandomTensor("w", DType::kBF16, {D}, 3);
    Graph g;
    const int x = Input(g, X, 3);
    Node n = Make(Op::kRmsNorm, "norm", {x, g.AddWeight(W)}, {3, D});
    n.params = RmsNormParams{1e-5f};
    g.Add(n);
    std::vector<float> want(size_t(3 * D));
    const auto w = Values(W);
    ref::RmsNorm(X.as<float>(), w.data(), 3, D, 1e-5f, want.data());
    ExpectClose(RunGraph(SharedVulkan(), g, RowsBatch(3)), want, kTol,
                "rmsnorm D=" + std::to_string(D));
  }
}

struct MatCase {
  int R, K, N;
  DType dt;
  bool bias;
};

std::vector<float> RefMatMul(const Tensor& X, const Tensor& W, const Tensor* B, int R) {
  std::vector<float> want(size_t(R * W.rows()));
  std::vector<float> bias = B ? Values(*B) : std::vector<float>();
  ref::MatMul(X.as<float>(), R, X.cols(), W, B ? bias.data() : nullptr, want.data());
  return want;
}

// One matmul case on `be` against the reference: x [R, K] (seed), W [N, K] of c.dt (seed + 1,
// values scaled by wscale), an f32 bias (seed + 2) when c.bias; `tag` starts the message.
void CheckMatCase(Backend& be, const MatCase& c, uint64_t seed, float wscale, double tol,
                  const std::string& tag) {
  Tensor X = RandomTensor("x", DType::kF32, {c.R, c.K}, seed);
  Tensor W = RandomTensor("w", c.dt, {c.N, c.K}, seed + 1, wscale);
  Tensor B = RandomTensor("b", DType::kF32, {c.N}, seed + 2);
  Graph g;
  const int x = Input(g, X, c.R);
  std::vector<int> src = {x, g.AddWeight(W)};
  if (c.bias) src.push_back(g.AddWeight(B));
  g.Add(Make(Op::kMatMul, "mm", src, {c.R, c.N}));
  ExpectClose(RunGraph(be, g, RowsBatch(c.R)), RefMatMul(X, W, c.bias ? &B : nullptr, c.R), tol,
              tag + " R=" + std::to_string(c.R) + " K=" + std::to_string(c.K) +
                  " N=" + std::to_string(c.N) + " " + std::string(Name(c.dt)));
}

TEST_F(VulkanOps, MatMulGemvAndGemmOverTypes) {
  const MatCase cases[] = {{1, 64, 45, DType::kF16, false},
                           {3, 37, 19, DType::kBF16, true},
                           {8, 128, 33, DType::kF32, true},
                           {9, 64, 70, DType::kF16, true},
                           {70, 37, 65, DType::kBF16, false},
                           {2, 24, 129, DType::kF32, false},
                           {67, 80, 3, DType::kF32, true},
                           // Few outputs past 8 rows: the GEMV in row groups of 8 (a router).
                           {33, 64, 64, DType::kF32, true},
                           {64, 128, 256, DType::kBF16, false},
                           {40, 2048, 64, DType::kF32, false}};
  for (const auto& c : cases) CheckMatCase(SharedVulkan(), c, 4, 1.0f, kTol, "matmul");
}

// f16 math: on a device with NV cooperative matrices the prefill GEMM runs on them (f16 inputs,
// f32 sums: rel L2 ~1e-3 against the f64 reference); elsewhere (lavapipe) the plain f32 GEMM
// runs and must stay exact. Sizes cross every tile edge (128 rows / columns, 32 K steps), K not
// a multiple of 8 falls back to the plain GEMM, and a bias and split weights are covered;
// block-quantized weights (Q8_0/Q4_0 by their own loads, the others through QGroup4) are
// dequantized to f16 tiles on the way into shared memory. A second round asks for the KHR
// cooperative-matrix variants (ES_VK_COOPMAT=khr, the coopmat2 GEMM off so that every case takes
// them); it runs only where the device and the build have them (the H200 with Debian 13's glslc).
// The cases of MatMulF16MathGemmOverTypesAndEdges on backends made with the environment as it
// is (mode "") or asking for the KHR variants (mode "khr"); false when that mode is not offered.
bool CheckF16MathGemms(const std::string& mode) {
  for (int bm : {64, 128}) {
    vk::VulkanTuning t;
    t.knobs.Set(vk::Knob::kF16Act, "1").Set(vk::Knob::kGemmBm, std::to_string(bm));
    auto be = MakeVulkan(t);
    if (!mode.empty() && !be->device().coopmat_khr()) return false;
    const bool cm = be->device().coopmat_n() != 0;
    EXPECT_NE(be->description().find(cm ? "in use" : ""), std::string::npos) << be->description();
    const MatCase cases[] = {
        {9, 16, 7, DType::kF16, true},       {130, 264, 257, DType::kF16, false},
        {200, 96, 130, DType::kBF16, true},  {129, 1000, 33, DType::kF32, false},
        {64, 37, 40, DType::kF16, true},     {300, 512, 384, DType::kF16, true},
        {130, 96, 257, DType::kQ4_0, true},  {200, 160, 130, DType::kQ8_0, false},
        {64, 32, 40, DType::kQ8_0, true},    {129, 544, 129, DType::kQ4_0, false},
        {130, 512, 257, DType::kQ4_K, true}, {200, 256, 130, DType::kQ6_K, false},
        {64, 512, 40, DType::kQ5_K, true},   {129, 96, 129, DType::kQ4_1, false},
        {70, 64, 33, DType::kQ5_0, true},    {33, 128, 70, DType::kQ5_1, false}};
    for (const auto& c : cases) {
      const bool uses_cm = cm && c.K % 8 == 0;
      CheckMatCase(
          *be, c, 14, 0.5f, uses_cm ? 2e-3 : kTol,
          std::string(uses_cm ? "coopmat " : "plain ") + mode + " gemm BM=" + std::to_string(bm));
    }
  }
  return true;
}

TEST_F(VulkanOps, MatMulF16MathGemmOverTypesAndEdges) {
  EXPECT_TRUE(CheckF16MathGemms(""));
  bool khr = false;
  {
    ScopedKnobs knobs{{"ES_VK_COOPMAT", "khr"}, {"ES_VK_CM2", "0"}};
    khr = CheckF16MathGemms("khr");
  }
  if (!khr)
    std::printf("(no KHR cooperative-matrix GEMM on this device/build: that round skipped)\n");
}

// Two f16-math backends: weights whole, and split into 64 KiB row chunks.
std::pair<std::unique_ptr<vk::VulkanBackend>, std::unique_ptr<vk::VulkanBackend>>
F16MathBackends() {
  vk::VulkanTuning t;
  t.knobs.Set(vk::Knob::kF16Act, "1");
  vk::VulkanTuning st = t;
  st.weights.max_range = 64 << 10;
  return {MakeVulkan(t), MakeVulkan(st)};
}

// Decode-shaped products (9-64 rows) on the coopmat GEMM split K into slices whose partial
// tiles matmul_gemm_cm2_reduce sums (+ bias): rows, columns and K off every tile edge, slices
// whose last one is short (K = 1000: 32 steps and a partial one), a weight split into chunks at a
// row offset, dense and block-quantized types; each case with the split (one more dispatch a
// chunk) and without (ES_VK_GEMM_SPLITK=0), both against the reference. Elsewhere (no NV
// cooperative matrices or no multiprocessor count, e.g. lavapipe) the same cases check the GEMM
// that runs and the split part is skipped.
TEST_F(VulkanOps, MatMulCoopmatSplitK) {
  auto [be, chunked] = F16MathBackends();
  const bool split = be->device().coopmat_n() != 0 && be->device().coopmat2().sms != 0;
  // (Q4_0 / Q8_0 take the block-load GEMM where the device has it: Q5_0 / Q4_1 stand in.)
  const MatCase cases[] = {
      {9, 1024, 70, DType::kQ5_0, true},   {33, 3584, 300, DType::kQ4_1, false},
      {64, 1000, 129, DType::kBF16, true}, {17, 2048, 256, DType::kQ4_K, false},
      {40, 1536, 96, DType::kQ6_K, true},  {12, 4096, 130, DType::kF32, false},
      {64, 2560, 512, DType::kQ5_K, true}};
  for (vk::VulkanBackend* b : {be.get(), chunked.get()}) {
    for (const auto& c : cases) {
      const std::string tag = std::string(b == be.get() ? "" : "chunked ") + "split-K";
      int64_t d_split = 0, d_whole = 0;
      CheckMatCase(*b, c, 31, 0.5f, split ? 2e-3 : kTol, tag);
      d_split = b->counters().dispatches;
      {
        ScopedKnobs env(*b, {{"ES_VK_GEMM_SPLITK", "0"}});
        CheckMatCase(*b, c, 31, 0.5f, split ? 2e-3 : kTol, tag + " off");
        d_whole = b->counters().dispatches;
      }
      if (split) {
        EXPECT_GT(d_split, d_whole) << tag << " R=" << c.R << " K=" << c.K << " N=" << c.N;
      }
    }
  }
  if (!split)
    GTEST_SKIP() << "no NV cooperative-matrix GEMM with a multiprocessor count: split-K not run";
}

// Q4_0 / Q8_0 weights decoded in the workgroup-scope GEMM's tile loads (matmul_gemm_cm2.comp's
// "_q4_0" / "_q8_0" variants, VK_NV_cooperative_matrix2 block loads) for batched-decode steps of
// 9-256 rows (batched decode and continuous batching's mixed steps): row counts on either side of
// the 16-, 32- and 64-row decode tiles, of the 128-row tile and of the range (8 and 300 rows must
// take the other GEMMs), rows padded to whole tiles, K with and without a whole last
// K step (and under one step), N off the 128-row weight tiles, split K (3584, 4096) and whole, a
// bias, and weights split into row chunks; each case against the reference within f16 rounding,
// and the block-load shader in the program exactly where it applies. Where the device has no
// block loads (lavapipe) the cases check the GEMMs that run instead.
TEST_F(VulkanOps, Coopmat2DecodesQuantizedWeightsInTileLoads) {
  auto [be, chunked] = F16MathBackends();
  const bool on = be->device().coopmat2().block_loads && be->device().coopmat2().bm != 0;
  const MatCase cases[] = {
      {8, 96, 7, DType::kQ4_0, true},       {9, 96, 7, DType::kQ4_0, true},
      {16, 1024, 130, DType::kQ8_0, false}, {17, 3584, 300, DType::kQ4_0, false},
      {20, 96, 45, DType::kQ8_0, true},     {32, 32, 129, DType::kQ8_0, true},
      {33, 992, 257, DType::kQ4_0, true},   {50, 1024, 33, DType::kQ4_0, false},
      {64, 4096, 70, DType::kQ8_0, false},  {65, 160, 33, DType::kQ4_0, false},
      {130, 544, 257, DType::kQ8_0, true},  {256, 3584, 200, DType::kQ4_0, false},
      {257, 96, 40, DType::kQ8_0, true},    {300, 3584, 130, DType::kQ4_0, true}};
  for (vk::VulkanBackend* b : {be.get(), chunked.get()}) {
    for (const auto& c : cases) {
      const std::string tag = std::string(b == be.get() ? "" : "chunked ") + "cm2 decode";
      // The decode GEMM (DecodeGemmTilesSlicesAndEdges) off: this one checks the block loads.
      ScopedKnobs knobs(*b, {{"ES_VK_DEC_GEMM", "0"}});
      CheckMatCase(*b, c, 41, 0.5f, 2e-3, tag);
      if (!on) continue;
      const auto shaders = b->counters().shaders;
      const std::string want =
          std::string("matmul_gemm_cm2_") + (c.dt == DType::kQ4_0 ? "q4_0" : "q8_0");
      EXPECT_EQ(std::any_of(shaders.begin(), shaders.end(),
                            [&](const std::string& n) { return n.rfind(want, 0) == 0; }),
                c.R > 8 && c.R <= 256)
          << tag << " R=" << c.R << " K=" << c.K << " N=" << c.N << ": " << want;
    }
  }
  if (!on)
    GTEST_SKIP() << "no cooperative-matrix block loads on this device: only the reference run";
}

// The decode-shaped GEMM (matmul_gemm_dec.comp, ES_VK_DEC_GEMM) for Q4_0 / Q8_0 and the K-quants
// steps of 9-64 rows: row counts on both sides of its 16-, 32- and 64-row tiles and of the range
// (8 and 65 rows take other GEMMs), K under one step, with a short last step (160, 1120) and many
// steps (the K-quants: one super-block, several, a slice boundary inside one), N off the
// 128-row weight tiles, a bias, weights split into row chunks, and K split into slices (a device
// with 64 multiprocessors: ES_VK_CM2_SMS) and not; each case against the reference within f16
// rounding, and the shader in the program exactly where it applies (with as many dispatches as
// its chunks and slices need). On devices without cooperative matrices (lavapipe) it is forced on
// and runs its f32 multiply-add variant: the loads, tiles, slices and epilogue are the same.
TEST_F(VulkanOps, DecodeGemmTilesSlicesAndEdges) {
  const MatCase cases[] = {
      {8, 96, 7, DType::kQ4_0, true},       {9, 64, 7, DType::kQ4_0, true},
      {16, 1024, 130, DType::kQ8_0, false}, {17, 160, 300, DType::kQ4_0, false},
      {20, 96, 45, DType::kQ8_0, true},     {32, 1120, 129, DType::kQ4_0, true},
      {33, 992, 257, DType::kQ8_0, true},   {50, 3584, 33, DType::kQ4_0, false},
      {64, 4096, 70, DType::kQ8_0, false},  {65, 160, 33, DType::kQ4_0, false},
      {8, 256, 7, DType::kQ4_K, true},      {9, 256, 7, DType::kQ4_K, true},
      {17, 512, 130, DType::kQ5_K, false},  {32, 1280, 257, DType::kQ4_K, true},
      {33, 768, 45, DType::kQ5_K, true},    {64, 3584, 70, DType::kQ4_K, false},
      {64, 1536, 129, DType::kQ5_K, false}, {65, 256, 33, DType::kQ4_K, false},
      {12, 512, 9, DType::kQ6_K, true},     {40, 1280, 130, DType::kQ6_K, false}};
  for (const char* sms : {"0", "64"}) {
    vk::VulkanTuning t;
    t.knobs.Set(vk::Knob::kF16Act, "1").Set(vk::Knob::kDecGemm, "1").Set(vk::Knob::kCm2Sms, sms);
    vk::VulkanTuning st = t;
    st.weights.max_range = 16 << 10;
    auto be = MakeVulkan(t), chunked = MakeVulkan(st);
    if (!be->device().info().fp16) GTEST_SKIP() << "no shaderFloat16: the decode GEMM cannot run";
    for (vk::VulkanBackend* b : {be.get(), chunked.get()}) {
      for (const auto& c : cases) {
        const std::string tag =
            std::string(b == be.get() ? "" : "chunked ") + "decode GEMM sms " + sms;
        CheckMatCase(*b, c, 43, 0.5f, 2e-3, tag);
        const auto shaders = b->counters().shaders;
        EXPECT_EQ(
            std::any_of(shaders.begin(), shaders.end(),
                        [](const std::string& n) { return n.rfind("matmul_gemm_dec_", 0) == 0; }),
            c.R > 8 && c.R <= 64)
            << tag << " R=" << c.R << " K=" << c.K << " N=" << c.N;
        const bool sliced = std::any_of(shaders.begin(), shaders.end(), [](const std::string& n) {
          return n == "matmul_gemm_cm2_reduce";
        });
        if (c.R > 8 && c.R <= 64 && c.K >= 1000) {
          EXPECT_EQ(sliced, sms[0] != '0') << tag << " R=" << c.R;
        }
      }
    }
  }
}

// The workgroup-scope cooperative-matrix GEMM (matmul_gemm_cm2.comp, VK_NV_cooperative_matrix2):
// each tile shape of the knob, both operand orders (x · Wᵀ and W · xᵀ) and both ways of loading x
// (an f16 copy made first, and f32 tiles converted in the shader), over edges of every tile
// dimension (R, N, K not multiples of the tile; K smaller than one K step), with a bias and with a
// weight split into chunks at a row offset; and split-K (ES_VK_CM2_SPLITK|SPLITK_MINK|SMS) with
// each; at the settled variant flags (device.cpp kCm2Flags); f16 and block-quantized
// weights (the latter through an f16 copy of each chunk). Needs a device with the extension and a
// build whose glslc compiled the shader (the GPU machine: scripts/gpu/h200_compare.sh); elsewhere
// it is skipped.
TEST_F(VulkanOps, Coopmat2GemmTilesAndVariants) {
  // tile, x as f32 tiles, swapped operands, then split-K knobs (ES_VK_CM2_<KNOB>=<value>,
  // space-separated), all set on the backend's VulkanTuning.
  struct Env {
    const char* tile;
    const char* x32;
    const char* swap;
    const char* flags;
    bool split = false;  // weights in row chunks
  };
  // SPLITK with SMS=1000 and SPLITK_MINK=64: these small products split too.
  const Env envs[] = {{"128x128x32", "0", "0", "", true},
                      {"128x128x32", "1", "1", "", true},
                      {"64x128x32", "0", "1", ""},
                      {"128x256x32", "0", "0", ""},
                      {"256x128x64", "0", "0", ""},
                      {"128x128x64", "1", "0", ""},
                      {"128x256x64", "0", "1", ""},
                      // llama.cpp's large tile (128 weight rows x 256 activation rows x 64)
                      {"256x128x64", "0", "1", ""},
                      {"128x128x64", "0", "1", "", true},
                      {"128x128x64", "0", "0", "SPLITK=0"},
                      {"128x128x64", "0", "0", "SPLITK=4 SPLITK_MINK=64 SMS=1000", true},
                      {"128x128x64", "0", "1", "SPLITK=2 SPLITK_MINK=64 SMS=1000"},
                      {"256x128x64", "0", "1", "SPLITK=8 SPLITK_MINK=64 SMS=1000"}};
  bool ran = false;
  for (const Env& e : envs) {
    vk::VulkanTuning t;
    t.knobs.Set(vk::Knob::kCm2, "1")
        .Set(vk::Knob::kCm2Tile, e.tile)
        .Set(vk::Knob::kCm2X32, e.x32)
        .Set(vk::Knob::kCm2Swap, e.swap)
        .Set(vk::Knob::kF16Act, "1");
    std::istringstream kv(e.flags);
    for (std::string a; kv >> a;) {
      const size_t eq = a.find('=');
      t.knobs.Set("ES_VK_CM2_" + a.substr(0, eq), a.substr(eq + 1));
    }
    const bool split = e.split;
    if (split) t.weights.max_range = 64 << 10;  // 300 x 384 f16 = 225 KiB -> 4 row chunks
    std::unique_ptr<vk::VulkanBackend> be;
    try {
      be = MakeVulkan(t);
    } catch (const Error& err) {
      ADD_FAILURE() << e.tile << " " << e.flags << ": " << err.what();
      continue;
    }
    const auto& c2 = be->device().coopmat2();
    if (!c2.bm) continue;  // this tile is not offered by the device (granularity) or no cm2
    ran = true;
    const std::string tag = std::string("cm2 ") + e.tile + (c2.x32 ? " x32" : "") +
                            (c2.swap ? " swap" : "") + (split ? " split" : "") + " " + e.flags +
                            " (flags " + std::to_string(c2.flags) + ", split-K up to " +
                            std::to_string(c2.splitk) + ")";
    EXPECT_NE(be->description().find("coopmat2 " + std::string(e.tile)), std::string::npos)
        << be->description();
    const double tol = 2e-3;
    const MatCase cases[] = {
        {9, 16, 7, DType::kF16, true},
        {130, 264, 257, DType::kF16, false},
        {300, 512, 384, DType::kF16, true},
        {257, 1000, 131, DType::kF16, true},
        {64, 40, 64, DType::kF16, false},
        {513, 136, 300, DType::kF16, true},
        {256, 256, 256, DType::kF16, true},
        {512, 384, 640, DType::kF16, false},
        // block-quantized weights: an f16 copy of each chunk first (dequant_f16.comp)
        {130, 256, 257, DType::kQ4_0, true},
        {257, 512, 131, DType::kQ4_K, false},
        {64, 96, 100, DType::kQ8_0, true},
        {200, 256, 130, DType::kQ6_K, true}};
    for (const auto& c : cases) CheckMatCase(*be, c, 24, 0.5f, tol, tag);
    if (::testing::Test::HasFailure()) break;
  }
  if (!ran) GTEST_SKIP() << "no VK_NV_cooperative_matrix2 GEMM on this device/build";
}

// Q8_0 / Q4_0 weights (quantized by es::Quantize, repacked at upload, dequantized in the
// shaders) against the reference's dequantization: GEMV (1..8 rows) and GEMM, K of odd block
// counts (up to 65 blocks: more than one step of a GEMV lane), N not a multiple of any tile, with
// a bias; embedding rows; split weights.
TEST_F(VulkanOps, QuantizedMatMulAndEmbed) {
  vk::VulkanTuning t;
  t.weights.max_range = 16384;  // forces row chunks for the larger cases
  auto split = MakeVulkan(t);
  const MatCase cases[] = {{1, 32, 7, DType::kQ8_0, false},   {3, 96, 45, DType::kQ4_0, true},
                           {8, 352, 33, DType::kQ8_0, true},  {5, 160, 129, DType::kQ4_0, false},
                           {70, 96, 65, DType::kQ4_0, true},  {131, 224, 19, DType::kQ8_0, false},
                           {2, 2080, 37, DType::kQ4_0, true}, {1, 1056, 9, DType::kQ8_0, false}};
  for (Backend* be : {static_cast<Backend*>(&SharedVulkan()), static_cast<Backend*>(split.get())}) {
    for (const auto& c : cases) CheckMatCase(*be, c, 24, 1.0f, kTol, "quantized matmul");
    for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
      Tensor E = RandomTensor("embed", dt, {41, 96}, 27);
      Graph g;
      Batch b;
      b.Add(0, 0, {40, 0, 7, 7, 33}, true);
      b.Finalize();
      g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {5, 96}));
      std::vector<float> want(5 * 96);
      ref::Embed(E, b.tokens.data(), 5, want.data());
      EXPECT_EQ(RunGraph(*be, g, b), want) << Name(dt);
    }
  }
}

TEST_F(VulkanOps, QuantizedWeightWithPartialBlockRowsIsAClearError) {
  // 40 columns is not a whole number of 32-element blocks: the tensor cannot even be quantized
  // row-wise, so build a Q8_0 tensor of 2 x 32 and view it as 4 x 16 columns.
  Tensor W = RandomTensor("w.q8", DType::kQ8_0, {2, 32}, 28);
  W.shape = {4, 16};
  Tensor X = RandomTensor("x", DType::kF32, {1, 16}, 29);
  Graph g;
  g.Add(Make(Op::kMatMul, "mm", {Input(g, X, 1), g.AddWeight(W)}, {1, 4}));
  try {
    RunGraph(SharedVulkan(), g, RowsBatch(1));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.q8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
}

// Decode fusions: the RMSNorm is folded into the GEMV that reads its output, gate/up matmuls
// feeding a SwiGLU become one dual GEMV, and the down matmul feeding the residual add writes the
// sum itself: 2 embeddings + 2 dispatches in all, the same values as the unfused reference, for
// dense and quantized weights and 1 or 5 rows. With 1,000-byte ranges the weights split into
// chunks whose row counts are no multiple of 8 (Q4_0 rows of 64: 20 a chunk, of 96: 15), so the
// last workgroup of a chunk is partial in the quantized GEMV (ROWS x QR outputs) and its dual form.
TEST_F(VulkanOps, DecodeFusionsSwiGluPairAndResidualAdd) {
  vk::VulkanTuning st;
  st.weights.max_range = 1000;
  auto split = MakeVulkan(st);
  for (vk::VulkanBackend* bep : {&SharedVulkan(), split.get()}) {
    for (DType dt : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      for (int T : {1, 5}) {
        const int D = 64, I = 96;
        Tensor X = RandomTensor("x", DType::kF32, {T, D}, 51);
        Tensor Rs = RandomTensor("res", DType::kF32, {T, D}, 52);
        Tensor Wg = RandomTensor("wg", dt, {I, D}, 53), Wu = RandomTensor("wu", dt, {I, D}, 54);
        Tensor Wd = RandomTensor("wd", dt, {D, I}, 55);
        Graph g;
        const int res = Input(g, Rs, T), x0 = Input(g, X, T);
        Tensor Nw = RandomTensor("norm.w", DType::kBF16, {D}, 56);
        AddFfnBlock(g, res, x0, Nw, Wg, Wu, Wd, T, D, I);
        vk::VulkanBackend& be = *bep;
        const auto got = RunGraph(be, g, RowsBatch(T));
        if (bep == &SharedVulkan()) {
          EXPECT_EQ(be.counters().dispatches, 4) << Name(dt);
        }
        Tensor Xn = AllocTensor("xn", DType::kF32, {T, D});
        const auto nw = Values(Nw);
        ref::RmsNorm(X.as<float>(), nw.data(), T, D, 1e-5f, static_cast<float*>(MutableData(Xn)));
        std::vector<float> gv = RefMatMul(Xn, Wg, nullptr, T), uv = RefMatMul(Xn, Wu, nullptr, T);
        Tensor A = AllocTensor("a", DType::kF32, {T, I});
        float* a = static_cast<float*>(MutableData(A));
        for (size_t i = 0; i < gv.size(); ++i) a[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
        std::vector<float> want = RefMatMul(A, Wd, nullptr, T);
        const auto rv = Values(Rs);
        for (size_t i = 0; i < want.size(); ++i) want[i] += rv[i];
        ExpectClose(got, want, kTol,
                    std::string(bep == &SharedVulkan() ? "" : "split ") +
                        "fused FFN T=" + std::to_string(T) + " " + std::string(Name(dt)));
      }
    }
  }
}

TEST_F(VulkanOps, MatMulSplitsWeightsBeyondTheBufferRange) {
  // A 1 KiB largest range forces row chunks: 200 rows x 48 f16 = 19 KiB -> 20 chunks; the
  // embedding of the same size splits likewise.
  vk::VulkanTuning t;
  t.weights.max_range = 1024;
  auto be = MakeVulkan(t);
  for (int R : {2, 12}) {
    Tensor X = RandomTensor("x", DType::kF32, {R, 48}, 7);
    Tensor W = RandomTensor("w", DType::kF16, {200, 48}, 8);
    Graph g;
    g.Add(Make(Op::kMatMul, "mm", {Input(g, X, R), g.AddWeight(W)}, {R, 200}));
    ExpectClose(RunGraph(*be, g, RowsBatch(R)), RefMatMul(X, W, nullptr, R), kTol, "split matmul");
  }
  Tensor E = RandomTensor("embed", DType::kBF16, {200, 48}, 9);
  Graph g;
  Batch b;
  b.Add(0, 0, {199, 0, 100, 57}, true);
  b.Finalize();
  g.Add(Make(Op::kEmbed, "e", {g.AddWeight(E)}, {4, 48}));
  std::vector<float> want(4 * 48);
  ref::Embed(E, b.tokens.data(), 4, want.data());
  EXPECT_EQ(RunGraph(*be, g, b), want);
}

TEST_F(VulkanOps, AddSwiGluSlice) {
  Tensor A = RandomTensor("a", DType::kF32, {5, 33}, 10, 4.0f);
  Tensor B = RandomTensor("b", DType::kF32, {5, 33}, 11);
  for (Op op : {Op::kAdd, Op::kSwiGLU}) {
    Graph g;
    const int a = Input(g, A, 5), b = Input(g, B, 5);
    g.Add(Make(op, "op", {a, b}, {5, 33}));
    std::vector<float> want(5 * 33);
    if (op == Op::kAdd)
      ref::Add(A.as<float>(), B.as<float>(), 5 * 33, want.data());
    else
      ref::SwiGLU(A.as<float>(), B.as<float>(), 5 * 33, want.data());
    ExpectClose(RunGraph(SharedVulkan(), g, RowsBatch(5)), want, 1e-6, OpName(op));
  }
  Graph g;
  Node s = Make(Op::kSlice, "slice", {Input(g, A, 5)}, {5, 7});
  s.params = SliceParams{11, 7};
  g.Add(s);
  std::vector<float> want;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c) want.push_back(A.as<float>()[r * 33 + 11 + c]);
  EXPECT_EQ(RunGraph(SharedVulkan(), g, RowsBatch(5)), want);
}

TEST_F(VulkanOps, RopeNeoxAndInterleavedWithOffsetAndFactor) {
  for (RopeMode mode : {RopeMode::kNeox, RopeMode::kInterleaved}) {
    auto rt = std::make_shared<RopeTable>();
    rt->mode = mode;
    rt->dim = 6;
    for (int i = 0; i < 3; ++i) rt->inv_freq.push_back(std::pow(10000.0f, -2.0f * i / 6) * 0.7f);
    rt->attention_factor = 1.3f;
    const int R = 4, H = 3, hd = 10, off = 3;
    Tensor X = RandomTensor("x", DType::kF32, {R, H * hd}, 12);
    Graph g;
    Node n = Make(Op::kRope, "rope", {Input(g, X, R)}, {R, H * hd});
    n.params = RopeParams{H, hd, off, rt};
    g.Add(n);
    const Batch b = RowsBatch(R, 1000);  // large angles
    std::vector<float> want(size_t(R * H * hd));
    ref::Rope(X.as<float>(), R, H, hd, off, *rt, b.positions.data(), want.data());
    ExpectClose(RunGraph(SharedVulkan(), g, b), want, 1e-6,
                mode == RopeMode::kNeox ? "neox" : "interleaved");
  }
}

TEST_F(VulkanOps, GetRowsTakesEachSequencesLastRow) {
  Tensor X = RandomTensor("x", DType::kF32, {7, 9}, 13);
  Graph g;
  const int x = Input(g, X, 7);
  Batch b;
  b.Add(0, 0, {0, 1, 2, 3});
  b.Add(1, 0, {4, 5, 6});
  b.Finalize();
  g.Add(Make(Op::kGetRows, "rows", {x}, {2, 9}));
  std::vector<float> want;
  for (int r : {3, 6})
    for (int c = 0; c < 9; ++c) want.push_back(X.as<float>()[r * 9 + c]);
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 2, 16);
  EXPECT_EQ(RunGraph(SharedVulkan(), g, b, kv.get()), want);
}

// One workgroup per row (1001 columns), and parts then a final pass for long rows (20011
// columns: 20 parts of 1001, the last one short; ties across parts).
TEST_F(VulkanOps, ArgmaxOnTheDevice) {
  for (const int C : {1001, 20011}) {
    Tensor X = RandomTensor("x", DType::kF32, {3, C}, 14);
    float* x = static_cast<float*>(MutableData(X));
    x[1 * C + C - 2] = 5.0f;  // row 1: late maximum
    x[2 * C + 3] = 7.0f;      // row 2: a tie, the lower index wins
    x[2 * C + C - 301] = 7.0f;
    Graph g;
    g.Add(Make(Op::kGetRows, "rows", {Input(g, X, 3)}, {3, C}));
    auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 8);
    std::vector<int32_t> ids(3);
    SharedVulkan().ComputeArgmax(g, RowsBatch(3), *kv, ids.data());
    EXPECT_EQ(ids[0], int(std::max_element(x, x + C) - x)) << C;
    EXPECT_EQ(ids[1], C - 2) << C;
    EXPECT_EQ(ids[2], 3) << C;
  }
}

// A NaN or infinite logit anywhere in a row (first, middle or last column; in one part of a long
// row) is an error naming the row, not the id of the first column (issue 23: NaN logits decoded
// as token 0 forever). The other rows being clean does not hide it.
TEST_F(VulkanOps, ArgmaxFlagsNonFiniteLogits) {
  for (const int C : {1001, 20011}) {
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      for (const int col : {0, C / 2 + 1, C - 1}) {
        Tensor X = RandomTensor("x", DType::kF32, {3, C}, 15);
        static_cast<float*>(MutableData(X))[1 * C + col] = bad;
        Graph g;
        g.Add(Make(Op::kGetRows, "rows", {Input(g, X, 3)}, {3, C}));
        auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 8);
        std::vector<int32_t> ids(3);
        std::string msg;
        try {
          SharedVulkan().ComputeArgmax(g, RowsBatch(3), *kv, ids.data());
        } catch (const Error& e) {
          msg = e.what();
        }
        EXPECT_NE(msg.find("non-finite logit"), std::string::npos) << C << " " << bad << " " << col;
        EXPECT_NE(msg.find("output row 1"), std::string::npos) << msg;
      }
    }
  }
}

}  // namespace
}  // namespace es::test
