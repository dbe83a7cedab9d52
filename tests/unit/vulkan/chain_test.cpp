// ES_VK_CHAIN (command.h, shaders/chain.glsl): decode programs whose barrier levels are chained
// by counters in memory. On lavapipe the chained shaders run the same arithmetic as the plain
// ones (only the buffers' coherence and the wait / signal around it differ), so the logits must
// agree bit for bit with the barriers' through prefill and decode steps of 1 and 3 rows, for a
// dense model and the DeepSeek-V2 and V3 ones; the chained decode program keeps one barrier (the
// one before the readback), prefill programs are recorded as before, and a wait that times out
// turns chaining off and reruns the step with barriers.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct ChainCase {
  const char* name;
  const char* config;
};

const ChainCase kChainCases[] = {
    {"llama", kTinyLlamaConfig},
    {"deepseek_v2", kTinyDeepseekV2Config},
    {"deepseek_v3", kTinyDeepseekV3Config},
};

// One backend with ES_VK_CHAIN as given, a synthetic model and a KV cache of 3 slots.
struct ChainRun {
  std::unique_ptr<vk::VulkanBackend> be;
  std::shared_ptr<Model> model;
  std::unique_ptr<KvStorage> kv;
  ChainRun(const char* config, bool chain) {
    vk::VulkanTuning t;
    t.knobs.Set(vk::Knob::kChain, chain ? "1" : "0");
    be = MakeVulkan(t);
    const std::string path = TempDir() + "/config.json";
    WriteFile(path, config);
    LoadOptions lo;
    lo.seed = 5;
    lo.synthetic_dtype = DType::kBF16;
    model = Model::Synthetic(path, lo);
    kv = be->CreateKv(model->config().MakeKvSpec(DType::kF32), 3, 64);
  }
  std::vector<float> Step(Batch b) {
    b.Finalize();
    const Graph g = model->arch().Build(b);
    const Node& o = g.node(g.output());
    std::vector<float> out(size_t(o.shape[0] * o.shape[1]));
    be->Compute(g, b, *kv, out.data());
    return out;
  }
};

// The steps both runs take: a prefill of 3 sequences (12 rows), 3 decode steps of 1 row, then 3
// of 3 rows (one a sequence).
std::vector<Batch> Steps(int vocab) {
  std::vector<Batch> steps(7);
  steps[0].Add(0, 0, {1, 5, 9, 2, vocab - 1}, true);
  steps[0].Add(1, 0, {3, 4, 8});
  steps[0].Add(2, 0, {7, 6, 2, 11});
  for (int i = 0; i < 3; ++i) steps[size_t(1 + i)].Add(0, 5 + i, {(7 * i + 3) % vocab});
  for (int i = 0; i < 3; ++i) {
    Batch& b = steps[size_t(4 + i)];
    b.Add(0, 8 + i, {(5 * i + 1) % vocab});
    b.Add(1, 3 + i, {(11 * i + 6) % vocab});
    b.Add(2, 4 + i, {(13 * i + 2) % vocab});
  }
  return steps;
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << what << ": the chained logits differ from the barriers' (first: " << a[0] << " vs " << b[0]
      << ")";
}

TEST_F(VulkanTest, ChainedDecodeMatchesBarriersBitForBit) {
  for (const ChainCase& cc : kChainCases) {
    const std::string name = cc.name;
    ChainRun plain(cc.config, false), chained(cc.config, true);
    const std::vector<Batch> steps = Steps(int(plain.model->config().vocab_size));
    for (size_t s = 0; s < steps.size(); ++s) {
      const std::string what = name + " step " + std::to_string(s);
      ExpectSameBits(chained.Step(steps[s]), plain.Step(steps[s]), what);
      const vk::VulkanCounters c = chained.be->counters(), p = plain.be->counters();
      EXPECT_EQ(p.chained_levels, 0) << what;
      EXPECT_EQ(c.shaders, p.shaders) << what << ": the same dispatches";
      if (s == 0) {  // prefill (12 rows): recorded as before
        EXPECT_EQ(c.chained_levels, 0) << what;
        EXPECT_EQ(c.barriers, p.barriers) << what;
      } else {  // decode: every level chained, only the readback's barrier left
        EXPECT_GT(p.barriers, 5) << what;
        EXPECT_EQ(c.chained_levels, p.barriers - 1) << what;
        EXPECT_LE(c.barriers, 1) << what;
      }
    }
    EXPECT_FALSE(chained.be->counters().chain_off) << name;
    std::printf(
        "%s decode (3 rows): %d dispatches, %d barriers plain, %d chained levels + %d "
        "barrier chained\n",
        name.c_str(), plain.be->counters().dispatches, plain.be->counters().barriers,
        chained.be->counters().chained_levels, chained.be->counters().barriers);
  }
}

