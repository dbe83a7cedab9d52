// Whole forward passes of tiny models of the four architectures (Llama with llama3 rope, Qwen2
// with q/k/v bias, DeepSeek-V2 with MLA + YaRN + group-limited MoE, DeepSeek-V3 with q LoRA +
// noaux_tc sigmoid routing) on the Vulkan backend against the CPU backend: a prefill of two
// sequences, then decode steps that re-submit the recorded command buffer (one program per
// shape). Logits agree to 1e-4 relative L2 with f32 activations.
#include "edgeseek/internal/runtime/model.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct ArchCase {
  const char* name;
  const char* config;
};

const ArchCase kCases[] = {
    {"llama", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","vocab_size":131,
      "hidden_size":48,"intermediate_size":80,"num_hidden_layers":2,"num_attention_heads":6,
      "num_key_value_heads":2,"rms_norm_eps":1e-5,"max_position_embeddings":256,
      "rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
      "high_freq_factor":4.0,"original_max_position_embeddings":64},"torch_dtype":"bfloat16"})"},
    {"qwen2", R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","vocab_size":97,
      "hidden_size":40,"intermediate_size":72,"num_hidden_layers":2,"num_attention_heads":5,
      "num_key_value_heads":1,"rms_norm_eps":1e-6,"max_position_embeddings":256,
      "rope_theta":10000.0,"tie_word_embeddings":true,"torch_dtype":"bfloat16"})"},
    {"deepseek_v2", R"({"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2",
      "vocab_size":101,"hidden_size":32,"intermediate_size":64,"moe_intermediate_size":24,
      "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"q_lora_rank":null,
      "kv_lora_rank":16,"qk_nope_head_dim":8,"qk_rope_head_dim":4,"v_head_dim":8,
      "n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":3,"first_k_dense_replace":1,
      "moe_layer_freq":1,"n_group":4,"topk_group":2,"topk_method":"group_limited_greedy",
      "scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":2.0,
      "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,
      "rope_scaling":{"type":"yarn","factor":4.0,"beta_fast":32,"beta_slow":1,"mscale":0.707,
      "mscale_all_dim":0.707,"original_max_position_embeddings":128},"torch_dtype":"bfloat16"})"},
    {"deepseek_v3", kTinyDeepseekV3Config},
    // One DeepSeek-V3 layer at its real widths (hidden 7168, 128 heads, q LoRA 1536, latent 512 +
    // rope 64, expert FFN 2048, top 8 in 8 groups of which 4, noaux_tc) with 16 experts instead of
    // 256 (0.9B parameters): the V3 shapes through the same kernels.
    {"deepseek_v3_real_widths",
     R"({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3",
      "vocab_size":89,"hidden_size":7168,"intermediate_size":18432,"moe_intermediate_size":2048,
      "num_hidden_layers":1,"num_attention_heads":128,"num_key_value_heads":128,"q_lora_rank":1536,
      "kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,
      "n_routed_experts":16,"n_shared_experts":1,"num_experts_per_tok":8,"first_k_dense_replace":0,
      "moe_layer_freq":1,"n_group":8,"topk_group":4,"topk_method":"noaux_tc",
      "scoring_func":"sigmoid","norm_topk_prob":true,"routed_scaling_factor":2.5,
      "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,
      "torch_dtype":"bfloat16"})"},
};

// A synthetic bf16 model of `config` (seed) on the shared Vulkan backend and on the CPU backend,
// each with a KV cache of 2 slots x capacity; Step runs a batch on both and compares the logits.
// (Another Vulkan backend where given: one with other knobs.)
struct VulkanAndCpu {
  std::shared_ptr<Model> model;
  std::unique_ptr<Backend> cpu = CreateCpuBackend(BackendOptions{});
  std::unique_ptr<KvStorage> kv_gpu, kv_cpu;
  Backend* gpu;
  VulkanAndCpu(const char* config, uint64_t seed, int64_t capacity, Backend* vulkan = nullptr)
      : gpu(vulkan ? vulkan : &SharedVulkan()) {
    const std::string path = TempDir() + "/config.json";
    WriteFile(path, config);
    LoadOptions lo;
    lo.seed = seed;
    lo.synthetic_dtype = DType::kBF16;
    model = Model::Synthetic(path, lo);
    const KvSpec spec = model->config().MakeKvSpec(DType::kF32);
    kv_gpu = gpu->CreateKv(spec, 2, capacity);
    kv_cpu = cpu->CreateKv(spec, 2, capacity);
  }
  int vocab() const { return int(model->config().vocab_size); }
  void Step(Batch& b, double tol, const std::string& what) {
    b.Finalize();
    const Graph g = model->arch().Build(b);
    const Node& o = g.node(g.output());
    std::vector<float> a(size_t(o.shape[0] * o.shape[1])), c(a.size());
    gpu->Compute(g, b, *kv_gpu, a.data());
    cpu->Compute(g, b, *kv_cpu, c.data());
    ExpectClose(a, c, tol, what);
  }
  // A prefill of two sequences (5 rows with all logits, 3 rows) then `decodes` steps of one row
  // of each, every step against the CPU backend.
  void PrefillThenDecode(int decodes, double tol, const std::string& what) {
    const int v = vocab();
    Batch prefill;
    prefill.Add(0, 0, {1, 5, 9, 2, v - 1}, true);
    prefill.Add(1, 0, {3, 4, 8});
    Step(prefill, tol, what + " prefill");
    for (int i = 0; i < decodes; ++i) {
      Batch d;
      d.Add(0, 5 + i, {(7 * i + 3) % v});
      d.Add(1, 3 + i, {(11 * i + 6) % v});
      Step(d, tol, what + " decode " + std::to_string(i));
    }
  }
};

