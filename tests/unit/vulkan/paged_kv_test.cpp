// The Vulkan backend's paged KV cache (kv_storage.h, shaders/kv_addr.glsl): with every slot's
// blocks scattered over the pool (backwards, interleaved), prefill and decode of sequences of
// ragged lengths agree with the CPU backend's contiguous cache, for dense K/V (llama) and the
// MLA latent (deepseek_v2); a slot reading another slot's prefix blocks gives the logits of
// computing that prefix; an unmapped position is a clear error.
#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

std::shared_ptr<Model> Load(const char* config) { return SyntheticModel(config, 11); }

const char* ConfigOf(const std::string& arch) {
  return arch == "llama" ? kTinyLlamaConfig : kTinyDeepseekV2Config;
}

// The architecture's model with its weights on the shared Vulkan backend, a CPU backend, and
// the f32 cache spec both tests compare.
struct PagedCase {
  std::shared_ptr<Model> model;
  int vocab;
  std::unique_ptr<Backend> cpu;
  KvSpec spec;
};
PagedCase Prepare(const std::string& arch) {
  PagedCase su{Load(ConfigOf(arch)), 0, CreateCpuBackend(BackendOptions{}), {}};
  su.vocab = int(su.model->config().vocab_size);
  for (const Tensor* w : su.model->weights()) SharedVulkan().PrepareWeight(*w);
  su.spec = su.model->config().MakeKvSpec(DType::kF32);
  return su;
}

class VulkanPagedKv : public VulkanTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(VulkanPagedKv, ScatteredBlocksAgreeWithTheCpuOverRaggedContexts) {
  const PagedCase su = Prepare(GetParam());
  const auto& model = su.model;
  const int V = su.vocab;
  auto& vkb = SharedVulkan();
  const auto& cpu = su.cpu;
  const KvSpec& spec = su.spec;
  auto kv_cpu = cpu->CreateKv(spec, 3, 96);
  auto kv_gpu = vkb.CreatePagedKv(spec, 3, 96, 18);
  ASSERT_TRUE(kv_gpu->paged());
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> table;
    for (int i = 0; i < 6; ++i) table.push_back(int32_t(17 - (i * 3 + (2 - s))));
    kv_gpu->SetBlockTable(s, table.data(), int(table.size()));
  }
  const std::vector<int> lens = {5, 37, 20};
  std::vector<int64_t> pos(3, 0);
  std::vector<std::vector<int32_t>> next(3);
  for (int s = 0; s < 3; ++s) next[size_t(s)] = TestTokens(lens[size_t(s)], s, V);
  for (int step = 0; step < 14; ++step) {  // a prefill of 62 rows, then decodes across boundaries
    Batch b;
    for (int s = 0; s < 3; ++s) b.Add(s, pos[size_t(s)], next[size_t(s)], /*all_logits=*/step == 0);
    b.Finalize();
    const Graph g = model->arch().Build(b);
    const Node& o = g.node(g.output());
    std::vector<float> got(size_t(o.shape[0] * o.shape[1])), want(got.size());
    vkb.Compute(g, b, *kv_gpu, got.data());
    cpu->Compute(g, b, *kv_cpu, want.data());
    ExpectClose(got, want, 1e-4, GetParam() + " step " + std::to_string(step));
    for (int s = 0; s < 3; ++s) {
      pos[size_t(s)] += int64_t(next[size_t(s)].size());
      next[size_t(s)] = {int32_t((step * 7 + s) % V)};
    }
  }
  std::vector<float> r1(size_t(spec.width[1])), r2(r1.size());
  for (int64_t p : {0, 15, 16, 40}) {
    kv_cpu->ReadRow(1, 1, 1, p, r1.data());
    kv_gpu->ReadRow(1, 1, 1, p, r2.data());
    ExpectClose(r2, r1, 1e-5, "row " + std::to_string(p));
  }
}

TEST_P(VulkanPagedKv, SharedPrefixBlocksGiveTheLogitsOfComputingThePrefix) {
  const PagedCase su = Prepare(GetParam());
  const auto& model = su.model;
  const int V = su.vocab;
  auto& vkb = SharedVulkan();
  const auto& cpu = su.cpu;
  const KvSpec& spec = su.spec;
  const auto p = TestTokens(40, 1, V);
  auto q = std::vector<int32_t>(p.begin(), p.begin() + 32);
  for (int32_t t : TestTokens(13, 2, V)) q.push_back(t);
  auto run = [&](Backend& be, KvStorage& kv, const Batch& b) {
    const Graph g = model->arch().Build(b);
    const Node& o = g.node(g.output());
    std::vector<float> out(size_t(o.shape[0] * o.shape[1]));
    be.Compute(g, b, kv, out.data());
    return out;
  };
  auto kv_cpu = cpu->CreateKv(spec, 1, 64);
  Batch full;
  full.Add(0, 0, q);
  full.Finalize();
  const auto want = run(*cpu, *kv_cpu, full);

  auto kv = vkb.CreatePagedKv(spec, 2, 64, 8);
  const int32_t t0[] = {6, 2, 4}, t1[] = {0, 1, 3}, t1b[] = {6, 2, 5};
  kv->SetBlockTable(0, t0, 3);
  kv->SetBlockTable(1, t1, 3);
  Batch bp;
  bp.Add(0, 0, p);
  bp.Add(1, 0, TestTokens(40, 7, V));  // other tokens in slot 1's first blocks
  bp.Finalize();
  run(vkb, *kv, bp);
  kv->SetBlockTable(1, t1b, 3);  // now q's first two blocks are p's
  Batch bq;
  bq.Add(1, 32, std::vector<int32_t>(q.begin() + 32, q.end()));
  bq.Finalize();
  ExpectClose(run(vkb, *kv, bq), want, 1e-4, "logits over shared blocks");
  // Unmapped: slot 0 has blocks for 48 positions.
  Batch bad;
  bad.Add(0, 46, {1, 2, 3});
  bad.Finalize();
  try {
    run(vkb, *kv, bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no KV block"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, VulkanPagedKv, ::testing::Values("llama", "deepseek_v2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace es::test
