// The CPU backend's fusions (cpu/fusion_caps.h, graph/passes/fusions.h) against the plain graph:
//   - MatMulPair (the dual gate/up GEMV's x quantized once) gives each output the bits of MatMul,
//     every weight type, odd R, K blocks and N;
//   - MatMulEpi / MatMulPairEpi (the fused epilogues) call their epilogue exactly once for every
//     output, each time on outputs that already hold MatMul's bits (GEMV, skinny GEMM, GEMM of
//     more than one task of rows and columns, partial groups of 8), and what it writes stays;
//   - models run fused and plain (CreateCpuBackend's `fuse`) give the same logits bit for bit
//     (every fused op keeps its decomposition's arithmetic: the residual add commutes, the SwiGLU
//     and the rope are the nodes' own row functions), for prefill chunks of 13 rows (GEMM with
//     the epilogues and the dual gate/up matmul), of 3 rows and decode steps (the plain matmul
//     nodes below kEpilogueMinRows), each with the rotating store, on Qwen2 (biases) and Llama
//     shapes whose sizes are no multiple of 8 (a group of the lane kernels), and DeepSeek-V2
//     (MLA, MoE + residual); weights bf16, q8_0, q4_0, q4_k_m;
//   - --profile shows the fused families ran (so the equality above is not vacuous) and the plain
//     run has none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/quality.h"
#include "edgeseek/internal/runtime/runner.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

class CpuMatMulPair : public ::testing::TestWithParam<DType> {};

TEST_P(CpuMatMulPair, GivesEachOutputTheBitsOfMatMul) {
  const DType type = GetParam();
  ThreadPool pool(2);
  struct Shape {
    int64_t R, blocks, N;  // K = blocks · the type's block (or 32 for dense types)
  };
  const int64_t be = IsQuantized(type) ? BlockElems(type) : 32;
  for (const Shape& s : {Shape{1, 1, 1}, Shape{1, 5, 37}, Shape{3, 3, 13}, Shape{5, 7, 70},
                         Shape{9, 2, 33}, Shape{17, 3, 8}}) {
    const int64_t R = s.R, K = s.blocks * be, N = s.N;
    const auto wa = test::RandomWeights(type, N, K, uint64_t(K + N));
    const auto wb = test::RandomWeights(type, N, K, uint64_t(K + N + 1));
    const auto x = test::RandomFloats(size_t(R * K), uint64_t(R), 1.0f);
    const int64_t ldy = N + 3;  // a stride past N
    std::vector<float> ya(size_t(R * ldy), -1.0f), yb = ya, ra = ya, rb = ya;
    cpu::MatMulPair(x.data(), R, K, wa.bytes.data(), wb.bytes.data(), type, N, ya.data(), yb.data(),
                    ldy, pool);
    cpu::MatMul(x.data(), R, K, wa.bytes.data(), type, N, nullptr, ra.data(), ldy, pool);
    cpu::MatMul(x.data(), R, K, wb.bytes.data(), type, N, nullptr, rb.data(), ldy, pool);
    EXPECT_EQ(0, std::memcmp(ya.data(), ra.data(), ya.size() * 4))
        << Name(type) << " R=" << R << " K=" << K << " N=" << N;
    EXPECT_EQ(0, std::memcmp(yb.data(), rb.data(), yb.size() * 4))
        << Name(type) << " R=" << R << " K=" << K << " N=" << N;
  }
}

std::vector<DType> PairTypes() {
  std::vector<DType> t(std::begin(test::kQuantMatMulTypes), std::end(test::kQuantMatMulTypes));
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) t.push_back(d);
  return t;
}

INSTANTIATE_TEST_SUITE_P(Types, CpuMatMulPair, ::testing::ValuesIn(PairTypes()),
                         [](const auto& info) { return std::string(Name(info.param)); });

// The epilogue calls of one MatMulEpi / MatMulPairEpi: per output how many calls covered it, and
// whether the outputs of every call already held the reference bits (ys[i] against refs[i]) when
// it was called. The epilogue then writes y = 2 y + 1 (a pair: both), which must stay.
struct EpiRecorder {
  int64_t R, N, ldy;
  std::vector<float*> ys;
  std::vector<const float*> refs;
  std::mutex mu;
  std::vector<int> calls;  // [R, N]
  int64_t bad_ranges = 0, early = 0;