class VulkanModel : public VulkanTest, public ::testing::WithParamInterface<ArchCase> {};

// The last recorded program runs every dispatch as early as the data flow allows
// (command.h OrderByLevel): each one past the first barrier step waits for a dispatch of the step
// just before it. In the graph's order, MoE's router and routing each took a step of their own
// after the shared experts' GEMVs, whose input they share.
void ExpectEachDispatchAsEarlyAsItCan(const std::string& what) {
  const auto& vkb = SharedVulkan();
  const std::vector<vk::Dispatch>& ds = vkb.last_dispatches();
  const std::vector<int> steps = vkb.counters().steps;
  ASSERT_EQ(steps.size(), ds.size()) << what;
  for (size_t i = 0; i < ds.size(); ++i) {
    if (steps[i] == 0) continue;
    bool waits = false;
    for (size_t j = 0; j < ds.size() && !waits; ++j)
      waits = steps[j] == steps[i] - 1 && vk::DependsOn(ds[i], ds[j]);
    EXPECT_TRUE(waits) << what << ": dispatch " << i << " (" << ds[i].pipe->name << ", step "
                       << steps[i] << ") waits for nothing of the step before it";
  }
}

TEST_P(VulkanModel, LogitsMatchCpuBackendThroughPrefillAndDecode) {
  const ArchCase& ac = GetParam();
  // Seed 7 routes V3-real-widths' decode step 1, row 0, to every expert of its 4 kept groups (8
  // of 8), one of them with score + bias = 0.4131 - 0.4171 = -0.0040: noaux_tc masks the other
  // groups with -inf, so it is still chosen. moe_route.comp masked with 0.0 and took a masked
  // expert instead (0.24 relative L2 in the logits; the two backends' router inputs agreed to
  // 4e-6 of 4.4, no tie). VulkanMoe's noaux_tc_negative_kept_choices keeps that case.
  VulkanAndCpu run(ac.config, 7, 32);
  auto& vkb = SharedVulkan();
  for (const Tensor* w : run.model->weights()) vkb.PrepareWeight(*w);
  const auto before = vkb.counters();
  run.PrefillThenDecode(3, 1e-4, ac.name);
  ExpectEachDispatchAsEarlyAsItCan(std::string(ac.name) + " decode");
  // Two shapes (prefill, decode): two programs; the decode command buffer was re-submitted.
  const auto after = vkb.counters();
  EXPECT_EQ(after.programs_built - before.programs_built, 2);
  EXPECT_EQ(after.submits - before.submits, 4);
  EXPECT_LT(after.barriers, after.dispatches) << "independent dispatches should share barriers";
}

// The float GEMVs with 4 outputs an invocation group (rows of at least 2,048: ops/matmul.cpp
// GemvSpecFor, matmul_gemv.comp AccumVecRows) in a bf16 DeepSeek-V2 2,048 wide: the dense
// GEMVs reading the hidden state (q, kv_a, lm_head: 301 outputs, a partial last workgroup), the
// dual gate/up GEMVs (the dense first layer's and the shared expert's) and the float experts' up
// GEMV (2 outputs a group there: MoeGemvFor); a prefill, then decode steps of two rows (two batch
// rows a workgroup), against the CPU backend.
TEST_F(VulkanTest, LongFloatRowsTakeFourOutputsAGroupInAModel) {
  const char* config = R"({"architectures":["DeepseekV2ForCausalLM"],"model_type":"deepseek_v2",
      "vocab_size":301,"hidden_size":2048,"intermediate_size":264,"moe_intermediate_size":264,
      "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":2,"q_lora_rank":null,
      "kv_lora_rank":32,"qk_nope_head_dim":16,"qk_rope_head_dim":8,"v_head_dim":16,
      "n_routed_experts":8,"n_shared_experts":1,"num_experts_per_tok":3,"first_k_dense_replace":1,
      "moe_layer_freq":1,"n_group":1,"topk_group":1,"topk_method":"greedy",
      "scoring_func":"softmax","norm_topk_prob":false,"routed_scaling_factor":1.0,
      "rms_norm_eps":1e-6,"max_position_embeddings":512,"rope_theta":10000.0,
      "torch_dtype":"bfloat16"})";
  VulkanAndCpu run(config, 11, 64);
  run.PrefillThenDecode(2, 1e-4, "long rows");
}

