// Constrained decoding on the Vulkan backend: the grammar mask is applied on the host side of
// the logits (rows with a constraint take the logits path, see TokenConstraint in sampler.h),
// so a GPU-computed row masked and sampled must pick what the CPU-computed row does. A tiny
// llama on lavapipe and on the CPU decode under the same grammar with the same seeded samplers
// and must emit the same ids, all within the grammar.
#include <gtest/gtest.h>

#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

TEST_F(VulkanTest, GrammarMaskedSamplingMatchesTheCpu) {
  auto model = SyntheticModel(kTinyLlamaConfig, 5);
  const int V = int(model->config().vocab_size);
  for (const Tensor* w : model->weights()) SharedVulkan().PrepareWeight(*w);
  auto cpu = CreateCpuBackend(BackendOptions{});
  const KvSpec spec = model->config().MakeKvSpec(DType::kF32);
  // Ids 0..127 are ASCII bytes; the rest have none (never allowed).
  std::vector<std::string> bytes(static_cast<size_t>(V));
  for (int i = 0; i < 128; ++i) bytes[size_t(i)] = std::string(1, char(i));
  auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
  auto g = std::make_shared<const grammar::Grammar>(
      grammar::Grammar::ParseGbnf(R"(root ::= "{" [a-z]{2,6} ":" ( [0-9]{1,3} | "true" ) "}")"));
  for (float temperature : {0.0f, 0.9f}) {
    SamplingParams sp;
    sp.temperature = temperature;
    sp.top_k = 20;
    sp.seed = 42;
    struct Side {
      Backend* be;
      std::unique_ptr<KvStorage> kv;
      grammar::Matcher m;
      Sampler s;
      std::vector<int32_t> ids;
    };
    Side gpu{&SharedVulkan(),
             SharedVulkan().CreateKv(spec, 1, 64),
             grammar::Matcher(g, trie),
             Sampler(sp),
             {}};
    Side host{cpu.get(), cpu->CreateKv(spec, 1, 64), grammar::Matcher(g, trie), Sampler(sp), {}};
    std::vector<int32_t> next = {3, 17, 29, 5, 11};
    int64_t pos = 0;
    for (int step = 0; step < 16 && !host.m.accepting(); ++step) {
      Batch b;
      b.Add(0, pos, next);
      b.Finalize();
      const Graph graph = model->arch().Build(b);
      int32_t picked[2];
      int k = 0;
      for (Side* side : {&gpu, &host}) {
        std::vector<float> row(static_cast<size_t>(V));
        side->be->Compute(graph, b, *side->kv, row.data());
        ASSERT_GT(grammar::ApplyMask(side->m.Mask(), row.data(), V), 0);
        const int32_t id = side->s.Sample(row.data(), V, side->ids);
        ASSERT_TRUE(side->m.Accept(id)) << "step " << step << " id " << id;
        side->ids.push_back(id);
        picked[k++] = id;
      }
      ASSERT_EQ(picked[0], picked[1]) << "temperature " << temperature << " step " << step;
      pos += int64_t(next.size());
      next = {picked[0]};
    }
    EXPECT_TRUE(host.m.accepting()) << "temperature " << temperature;
    EXPECT_TRUE(gpu.m.accepting());
  }
}

}  // namespace
}  // namespace es::test
