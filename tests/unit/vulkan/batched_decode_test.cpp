// Batched decode on the Vulkan backend (issue 17 item 1): steps of 1…64 decode rows, one row a
// sequence over ragged contexts (continuous batching's steady state), give each row the logits
// of the established decode path (steps of at most 8 rows). Past 8 rows the matmuls take the
// GEMMs (ops.h kGemvMaxRows), attention splits every row's keys by the row's own slot and context
// (attention_decode.comp, unfused), and the MLA keeps its absorbed split form. Dense K/V (llama,
// head dim 32) and the MLA latent (deepseek_v2), weights in bf16, q8_0 and q4_0. Both paths keep
// f32 activations (the float GEMVs, not the integer-dot one, whose int8 x the GEMMs do not share:
// through a router that flips experts, 0.2 of a row's logits) and an f32 cache (the fused
// attention of a step of up to 8 rows reads its new keys unrounded, the unfused one from the
// cache: on the H200 an f16 cache made 3e-4 of the bf16 model's logits), so the rows differ by
// summation order only. The integer-dot GEMV over 1…8 ragged rows: quant_types_test.
#include <gtest/gtest.h>

#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct Case {
  std::string arch, weights;  // weights: bf16, q8_0 or q4_0
};

std::shared_ptr<Model> Load(const Case& c) {
  const std::string path = TempDir() + "/batched_" + c.arch + ".json";
  // moe_intermediate 32: the q4_0 experts' down rows in whole 32-blocks.
  WriteFile(path, c.arch == "llama" ? std::string(kSmallLlamaConfig) : SmallDeepseekV2Config(32));
  LoadOptions lo;
  lo.seed = 23;
  if (c.weights != "bf16")
    lo.quantize = std::make_shared<QuantPolicy>(BuiltinQuantPolicy(c.weights));
  return Model::Synthetic(path, lo);
}

class VulkanBatchedDecode : public VulkanTest, public ::testing::WithParamInterface<Case> {};

TEST_P(VulkanBatchedDecode, StepsOf1To64RowsGiveTheLogitsOfEightRowSteps) {
  const Case& c = GetParam();
  auto model = Load(c);
  const int V = int(model->config().vocab_size);
  constexpr int kSeqs = 64, kSteps = 4;
  vk::VulkanTuning t;
  t.knobs.Set(vk::Knob::kGemvIdot, "0");  // see the header
  RunnerOptions ro;
  ro.n_slots = kSeqs;
  ro.context = 64;
  ro.kv_dtype = DType::kF32;  // see the header
  Runner one(model, MakeVulkan(t), ro), many(model, MakeVulkan(t), ro);
  // Ragged prompts (1..23 tokens), prefilled together in each runner.
  std::vector<int> slot_one(kSeqs), slot_many(kSeqs);
  std::vector<int64_t> pos(kSeqs);
  std::vector<float> logits;
  for (Runner* r : {&one, &many}) {
    Batch b;
    for (int s = 0; s < kSeqs; ++s) {
      const int slot = r->AcquireSlot();
      ASSERT_GE(slot, 0);
      (r == &one ? slot_one : slot_many)[size_t(s)] = slot;
      const std::vector<int32_t> prompt = TestTokens(1 + (s * 7) % 23, s, V);
      b.Add(slot, 0, prompt);
      pos[size_t(s)] = int64_t(prompt.size());
    }
    b.Finalize();
    r->Forward(b, &logits);
  }
  // Each step every sequence decodes one token: in `one`, in steps of at most 8 rows (the
  // decode path the other Vulkan tests hold against the CPU: fused attention, 8-row GEMVs); in
  // `many`, in consecutive batches of R rows (the last one ragged), R over the steps' counts.
  // A row read from another slot or context is off by O(1).
  const double tol = 2e-4;
  const int rows_of_step[kSteps] = {64, 9, 33, 17};
  auto run = [&](Runner& r, const std::vector<int>& slots, const std::vector<int32_t>& tok, int s0,
                 int n) {
    Batch b;
    for (int s = s0; s < s0 + n; ++s) b.Add(slots[size_t(s)], pos[size_t(s)], {tok[size_t(s)]});
    b.Finalize();
    r.Forward(b, &logits);
    EXPECT_EQ(logits.size(), size_t(n) * size_t(V));
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < n; ++i)
      rows.emplace_back(logits.begin() + ptrdiff_t(i) * V, logits.begin() + ptrdiff_t(i + 1) * V);
    return rows;
  };
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int32_t> tok(kSeqs);
    for (int s = 0; s < kSeqs; ++s) tok[size_t(s)] = int32_t((step * 31 + s * 5) % V);
    std::vector<std::vector<float>> want;
    for (int s0 = 0; s0 < kSeqs; s0 += 8)
      for (auto& row : run(one, slot_one, tok, s0, 8)) want.push_back(std::move(row));
    const int R = rows_of_step[step];
    for (int s0 = 0; s0 < kSeqs; s0 += R) {
      const int n = std::min(R, kSeqs - s0);
      const auto got = run(many, slot_many, tok, s0, n);
      for (int i = 0; i < n; ++i)
        ExpectClose(got[size_t(i)], want[size_t(s0 + i)], tol,
                    c.arch + " " + c.weights + ": step " + std::to_string(step) + ", " +
                        std::to_string(n) + " rows, row " + std::to_string(i) + " (sequence " +
                        std::to_string(s0 + i) + ")");
    }
    for (int s = 0; s < kSeqs; ++s) ++pos[size_t(s)];
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, VulkanBatchedDecode,
                         ::testing::Values(Case{"llama", "bf16"}, Case{"llama", "q8_0"},
                                           Case{"llama", "q4_0"}, Case{"deepseek_v2", "bf16"},
                                           Case{"deepseek_v2", "q4_0"}),
                         [](const auto& info) {
                           return info.param.arch + "_" + info.param.weights;
                         });

}  // namespace
}  // namespace es::test
