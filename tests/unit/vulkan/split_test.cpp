// Layer and head split over Vulkan devices (runtime/pipeline.h, runtime/head_split.h): one device
// opened twice (--devices 0,0, how this is tested on lavapipe), and CPU + Vulkan in either order,
// against the plain CPU runner, for a dense and an MLA+MoE golden: prefill and decode logits
// within the goldens' bound (1e-4 relative L2 with f32 activations; 2e-3 where the device runs
// its prefill GEMMs in f16, golden_test.cpp; the caches are f32 here so that the bound is the
// math's alone), and greedy ids equal. A head split of an MoE model
// gives every device a range of the routed experts (Vulkan's routing kernel maps the choices
// outside its range to weight 0); a long prompt takes the grouped expert GEMMs, the steps of a
// few rows the expert GEMVs. The layer split runs the 70-row prompt as micro-batches, its stages
// on threads of their own at once (runtime/micro_batch.h); the head split in chunks, summed on
// the host while the devices compute the next (runtime/head_split.h).
#include <gtest/gtest.h>

#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/head_split.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/pipeline.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct SplitCase {
  const char* model;
  const char* devices;
  const char* split = "layer";
};

class VulkanSplit : public ::testing::TestWithParam<SplitCase> {};

std::vector<float> Logits(Runner& r, int slot, int64_t pos0, const std::vector<int32_t>& ids) {
  Batch b;
  b.Add(slot, pos0, ids, true);
  b.Finalize();
  std::vector<float> l;
  r.Forward(b, &l);
  return l;
}

// The goldens' bound for the Vulkan device's math: its description names "f16 math" where it
// runs prefill GEMMs in f16 (cooperative matrices: the H200's 70-row prompt came out 2.8e-4 to
// 4.0e-4 from the CPU's, against 1e-4).
double Bound() {
  static const double b =
      CreateBackend("vulkan", {})->description().find("f16 math") != std::string::npos ? 2e-3
                                                                                       : 1e-4;
  return b;
}

TEST_P(VulkanSplit, LogitsMatchTheCpuRunner) {
  const SplitCase& c = GetParam();
  auto m = Model::Load(SourceDir() + "/tests/golden/data/models/" + c.model);
  RunnerOptions ro;
  ro.n_slots = 2;
  ro.context = 96;
  ro.kv_dtype = DType::kF32;
  ro.micro_batch_rows = 16;  // the 70-row prompt: a layer split runs it as 4 micro-batches
  BackendOptions bo;
  bo.threads = 2;
  Runner plain(m, CreateBackend("cpu", bo), ro);
  SplitOptions so;
  so.devices = c.devices;
  so.split = c.split;
  auto split = MakeSplitRunner(m, "cpu", bo, ro, so);
  ASSERT_EQ(split->stages().size(), 1u);
  const bool moe = m->config().n_routed_experts > 0;
  if (std::string(c.split) == "head" && moe) {  // "heads 0-7, experts 0-3 on ... | heads 8-15, ..."
    const std::string d = split->stages()[0]->description();
    EXPECT_NE(d.find(", experts 0-"), std::string::npos) << d;
    EXPECT_NE(d.find(", experts " + std::to_string(m->config().n_routed_experts / 2) + "-"),
              std::string::npos)
        << d;
  }
  const std::vector<int32_t> ids = {1, 7, 3, 11, 5, 2, 9};
  EXPECT_LE(RelL2(Logits(*split, 0, 0, ids), Logits(plain, 0, 0, ids)), Bound());
  for (int t = 0; t < 3; ++t) {
    const std::vector<int32_t> step = {int32_t(4 + t)};
    const int64_t pos = int64_t(ids.size()) + t;
    EXPECT_LE(RelL2(Logits(*split, 0, pos, step), Logits(plain, 0, pos, step)), Bound())
        << "decode step " << t;
  }
  // A second sequence beside the first, then greedy ids.
  EXPECT_LE(RelL2(Logits(*split, 1, 0, {2, 8}), Logits(plain, 1, 0, {2, 8})), Bound());
  // A prompt past the expert GEMVs' rows (MoE: the grouped expert GEMMs).
  std::vector<int32_t> longer;
  for (int i = 0; i < 70; ++i) longer.push_back(int32_t(1 + (i * 5) % 13));
  EXPECT_LE(RelL2(Logits(*split, 1, 2, longer), Logits(plain, 1, 2, longer)), Bound()) << "70 rows";
  // The stages side by side on their threads over the 70 rows' parts (not a head split: its
  // last stage holds no layer); a head split runs them in two chunks of 35, the host summing
  // one while the devices compute the other.
  const bool head = std::string(c.split) == "head";
  EXPECT_EQ(split->micro_batched_forwards(), head ? 0 : 1);
  EXPECT_EQ(GetHeadSplitCounts(*split->stages()[0]).chunked_forwards, head ? 1 : 0);
  Batch g;
  g.Add(0, int64_t(ids.size()) + 3, {6});
  g.Add(1, 2, {3});
  g.Finalize();
  std::vector<int32_t> a, b;
  split->ForwardArgmax(g, &a);
  plain.ForwardArgmax(g, &b);
  EXPECT_EQ(a, b);
}

const SplitCase kCases[] = {{"llama3", "0,0"},
                            {"llama3", "cpu,0"},
                            {"llama3", "0,cpu"},
                            {"dsv2_lite", "0,0"},
                            {"dsv2_lite", "cpu,0"},
                            {"dsv2_lite", "0,cpu"},
                            {"llama3", "0,0", "head"},
                            {"llama3", "cpu,0", "head"},
                            {"dsv2_lite", "0,0", "head"},
                            {"dsv2_lite", "cpu,0", "head"}};

INSTANTIATE_TEST_SUITE_P(Goldens, VulkanSplit, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string d = info.param.devices;
  for (char& ch : d)
    if (ch == ',') ch = '_';
  return std::string(info.param.model) + "_" + d + "_" + info.param.split;
});

}  // namespace
}  // namespace es::test
