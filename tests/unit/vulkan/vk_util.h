// Helpers for the Vulkan backend tests: one shared backend per process (lavapipe is slow to
// start), validation on by default (ES_VK_VALIDATION=0 turns it off), a fixture that fails a test
// on any validation message, and small graph builders whose inputs enter through embeddings.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/instance.h"
#include "backends/vulkan/vulkan_backend.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/graph/graph.h"
#include "edgeseek/internal/runtime/model.h"

namespace es::test {

// The shared backend (default device, default tuning); throws es::Error without a driver.
vk::VulkanBackend& SharedVulkan();
std::unique_ptr<vk::VulkanBackend> MakeVulkan(const vk::VulkanTuning& t, bool profile = false);

// Knobs (backends/vulkan/tuning.h, by their ES_VK_* names) for one scope, set on structs, never
// on the environment: without a backend, on every backend MakeVulkan creates inside the scope
// (VulkanTuning::knobs); with one, on that backend (VulkanBackend::Retune: graph-build knobs
// only; its programs are dropped, so the next step records with them), restored at the end. A
// bad value or name throws es::Error from the constructor.
class ScopedKnobs {
 public:
  ScopedKnobs(const char* name, const std::string& value) : ScopedKnobs({{name, value}}) {}
  ScopedKnobs(std::initializer_list<std::pair<const char*, std::string>> knobs);
  ScopedKnobs(vk::VulkanBackend& be,
              std::initializer_list<std::pair<const char*, std::string>> knobs);
  ~ScopedKnobs();
  ScopedKnobs(const ScopedKnobs&) = delete;
  ScopedKnobs& operator=(const ScopedKnobs&) = delete;

 private:
  vk::VulkanBackend* be_ = nullptr;
  vk::Tuning saved_;
};

class VulkanTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  int messages_ = 0;
};

// A tensor of `dtype` filled with deterministic values in [-scale, scale) (rounded to the type).
Tensor RandomTensor(const std::string& name, DType dtype, Shape shape, uint64_t seed,
                    float scale = 1.0f);
// The tensor's values as f32 (after rounding to its type).
std::vector<float> Values(const Tensor& t);
// A batch of one sequence: tokens 0..T-1 at positions pos0.., slot 0, all rows' logits.
Batch RowsBatch(int T, int64_t pos0 = 0, int slot = 0);
// Adds an embedding of `table` (an input [T, cols] with row t = table[token t]).
int Input(Graph& g, const Tensor& table, int T);
// The FFN block of a decoder layer over inputs res and x0 ([T, D]): res + down(silu(gate(n)) *
// up(n)), n = RMSNorm(x0; norm, eps 1e-5); gate/up [I, D], down [D, I]. Returns the output node.
int AddFfnBlock(Graph& g, int res, int x0, const Tensor& norm, const Tensor& gate, const Tensor& up,
                const Tensor& down, int64_t T, int64_t D, int64_t I);
// Stores k ([T, Hkv*dk]) and v ([T, Hkv*dv]) into parts 0 and 1 of the cache's `layer`, then the
// causal GQA attention of q ([T, Hq*dk]) over them, scale 1/sqrt(dk); returns the attention node.
int AddCachedAttention(Graph& g, int q, int k, int v, int64_t T, int Hq, int Hkv, int dk, int dv,
                       int layer);
// A node of op `op` over `src`, output `shape`, at `layer`.
Node Make(Op op, const std::string& name, std::vector<int> src, Shape shape, int layer = -1);
// Runs `g` on `be` for `b` (a KV cache of its own unless `kv` is given); the output, NaN-filled
// first.
std::vector<float> RunGraph(Backend& be, const Graph& g, const Batch& b, KvStorage* kv = nullptr);
// A model of random bf16 weights (seed) from the text of a config.json (written to TempDir()).
std::shared_ptr<Model> SyntheticModel(const char* config_json, uint64_t seed);
// A tiny Llama (2 layers, 6 query heads over 2 kv heads of 8 dims, vocabulary 131).
extern const char* const kTinyLlamaConfig;
// A tiny DeepSeek-V2 (MLA: latent 16, rope 4, 4 heads; MoE: 8 routed experts of 24, top 3 over
// 4 groups, one shared, the first layer dense; vocabulary 101) and a tiny DeepSeek-V3 (q LoRA 24,
// noaux_tc sigmoid routing over 2 groups, top 2; vocabulary 89).
extern const char* const kTinyDeepseekV2Config;
extern const char* const kTinyDeepseekV3Config;
// A small Llama (hidden 128, 4 query heads over 2 kv heads of 32 dims, 2 layers, vocabulary 131)
// and a small DeepSeek-V2 (MLA: latent 64, rope 32, 4 heads; MoE: 8 routed experts of
// `moe_intermediate` top 3 over 4 groups, one shared; vocabulary 101), as config.json text.
extern const char* const kSmallLlamaConfig;
std::string SmallDeepseekV2Config(int moe_intermediate);
// n deterministic token ids below vocab, different per seed.
std::vector<int32_t> TestTokens(int n, int seed, int vocab);
// Max relative L2 error helper with a readable failure.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol,
                 const std::string& what);

}  // namespace es::test