// A decode step of DeepSeek-V2 and V3 (two rows; V2 softmax group-limited, V3 sigmoid noaux_tc
// with the correction bias) routes in the router GEMV (ops/moe.cpp RouteInRouterGemv): one
// dispatch and one barrier step less a MoE layer than with moe_route apart
// (ES_VK_MOE_ROUTE_FUSE=0), the same logits as the CPU backend either way. The tiny models only:
// deepseek_v3_real_widths routes fused in Archs/VulkanModel (the default), and its two runs here
// took 54 of this test's 65 s on lavapipe.
TEST_F(VulkanTest, MoeDecodeRoutesInTheRouterGemv) {
  for (const ArchCase& ac : kCases) {
    const std::string name = ac.name;
    if (name.rfind("deepseek", 0) != 0 || name.find("real_widths") != std::string::npos) continue;
    // Per setting (apart, fused), of the decode program: dispatches, barrier steps, moe_route
    // dispatches, routing router GEMVs.
    int n[2][4] = {};
    for (int fused = 0; fused < 2; ++fused) {
      vk::VulkanTuning t;
      t.knobs.Set(vk::Knob::kMoeRouteFuse, fused ? "1" : "0");
      auto be = MakeVulkan(t);
      VulkanAndCpu run(ac.config, 7, 32, be.get());
      run.PrefillThenDecode(1, 1e-4, name + (fused ? " fused" : " apart"));
      n[fused][0] = be->counters().dispatches;
      n[fused][1] = be->counters().barriers;
      for (const std::string& s : be->counters().shaders) {
        n[fused][2] += s.rfind("moe_route", 0) == 0;
        n[fused][3] += s.find("_vec_route") != std::string::npos;
      }
    }
    const int moe_layers = n[0][2];
    EXPECT_GE(moe_layers, 1) << name;
    EXPECT_EQ(n[0][3], 0) << name;
    EXPECT_EQ(n[1][2], 0) << name;
    EXPECT_EQ(n[1][3], moe_layers) << name;
    EXPECT_EQ(n[0][0] - n[1][0], moe_layers) << name << ": dispatches";
    EXPECT_EQ(n[0][1] - n[1][1], moe_layers) << name << ": barrier steps";
    std::printf("%s decode: %d dispatches / %d barrier steps apart, %d / %d fused\n", name.c_str(),
                n[0][0], n[0][1], n[1][0], n[1][1]);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, VulkanModel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The tiny DeepSeek-V2 and V3 through MLA's non-absorbed form (steps of at least
// kMlaNonAbsorbedMinRows rows: kv_b from the model, the roped q, YaRN's scale): a prefill of two
// sequences (150 + 60 rows), a chunk of 200 rows continuing the first, then a decode step of
// both (the absorbed form over the cache the prefills wrote), against the CPU backend.
TEST_F(VulkanTest, DeepseekMlaNonAbsorbedPrefillMatchesCpuBackend) {
  for (const ArchCase& ac : {kCases[2], kCases[3]}) {
    VulkanAndCpu run(ac.config, 9, 512);
    const int vocab = run.vocab();
    auto& vkb = SharedVulkan();
    auto step = [&](Batch& b, const std::string& what, bool non_absorbed) {
      run.Step(b, vkb.device().f16_math() ? 5e-3 : 1e-4, std::string(ac.name) + " " + what);
      bool gathered = false;
      for (const std::string& n : vkb.counters().shaders)
        gathered |= n.rfind("mla_gather_", 0) == 0;
      EXPECT_EQ(gathered, non_absorbed) << ac.name << " " << what;
    };
    Batch a;
    a.Add(0, 0, TestTokens(150, 1, vocab), true);
    a.Add(1, 0, TestTokens(60, 2, vocab), true);
    step(a, "prefill", true);
    Batch b;
    b.Add(0, 150, TestTokens(200, 3, vocab), true);
    step(b, "continued prefill", true);
    Batch d;
    d.Add(0, 350, {3});
    d.Add(1, 60, {5});
    step(d, "decode", false);
  }
}

}  // namespace
}  // namespace es::test