  EpiRecorder(int64_t r, int64_t n, int64_t l) : R(r), N(n), ldy(l), calls(size_t(r * n), 0) {}
  cpu::MatMulEpilogue Fn() {
    return [this](int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
      std::lock_guard<std::mutex> lock(mu);
      if (r0 < 0 || r0 >= r1 || r1 > R || n0 < 0 || n0 >= n1 || n1 > N) {
        ++bad_ranges;
        return;
      }
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = n0; c < n1; ++c) {
          ++calls[size_t(r * N + c)];
          for (size_t i = 0; i < ys.size(); ++i) {
            float& v = ys[i][r * ldy + c];
            if (std::memcmp(&v, &refs[i][r * ldy + c], 4) != 0) ++early;
            v = 2.0f * v + 1.0f;
          }
        }
    };
  }
  // Every output in exactly one call, each call's outputs final, and y = 2 ref + 1 after it.
  void Check(const std::string& what) const {
    EXPECT_EQ(bad_ranges, 0) << what;
    EXPECT_EQ(early, 0) << what << ": outputs not yet MatMul's when the epilogue ran";
    int64_t wrong = 0;
    for (int v : calls) wrong += v != 1;
    EXPECT_EQ(wrong, 0) << what << ": outputs not in exactly one epilogue call";
    for (size_t i = 0; i < ys.size(); ++i)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < ldy; ++c) {
          const float want = c < N ? 2.0f * refs[i][r * ldy + c] + 1.0f : -1.0f;
          ASSERT_EQ(0, std::memcmp(&ys[i][r * ldy + c], &want, 4))
              << what << " output " << i << " r=" << r << " c=" << c;
        }
  }
};

class CpuMatMulEpi : public ::testing::TestWithParam<DType> {};

TEST_P(CpuMatMulEpi, CallsItOnceForEveryFinishedOutput) {
  const DType type = GetParam();
  ThreadPool pool(2);
  struct Shape {
    int64_t R, blocks, N;  // K = blocks · the type's block (or 32 for dense types)
  };
  const int64_t be = IsQuantized(type) ? BlockElems(type) : 32;
  // R = 1 (GEMV), 2..4 (the skinny GEMM; Q4_0 on AVX3_DL up to 8 rows in 16-column groups),
  // more (GEMM; 133 rows: two tasks of rows of the lane kernels); N = 1, partial groups of 8 and
  // 16, several tasks of columns.
  for (const Shape& s :
       {Shape{1, 1, 1}, Shape{1, 5, 37}, Shape{2, 3, 13}, Shape{3, 2, 70}, Shape{4, 3, 9},
        Shape{5, 7, 70}, Shape{8, 3, 19}, Shape{9, 2, 33}, Shape{17, 3, 8}, Shape{133, 1, 77}}) {
    const int64_t R = s.R, K = s.blocks * be, N = s.N;
    const std::string what = std::string(Name(type)) + " R=" + std::to_string(R) +
                             " K=" + std::to_string(K) + " N=" + std::to_string(N);
    const auto wa = test::RandomWeights(type, N, K, uint64_t(K + N));
    const auto wb = test::RandomWeights(type, N, K, uint64_t(K + N + 1));
    const auto x = test::RandomFloats(size_t(R * K), uint64_t(R), 1.0f);
    const auto bias = test::RandomFloats(size_t(N), uint64_t(N), 1.0f);
    const int64_t ldy = N + 3;  // a stride past N, which no call may touch
    std::vector<float> ya(size_t(R * ldy), -1.0f), yb = ya, ra = ya, rb = ya;
    cpu::MatMul(x.data(), R, K, wa.bytes.data(), type, N, bias.data(), ra.data(), ldy, pool);
    {
      EpiRecorder rec(R, N, ldy);
      rec.ys = {ya.data()};
      rec.refs = {ra.data()};
      cpu::MatMulEpi(x.data(), R, K, wa.bytes.data(), type, N, bias.data(), ya.data(), ldy,
                     rec.Fn(), pool);
      rec.Check("MatMulEpi " + what);
    }
    cpu::MatMul(x.data(), R, K, wa.bytes.data(), type, N, nullptr, ra.data(), ldy, pool);
    cpu::MatMul(x.data(), R, K, wb.bytes.data(), type, N, nullptr, rb.data(), ldy, pool);
    std::fill(ya.begin(), ya.end(), -1.0f);
    EpiRecorder rec(R, N, ldy);
    rec.ys = {ya.data(), yb.data()};
    rec.refs = {ra.data(), rb.data()};
    cpu::MatMulPairEpi(x.data(), R, K, wa.bytes.data(), wb.bytes.data(), type, N, ya.data(),
                       yb.data(), ldy, rec.Fn(), pool);
    rec.Check("MatMulPairEpi " + what);
  }
}

