// Batched decode on the CPU backend (issue 17 items 1 and 6): steps of 1…64 decode rows, one row
// a sequence over ragged contexts (continuous batching's steady state), give every row the
// logits of a one-row step bit for bit. The matmuls take the GEMV at one row, the skinny GEMM up
// to four rows and the panel GEMM past that (matmul_lanes-inl.h), attention reads each row's own
// slot and context; all of them promise the same operations per row whatever the batch, which is
// what this holds them to. Golden models: a tied Qwen2 (as the 1.5B: the lm_head is the
// embedding) with its f32 weights and quantized at load to Q4_0 and Q8_0, and DeepSeek-V2-Lite's
// layout (MLA latent cache, routed experts) in Q4_0.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

struct Case {
  std::string model, weights;  // weights: "f32" (as stored), "q4_0" or "q8_0"
};

std::shared_ptr<Model> Load(const Case& c) {
  LoadOptions lo;
  if (c.weights != "f32")
    lo.quantize = std::make_shared<QuantPolicy>(BuiltinQuantPolicy(c.weights));
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + c.model, lo);
}

std::vector<int32_t> Tokens(int n, int seed, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((seed * 131 + i * 17 + 3) % vocab));
  return t;
}

class CpuBatchedDecode : public ::testing::TestWithParam<Case> {};

TEST_P(CpuBatchedDecode, StepsOf1To64RowsEqualOneRowStepsBitForBit) {
  const Case& c = GetParam();
  auto model = Load(c);
  const int V = model->vocab_size();
  constexpr int kSeqs = 64;
  RunnerOptions ro;
  ro.n_slots = kSeqs;
  ro.context = 64;
  BackendOptions bo;
  bo.threads = 2;
  Runner one(model, CreateBackend("cpu", bo), ro), many(model, CreateBackend("cpu", bo), ro);
  // Ragged prompts (1..23 tokens), prefilled the same way in both runners so that their caches
  // hold the same bits; only the decode steps differ.
  std::vector<int64_t> pos(kSeqs);
  std::vector<float> logits;
  for (Runner* r : {&one, &many}) {
    Batch b;
    for (int s = 0; s < kSeqs; ++s) {
      ASSERT_EQ(r->AcquireSlot(), s);
      const std::vector<int32_t> prompt = Tokens(1 + (s * 7) % 23, s, V);
      b.Add(s, 0, prompt);
      pos[size_t(s)] = int64_t(prompt.size());
    }
    b.Finalize();
    r->Forward(b, &logits);
  }
  // Each step every sequence decodes one token: in `one`, one row a step (the GEMV path); in
  // `many`, in consecutive batches of R rows (the last one ragged). A row that read another
  // slot's keys, another row's activations or took another reduction order differs.
  const int rows_of_step[] = {64, 2, 3, 4, 5, 8, 9, 17, 33, 63, 1};
  auto run = [&](Runner& r, const std::vector<int32_t>& tok, int s0, int n) {
    Batch b;
    for (int s = s0; s < s0 + n; ++s) b.Add(s, pos[size_t(s)], {tok[size_t(s)]});
    b.Finalize();
    r.Forward(b, &logits);
    EXPECT_EQ(logits.size(), size_t(n) * size_t(V));
    return logits;
  };
  int step = 0;
  for (const int R : rows_of_step) {
    std::vector<int32_t> tok(kSeqs);
    for (int s = 0; s < kSeqs; ++s) tok[size_t(s)] = int32_t((step * 31 + s * 5) % V);
    std::vector<float> want;
    for (int s = 0; s < kSeqs; ++s) {
      const std::vector<float> row = run(one, tok, s, 1);
      want.insert(want.end(), row.begin(), row.end());
    }
    for (int s0 = 0; s0 < kSeqs; s0 += R) {
      const int n = std::min(R, kSeqs - s0);
      const std::vector<float> got = run(many, tok, s0, n);
      for (int i = 0; i < n; ++i) {
        const float* g = got.data() + size_t(i) * size_t(V);
        const float* w = want.data() + size_t(s0 + i) * size_t(V);
        int first = -1;
        for (int v = 0; v < V && first < 0; ++v)
          if (std::memcmp(g + v, w + v, sizeof(float)) != 0) first = v;
        EXPECT_EQ(first, -1) << c.model << " " << c.weights << ": step " << step << ", " << n
                             << " rows, row " << i << " (sequence " << s0 + i << ", context "
                             << pos[size_t(s0 + i)] + 1 << "): logit " << first << " is "
                             << (first >= 0 ? g[first] : 0.0f) << ", one-row "
                             << (first >= 0 ? w[first] : 0.0f);
      }
    }
    for (int s = 0; s < kSeqs; ++s) ++pos[size_t(s)];
    ++step;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CpuBatchedDecode,
                         ::testing::Values(Case{"qwen2_tied", "f32"}, Case{"qwen2_tied", "q4_0"},
                                           Case{"qwen2_tied", "q8_0"}, Case{"dsv2_lite", "q4_0"}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.weights;
                         });

}  // namespace
}  // namespace es
