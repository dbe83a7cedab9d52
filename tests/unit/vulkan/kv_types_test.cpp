// KV cache types end to end on the Vulkan backend: f16 is the default cache of every runner on
// a GPU; and a model run over a paged cache of each type (f16, q8_0, q4_0), with every slot's
// blocks scattered over the pool, agrees with the CPU backend running the same type, for dense
// K/V (llama, head dim 32) and the MLA latent (deepseek_v2, latent 64 and rope 32).
#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

std::shared_ptr<Model> Load(const std::string& arch) {
  return SyntheticModel(arch == "llama" ? kSmallLlamaConfig : SmallDeepseekV2Config(24).c_str(), 5);
}

TEST(VulkanKvTypes, F16IsTheDefaultCacheOnTheGpu) {
  auto model = Load("llama");
  Runner gpu(model, MakeVulkan({}), RunnerOptions{});
  EXPECT_EQ(gpu.kv_type(), DType::kF16);
  EXPECT_EQ(gpu.kv_bytes_per_token(), model->config().MakeKvSpec(DType::kF16).BytesPerToken());
  RunnerOptions ro;
  ro.kv_dtype = DType::kQ8_0;
  Runner q8(model, MakeVulkan({}), ro);
  EXPECT_EQ(q8.kv_type(), DType::kQ8_0);
}

class VulkanKvTypes : public VulkanTest, public ::testing::WithParamInterface<std::string> {};

// Tolerances (relative L2 of the logits): each backend rounds what its own earlier layers
// computed, and values 1e-6 apart on either side of a rounding boundary take neighbouring f16
// values or quants. Measured on lavapipe: f16 up to 8.8e-5 (a half-ulp of f16 is small, so
// flips are frequent but each is small), q8_0 and q4_0 up to 7e-7 (their quanta are coarse, so a
// flip is rare, but one flip weighs more): 3e-4 for f16, 1e-3 for the block types.
TEST_P(VulkanKvTypes, ScatteredQuantizedCacheAgreesWithTheCpu) {
  auto model = Load(GetParam());
  for (const std::pair<DType, double>& tt :
       {std::pair{DType::kF16, 3e-4}, std::pair{DType::kQ8_0, 1e-3},
        std::pair{DType::kQ4_0, 1e-3}}) {
    const DType kt = tt.first;
    const std::string tag = GetParam() + " " + std::string(Name(kt));
    const int V = int(model->config().vocab_size);
    for (const Tensor* w : model->weights()) SharedVulkan().PrepareWeight(*w);
    auto cpu = CreateCpuBackend(BackendOptions{});
    const KvSpec spec = model->config().MakeKvSpec(kt);
    auto kv_cpu = cpu->CreatePagedKv(spec, 3, 96, 18);
    auto kv_gpu = SharedVulkan().CreatePagedKv(spec, 3, 96, 18);
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> table;
      for (int i = 0; i < 6; ++i) table.push_back(int32_t(17 - (i * 3 + (2 - s))));
      kv_cpu->SetBlockTable(s, table.data(), int(table.size()));
      kv_gpu->SetBlockTable(s, table.data(), int(table.size()));
    }
    const std::vector<int> lens = {5, 37, 20};
    std::vector<int64_t> pos(3, 0);
    std::vector<std::vector<int32_t>> next(3);
    for (int s = 0; s < 3; ++s) next[size_t(s)] = TestTokens(lens[size_t(s)], s, V);
    for (int step = 0; step < 6; ++step) {  // a prefill of 62 rows, then decodes across boundaries
      Batch b;
      for (int s = 0; s < 3; ++s)
        b.Add(s, pos[size_t(s)], next[size_t(s)], /*all_logits=*/step == 0);
      b.Finalize();
      const Graph g = model->arch().Build(b);
      const Node& o = g.node(g.output());
      std::vector<float> got(size_t(o.shape[0] * o.shape[1])), want(got.size());
      SharedVulkan().Compute(g, b, *kv_gpu, got.data());
      cpu->Compute(g, b, *kv_cpu, want.data());
      ExpectClose(got, want, tt.second, tag + " step " + std::to_string(step));
      for (int s = 0; s < 3; ++s) {
        pos[size_t(s)] += int64_t(next[size_t(s)].size());
        next[size_t(s)] = {int32_t((step * 7 + s) % V)};
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, VulkanKvTypes, ::testing::Values("llama", "deepseek_v2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace es::test