std::vector<DType> EpiTypes() {
  std::vector<DType> t = PairTypes();
  t.push_back(DType::kI4F);
  return t;
}

INSTANTIATE_TEST_SUITE_P(Types, CpuMatMulEpi, ::testing::ValuesIn(EpiTypes()),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(CpuMatMulEpiArgs, RejectsAnEmptyEpilogueAndBadShapes) {
  ThreadPool pool(2);
  const auto w = test::RandomWeights(DType::kQ4_0, 8, 32, 1);
  const auto x = test::RandomFloats(32, 2, 1.0f);
  std::vector<float> y(8), y2(8);
  EXPECT_THROW(cpu::MatMulEpi(x.data(), 1, 32, w.bytes.data(), DType::kQ4_0, 8, nullptr, y.data(),
                              8, cpu::MatMulEpilogue(), pool),
               Error);
  EXPECT_THROW(cpu::MatMulPairEpi(x.data(), 1, 32, w.bytes.data(), w.bytes.data(), DType::kQ4_0, 8,
                                  y.data(), y2.data(), 8, cpu::MatMulEpilogue(), pool),
               Error);
  const cpu::MatMulEpilogue epi = [](int64_t, int64_t, int64_t, int64_t) {};
  EXPECT_THROW(cpu::MatMulEpi(x.data(), 1, 32, w.bytes.data(), DType::kQ4_0, 8, nullptr, y.data(),
                              7, epi, pool),
               Error);  // ldy < N
  EXPECT_THROW(cpu::MatMulPairEpi(x.data(), 1, 16, w.bytes.data(), w.bytes.data(), DType::kQ4_0, 8,
                                  y.data(), y2.data(), 8, epi, pool),
               Error);  // K not a multiple of the block
}

// Sizes that are no multiple of 64 (the column blocks) nor of 8 (a group of the lane kernels).
const char* const kQwen2Config = R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
  "vocab_size":203,"hidden_size":160,"intermediate_size":352,"num_hidden_layers":2,
  "num_attention_heads":5,"num_key_value_heads":1,"rms_norm_eps":1e-6,
  "max_position_embeddings":256,"rope_theta":10000.0,"tie_word_embeddings":false,
  "torch_dtype":"bfloat16"})";
const char* const kLlamaConfig = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
  "vocab_size":131,"hidden_size":128,"intermediate_size":224,"num_hidden_layers":2,
  "num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-5,"max_position_embeddings":256,
  "rope_theta":10000.0,"torch_dtype":"bfloat16"})";
const char* const kDeepseekV2Config = R"({"architectures":["DeepseekV2ForCausalLM"],
  "model_type":"deepseek_v2","vocab_size":101,"hidden_size":64,"intermediate_size":96,
  "moe_intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":4,
  "num_key_value_heads":4,"q_lora_rank":null,"kv_lora_rank":64,"qk_nope_head_dim":16,
  "qk_rope_head_dim":32,"v_head_dim":16,"n_routed_experts":8,"n_shared_experts":1,
  "num_experts_per_tok":3,"first_k_dense_replace":1,"moe_layer_freq":1,"n_group":4,"topk_group":2,
  "topk_method":"group_limited_greedy","scoring_func":"softmax","norm_topk_prob":false,
  "routed_scaling_factor":2.0,"rms_norm_eps":1e-6,"max_position_embeddings":512,
  "rope_theta":10000.0,"torch_dtype":"bfloat16"})";

struct ModelCase {
  std::string arch, weights;  // weights: bf16 (as made) or a quantization policy
};

