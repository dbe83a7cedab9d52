// Greedy speculative decoding on the Vulkan backend reads ids only (docs/speculative.md): the
// verification of k + 1 rows and the draft model's steps take the device argmax (argmax.comp, one
// id a row downloaded), no logit row comes back, and the golden Llama's greedy ids equal those of
// plain decoding on the device, with n-gram drafts and with draft = target (on lavapipe; the CLI
// twin is VulkanCli.SpeculativeGreedyEqualsPlain).
#include "edgeseek/internal/runtime/speculative.h"

#include <gtest/gtest.h>

#include "counting_backend.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

class VulkanSpeculative : public VulkanTest {};

TEST_F(VulkanSpeculative, GreedyReadsIdsOnlyAndEqualsPlain) {
  auto model = Model::Load(SourceDir() + "/tests/golden/data/models/llama3");
  const std::vector<int32_t> prompt = {11, 57, 203, 9, 140, 77, 11, 57, 203, 9, 140, 77};
  GenerateOptions go;
  go.max_new_tokens = 30;
  go.min_new_tokens = go.max_new_tokens;  // bench's shape (nothing banned: no EOS ids)
  go.sampling.temperature = 0;
  std::vector<int32_t> plain;
  {
    Runner r(model, MakeVulkan({}), RunnerOptions{});
    plain = Generate(r, r.AcquireSlot(), prompt, go);
  }
  ASSERT_EQ(plain.size(), 30u);
  ReadBack draft_counts;
  NgramDrafter ngram;
  ModelDrafter self(std::make_unique<Runner>(
      model, std::make_unique<CountingBackend>(MakeVulkan({}), &draft_counts), RunnerOptions{}));
  for (Drafter* d : std::vector<Drafter*>{&ngram, &self}) {
    for (int k : {2, 4}) {
      SCOPED_TRACE(d->name() + " k=" + std::to_string(k));
      ReadBack target;
      Runner r(model, std::make_unique<CountingBackend>(MakeVulkan({}), &target), RunnerOptions{});
      GenerateOptions sgo = go;
      sgo.drafter = d;
      sgo.spec_k = k;
      GenerateStats st;
      EXPECT_EQ(Generate(r, r.AcquireSlot(), prompt, sgo, &st), plain);
      EXPECT_GT(st.spec.accepted, 0);
      EXPECT_EQ(target.logit_calls, 0);
      EXPECT_EQ(target.max_argmax_rows, k + 1);  // k + 1 ids from one forward
    }
  }
  EXPECT_EQ(draft_counts.logit_calls, 0);
  EXPECT_GT(draft_counts.argmax_calls, 0);
}

}  // namespace
}  // namespace es::test
