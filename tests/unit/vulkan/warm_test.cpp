// The serving warm-up (Engine::Warm) builds every pipeline a served load needs before the first
// request: steps that prefill several prompts at once next to decode rows (what eight clients
// whose prompts arrive together make) then build none. Session 36 on an H100: with a cold
// pipeline cache the first 8-client load of 300-word prompts stalled ~7 s (TTFT P99 7.5 s against
// 1.0 s once the cache held them).
#include <gtest/gtest.h>

#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"
#include "vk_util.h"
#include "vulkan_backend.h"

namespace es::test {
namespace {

class VulkanWarm : public VulkanTest {};

constexpr int kSlots = 34;  // past 32 rows: the row counts whose key chunks differ

TEST_F(VulkanWarm, ServingStepsAfterTheWarmUpBuildNoPipeline) {
  for (const bool mla : {false, true}) {
    SCOPED_TRACE(mla ? "deepseek_v2" : "llama");
    auto model = mla ? SyntheticModel(SmallDeepseekV2Config(32).c_str(), 7)
                     : SyntheticModel(kSmallLlamaConfig, 7);
    const int V = int(model->config().vocab_size);
    RunnerOptions ro;
    ro.n_slots = kSlots;
    ro.context = 256;
    auto runner = std::make_unique<Runner>(model, MakeVulkan({}), ro);
    Runner* r = runner.get();
    auto* be = dynamic_cast<vk::VulkanBackend*>(&r->backend());
    ASSERT_NE(be, nullptr);
    EngineOptions eo;
    eo.max_batch_tokens = 100;
    Engine engine(WrapRunner(std::move(runner)), std::make_shared<RequestQueue>(QosPolicy{}), eo);
    ASSERT_GT(engine.Warm(), 0);
    const int built = be->counters().pipelines_created;
    std::vector<int> slots;
    for (int i = 0; i < kSlots; ++i) slots.push_back(r->AcquireSlot());
    std::vector<float> logits;
    // Three prompts prefilled together next to two decode rows (after a step that prefills the
    // two): what clients whose prompts arrive together make.
    {
      Batch b;
      b.Add(slots[0], 0, TestTokens(20, 1, V));
      b.Add(slots[1], 0, TestTokens(9, 2, V));
      b.Finalize();
      r->Forward(b, &logits);
    }
    {
      Batch b;
      b.Add(slots[0], 20, {3});
      b.Add(slots[1], 9, {4});
      b.Add(slots[2], 0, TestTokens(40, 3, V));
      b.Add(slots[3], 0, TestTokens(30, 4, V));
      b.Add(slots[4], 0, TestTokens(17, 5, V));
      b.Finalize();
      r->Forward(b, &logits);
    }
    // A short prompt next to 1-7 decode rows, sampled on the device (2-8 output rows gathered
    // from the step's: on an H100 the head's GEMV took other variants than in decode steps).
    for (int d = 1; d <= 7; ++d) {
      Batch b;
      for (int i = 0; i < d; ++i) b.Add(slots[size_t(i)], 20, {int32_t(i % V)});
      b.Add(slots[size_t(d)], 0, TestTokens(6, 6, V));
      b.Finalize();
      std::vector<RowSampling> rows(b.out_rows.size());
      std::vector<int32_t> ids;
      r->ForwardSample(b, rows, &ids);
    }
    // Prompts of 70 and 99 rows (eo.max_batch_tokens is 100).
    for (int T : {70, 99}) {
      Batch b;
      b.Add(slots[10], 0, TestTokens(T, 7, V));
      b.Finalize();
      r->Forward(b, &logits);
    }
    // Decode steps of every row count (the warm-up runs some of them; the others must reuse
    // what those built), rows at several contexts (inside the blocks the warm-up left mapped).
    for (int rows = 1; rows <= kSlots; ++rows) {
      Batch b;
      for (int i = 0; i < rows; ++i) b.Add(slots[size_t(i)], 20 + (i * 37) % 80, {int32_t(i % V)});
      b.Finalize();
      std::vector<int32_t> ids;
      r->ForwardArgmax(b, &ids);
    }
    EXPECT_EQ(be->counters().pipelines_created, built)
        << "a served step built a pipeline the warm-up did not";
    for (int s : slots) r->ReleaseSlot(s);
  }
}

}  // namespace
}  // namespace es::test