std::shared_ptr<Model> LoadCase(const ModelCase& c) {
  const std::string path = test::TempDir() + "/fusion_" + c.arch + ".json";
  test::WriteFile(path, c.arch == "qwen2"   ? kQwen2Config
                        : c.arch == "llama" ? kLlamaConfig
                                            : kDeepseekV2Config);
  LoadOptions lo;
  lo.seed = 29;
  if (c.weights != "bf16")
    lo.quantize = std::make_shared<QuantPolicy>(BuiltinQuantPolicy(c.weights));
  return Model::Synthetic(path, lo);
}

// Logits of 13 tokens as one prefill chunk, then in chunks of 3, then 4 decode steps of one row;
// the profile the backend printed in *err.
std::vector<float> Logits(const std::shared_ptr<Model>& m, bool fuse, std::string* err) {
  BackendOptions bo;
  bo.threads = 2;
  bo.profile = true;
  testing::internal::CaptureStderr();
  std::vector<float> out;
  {
    Runner r(m, CreateCpuBackend(bo, fuse), {});
    const std::vector<int32_t> toks = RandomTokens(13, m->vocab_size(), 7);
    for (int chunk : {13, 3, 1}) {
      const std::vector<int32_t> t(toks.begin(), toks.begin() + (chunk == 1 ? 4 : 13));
      const std::vector<float> l = SequenceLogits(r, t, chunk);
      out.insert(out.end(), l.begin(), l.end());
    }
  }
  *err = testing::internal::GetCapturedStderr();
  return out;
}

class CpuFusedModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CpuFusedModel, GivesThePlainGraphsLogitsBitForBit) {
  const ModelCase& c = GetParam();
  const auto m = LoadCase(c);
  std::string fused_err, plain_err;
  const std::vector<float> fused = Logits(m, true, &fused_err);
  const std::vector<float> plain = Logits(m, false, &plain_err);
  ASSERT_EQ(fused.size(), plain.size());
  EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * 4));
  // The fusions ran: the prefill table (13-row and 3-row steps) has the dual gate/up matmul and
  // the residual epilogue (13 rows); the decode table (printed first) has the plain matmul,
  // SwiGLU and add nodes (steps below kEpilogueMinRows rows); the norms are not folded
  // (CpuFusionCaps), their nodes ran.
  const size_t pre = fused_err.find("cpu profile, prefill");
  ASSERT_NE(pre, std::string::npos) << fused_err;
  const std::string dec = fused_err.substr(0, pre), prefill = fused_err.substr(pre);
  EXPECT_NE(prefill.find("+gate+swiglu"), std::string::npos) << fused_err;
  EXPECT_NE(prefill.find("+add)"), std::string::npos) << fused_err;
  EXPECT_EQ(dec.find("+gate+swiglu"), std::string::npos) << fused_err;
  EXPECT_EQ(dec.find("(matmul+add)"), std::string::npos) << fused_err;
  EXPECT_NE(dec.find("(swiglu)"), std::string::npos) << fused_err;
  EXPECT_EQ(fused_err.find("+rms_norm"), std::string::npos) << fused_err;
  EXPECT_NE(dec.find("input_layernorm (rms_norm)"), std::string::npos) << fused_err;
  // k's rope into the cache (MLA keeps its rope: its kv store is the Vulkan backend's fusion);
  // MoE layers add the residual as they combine the experts.
  if (c.arch != "deepseek_v2") {
    EXPECT_NE(dec.find("+rope)"), std::string::npos) << fused_err;
  } else {
    EXPECT_NE(dec.find("(moe+add)"), std::string::npos) << fused_err;
  }
  EXPECT_EQ(plain_err.find("+"), std::string::npos) << plain_err;
}

INSTANTIATE_TEST_SUITE_P(Models, CpuFusedModel,
                         ::testing::Values(ModelCase{"qwen2", "bf16"}, ModelCase{"qwen2", "q8_0"},
                                           ModelCase{"qwen2", "q4_0"}, ModelCase{"qwen2", "q4_k_m"},
                                           ModelCase{"llama", "q4_0"}, ModelCase{"llama", "q4_k_m"},
                                           ModelCase{"deepseek_v2", "bf16"},
                                           ModelCase{"deepseek_v2", "q4_0"}),
                         [](const auto& info) {
                           return info.param.arch + "_" + info.param.weights;
                         });

}  // namespace
}  // namespace es
