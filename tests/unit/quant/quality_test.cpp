// Quantization quality (src/runtime/quality.cpp) and quantize-at-load (src/runtime/convert.cpp):
// the metrics on hand-made distributions, and on a golden checkpoint the property the issue
// demands — Q8_0 keeps top-1 agreement >= 99% with the unquantized model — plus the ordering of
// the types' errors and which tensors quantize-at-load touches.
#include "edgeseek/internal/runtime/quality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::string Golden(const std::string& name) {
  return test::SourceDir() + "/tests/golden/data/models/" + name;
}

TEST(Quality, MetricsOnHandMadeRows) {
  // Row 0: identical -> KL 0, agree. Row 1: p = softmax(0, 0), q = softmax(log 3, 0) = (3/4, 1/4):
  // KL = 0.5 ln(0.5/0.75) + 0.5 ln(0.5/0.25) = 0.5 ln(4/3); argmax ties break to the first: agree.
  // Row 2: the argmax moves.
  const std::vector<float> ref = {1, 2, 0, 0, 5, 1};
  const std::vector<float> test = {1, 2, float(std::log(3.0)), 0, 1, 5};
  const QualityStats s = CompareLogits(ref, test, 2);
  EXPECT_EQ(s.positions, 3);
  const double kl1 = 0.5 * std::log(4.0 / 3.0);
  // Row 2: p = (σ(4), σ(-4)), q = its mirror: KL = (2σ(4) - 1) · 4.
  const double p = 1 / (1 + std::exp(-4.0));
  EXPECT_NEAR(s.max_kl, (2 * p - 1) * 4, 1e-6);
  EXPECT_NEAR(s.mean_kl, (kl1 + (2 * p - 1) * 4) / 3, 1e-6);
  EXPECT_NEAR(s.top1_agreement, 200.0 / 3.0, 1e-9);
  EXPECT_GT(s.rel_l2, 0);
  EXPECT_THROW(CompareLogits(ref, std::vector<float>(5), 2), Error);
}

TEST(Quality, RandomTokensAreDeterministicAndInRange) {
  const auto a = RandomTokens(500, 384, 7), b = RandomTokens(500, 384, 7),
             c = RandomTokens(500, 384, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 384);
}

QualityStats Measure(const std::string& model, const std::string& type,
                     const std::vector<int32_t>& toks, const std::vector<float>& ref) {
  auto m = Model::Load(Golden(model));
  QuantizeModelWeights(*m, BuiltinQuantPolicy(type), 2);
  Runner r(m, CreateBackend("cpu", {}), {});
  return CompareLogits(ref, SequenceLogits(r, toks, 64), m->vocab_size());
}

// The golden llama3 checkpoint (transformers, random init), 256 random tokens: Q8_0 keeps >= 99%
// of the reference's top-1 choices; the 4-bit types lose more, and the errors order by bits.
TEST(Quality, Q8_0KeepsTop1OnGoldenLlama) {
  auto ref_model = Model::Load(Golden("llama3"));
  const std::vector<int32_t> toks = RandomTokens(256, ref_model->vocab_size(), 0);
  std::vector<float> ref;
  {
    Runner r(ref_model, CreateBackend("cpu", {}), {});
    ref = SequenceLogits(r, toks, 64);
  }
  const QualityStats q8 = Measure("llama3", "q8_0", toks, ref);
  EXPECT_GE(q8.top1_agreement, 99.0);
  EXPECT_LT(q8.mean_kl, 1e-3);
  const QualityStats q5 = Measure("llama3", "q5_0", toks, ref);
  const QualityStats q4 = Measure("llama3", "q4_0", toks, ref);
  EXPECT_GT(q5.mean_kl, q8.mean_kl);
  EXPECT_GT(q4.mean_kl, q5.mean_kl);
  EXPECT_LT(q4.mean_kl, 0.1);
  // The reference against itself is exact.
  const QualityStats same = CompareLogits(ref, ref, ref_model->vocab_size());
  EXPECT_EQ(same.max_kl, 0.0);
  EXPECT_EQ(same.top1_agreement, 100.0);
}

TEST(QuantizeAtLoad, ReplacesMatmulWeightsByPolicy) {
  auto m = Model::Load(Golden("llama3"));
  const size_t before = m->weight_bytes();
  const QuantizeAtLoadStats st = QuantizeModelWeights(*m, BuiltinQuantPolicy("q4_0"), 2);
  EXPECT_GT(st.quantized, 0u);
  EXPECT_LT(m->weight_bytes(), before);
  for (const Tensor* t : m->weights()) {
    if (t->name == "model.embed_tokens.weight") {
      EXPECT_EQ(t->dtype, DType::kBF16);  // kept
    }
    if (t->name == "lm_head.weight") {
      EXPECT_EQ(t->dtype, DType::kQ8_0);  // preset rule
    }
    if (t->name == "model.layers.0.mlp.up_proj.weight") {
      EXPECT_EQ(t->dtype, DType::kQ4_0);
    }
    if (t->name == "model.layers.0.self_attn.v_proj.weight") {
      EXPECT_EQ(t->dtype, DType::kQ8_0);
    }
    if (t->shape.size() == 1) {
      EXPECT_EQ(t->dtype, DType::kBF16) << t->name;  // norms untouched
    }
  }
  // Unknown type: one clear error.
  try {
    QuantizeModelWeights(*m, BuiltinQuantPolicy("q3_x"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown quantization type 'q3_x'"), std::string::npos)
        << e.what();
  }
}

TEST(QuantizeAtLoad, MlaModelRunsWithKvBKept) {
  auto m = Model::Load(Golden("dsv2_lite"));
  QuantizeModelWeights(*m, BuiltinQuantPolicy("q8_0"), 2);
  for (const Tensor* t : m->weights())
    if (t->name.find("kv_a_proj") != std::string::npos) {
      EXPECT_EQ(t->dtype, DType::kQ8_0) << t->name;
    }
  Runner r(m, CreateBackend("cpu", {}), {});
  const std::vector<float> logits = SequenceLogits(r, {1, 2, 3, 4, 5}, 2);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(KldVerb, PrintsOneRowPerTypeAndRejectsBadInput) {
  std::string out, err;
  ASSERT_EQ(test::RunCommand(test::CliPath() + " kld -m " + Golden("qwen2_tied") +
                                 " --types q8_0,q4_0 -n 40 -t 2 --json",
                             &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("\"type\":\"q8_0\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"type\":\"q4_0\""), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
  EXPECT_EQ(
      test::RunCommand(test::CliPath() + " kld -m " + Golden("qwen2_tied") + " --types q9 -n 8",
                       &out, &err),
      1);
  EXPECT_NE(err.find("unknown quantization type 'q9'"), std::string::npos) << err;
  EXPECT_EQ(test::RunCommand(test::CliPath() + " kld -m " + Golden("qwen2_tied") + " --ids 1,2,999",
                             &out, &err),
            1);
  EXPECT_NE(err.find("token id 999 is outside the vocabulary"), std::string::npos) << err;
}

}  // namespace
}  // namespace es