// Waits whose targets cannot be reached (SetChainTargetBiasForTest) time out instead of hanging:
// the step is run again with barriers and gives the barriers' logits, chaining stays off.
TEST_F(VulkanTest, ChainedWaitThatTimesOutRerunsTheStepWithBarriers) {
  const ChainCase& cc = kChainCases[1];  // DeepSeek-V2: MLA and MoE
  ChainRun plain(cc.config, false), chained(cc.config, true);
  chained.be->SetChainTargetBiasForTest(1);
  const std::vector<Batch> steps = Steps(int(plain.model->config().vocab_size));
  for (size_t s = 0; s < 3; ++s) {
    const std::string what = std::string("step ") + std::to_string(s);
    ExpectSameBits(chained.Step(steps[s]), plain.Step(steps[s]), what);
    EXPECT_EQ(chained.be->counters().chain_off, s > 0) << what;
    EXPECT_EQ(chained.be->counters().chained_levels, 0) << what;
  }
  // Built again after the timeout (one decode program each run: the chained one was dropped).
  EXPECT_EQ(chained.be->counters().barriers, plain.be->counters().barriers);
}

// A level with a dispatch whose shader has no chained twin (bandwidth_copy) keeps real barriers
// before and after it; the levels around it chain: waits for the previous level's workgroups
// (all its dispatches'), signals where the next level waits, plain pipelines elsewhere.
TEST_F(VulkanTest, ChainPlanKeepsBarriersAroundAShaderWithoutTwin) {
  vk::PipelineCache& pipes = SharedVulkan().pipelines();
  const vk::Pipeline& add = pipes.Get("add", {1, 1, 1});
  const vk::Pipeline& copy = pipes.Get("bandwidth_copy", {1, 1});
  ASSERT_NE(pipes.Chained(add), nullptr);
  ASSERT_EQ(pipes.Chained(copy), nullptr);
  auto buf = [](uintptr_t k) { return vk::BufRange{reinterpret_cast<VkBuffer>(k), 0, 64}; };
  // Levels: {add A, add A'} -> add B -> copy C -> add D -> add E, each reading the one before.
  auto make = [&](const vk::Pipeline& p, std::vector<uintptr_t> in, uintptr_t out, uint32_t g) {
    vk::Dispatch d;
    d.pipe = &p;
    for (uintptr_t k : in) d.bindings.push_back({buf(k)});
    d.bindings.push_back({buf(out)});
    d.writes = {int(in.size())};
    d.groups[0] = g;
    d.groups[1] = 2;
    return d;
  };
  std::vector<vk::Dispatch> ds = {make(add, {1, 2}, 10, 3),   make(add, {1, 2}, 11, 4),
                                  make(add, {10, 11}, 12, 1), make(copy, {12}, 13, 1),
                                  make(add, {13, 13}, 14, 5), make(add, {14, 14}, 15, 1)};
  const std::vector<int> steps = vk::BarrierSteps(ds, false);
  EXPECT_EQ(steps, (std::vector<int>{0, 0, 1, 2, 3, 4}));
  vk::ChainSetup cs;
  cs.pipes = &pipes;
  const vk::ChainPlan plan = vk::PlanChain(ds, steps, &cs);
  EXPECT_EQ(plan.chained, 2);
  EXPECT_EQ(plan.barrier_before, (std::vector<char>{1, 0, 1, 1, 0}));
  constexpr uint32_t kNone = 0xffffffffu;
  using P = std::array<uint32_t, 3>;
  const std::vector<P> want = {{kNone, 0, 1},     {kNone, 0, 1}, {1, 14, kNone},
                               {kNone, 0, kNone}, {kNone, 0, 4}, {4, 10, kNone}};
  EXPECT_EQ(plan.push, want);
  const std::vector<bool> chained = {true, true, true, false, true, true};
  for (size_t i = 0; i < ds.size(); ++i)
    EXPECT_EQ(plan.pipe[i]->chained, chained[i]) << "dispatch " << i;
  // Without a ChainSetup (the knob off): every boundary a barrier, the plain pipelines.
  const vk::ChainPlan off = vk::PlanChain(ds, steps, nullptr);
  EXPECT_EQ(off.chained, 0);
  for (size_t i = 0; i < ds.size(); ++i) EXPECT_EQ(off.pipe[i], ds[i].pipe);
}

}  // namespace
}  // namespace es::test
