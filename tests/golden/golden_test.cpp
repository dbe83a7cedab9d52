// Golden tests: tiny random-weight checkpoints made by transformers 5.17 (scripts/golden/), run
// through edgeseek on every built backend. Checks: ‖ours − ref‖/‖ref‖ ≤ tolerance over all
// prefill positions; greedy continuation identical; incremental decode reproduces the one-shot
// prefill logits; several sequences in one batch give the same logits as separate runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ModelsDir() { return test::SourceDir() + "/tests/golden/data/models"; }

std::vector<std::string> Variants() {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(ModelsDir()))
    if (e.is_directory()) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<float> ReadF32(const std::string& path) {
  const std::string s = test::ReadFile(path);
  std::vector<float> v(s.size() / 4);
  std::memcpy(v.data(), s.data(), v.size() * 4);
  return v;
}

struct Param {
  std::string variant, backend;
};

class Golden : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const Param& p = GetParam();
    dir_ = ModelsDir() + "/" + p.variant;
    golden_ = json::parse(test::ReadFile(dir_ + "/golden.json"));
    model_ = Model::Load(dir_);
    BackendOptions bo;
    bo.threads = 2;
    RunnerOptions ro;
    ro.n_slots = 4;
    ro.context = 256;
    auto backend = CreateBackend(p.backend, bo);
    // The Vulkan backend runs prefill GEMMs in f16 by default where the device has cooperative
    // matrices (ES_VK_F16_ACT overrides); its description names the math mode.
    f16_math_ = backend->description().find("f16 math") != std::string::npos;
    runner_ = std::make_unique<Runner>(model_, std::move(backend), ro);
    kv_f16_ = runner_->kv_type() == DType::kF16;  // the default cache on a GPU
    ids_ = golden_["input_ids"].get<std::vector<int32_t>>();
    ref_ = ReadF32(dir_ + "/logits.f32");
    V_ = golden_["logits_shape"][1].get<int>();
  }
  // Issue 4's bounds: 1e-4 with f32 activations; 2e-3 when the backend runs its prefill GEMMs
  // in f16 (Vulkan on devices with cooperative matrices). With an f16 KV cache (the default on
  // Vulkan, issue 17) keys and values are rounded to f16 (a relative half-ulp of 2.4e-4 per
  // element): lavapipe measured up to 4.1e-4 over the goldens (dsv3_mtp), hence 1e-3.
  bool F16Math() const { return f16_math_; }
  double Tolerance() const { return F16Math() ? 2e-3 : kv_f16_ ? 1e-3 : 1e-4; }
  // A batch against separate runs: 1e-5 with f32 math and cache. With an f16 cache the two runs
  // take different kernels (prefill tiles, decode), and a value a few ulp apart on either side of
  // an f16 rounding boundary is stored one f16 ulp apart: up to 8.8e-5 measured, hence 2e-4.
  double BatchTolerance() const { return F16Math() ? Tolerance() : kv_f16_ ? 2e-4 : 1e-5; }
  bool f16_math_ = false;
  bool kv_f16_ = false;

  std::string dir_;
  json golden_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Runner> runner_;
  std::vector<int32_t> ids_;
  std::vector<float> ref_;
  int V_ = 0;
};

TEST_P(Golden, PrefillLogitsMatchTransformers) {
  ASSERT_EQ(model_->vocab_size(), V_);
  Batch b;
  b.Add(0, 0, ids_, true);
  b.Finalize();
  std::vector<float> logits;
  runner_->Forward(b, &logits);
  ASSERT_EQ(logits.size(), ref_.size());
  const double err = test::RelL2(logits, ref_);
  EXPECT_LE(err, Tolerance()) << GetParam().variant;
  // Per position too (a wrong cache/mask shows at later positions).
  for (size_t t = 0; t < ids_.size(); ++t) {
    std::vector<float> a(logits.begin() + long(t * V_), logits.begin() + long((t + 1) * V_));
    std::vector<float> r(ref_.begin() + long(t * V_), ref_.begin() + long((t + 1) * V_));
    EXPECT_LE(test::RelL2(a, r), 10 * Tolerance()) << "position " << t;
  }
}

TEST_P(Golden, GreedyContinuationMatches) {
  const auto expect = golden_["greedy_new_ids"].get<std::vector<int32_t>>();
  GenerateOptions go;
  go.max_new_tokens = int(expect.size());
  go.min_new_tokens = go.max_new_tokens;
  go.eos_ids = golden_["eos_token_ids_masked"].get<std::vector<int32_t>>();
  go.sampling.temperature = 0;
  const auto got = Generate(*runner_, runner_->AcquireSlot(), ids_, go);
  EXPECT_EQ(got, expect);
}

TEST_P(Golden, IncrementalDecodeReproducesPrefill) {
  // Prefill a prefix, then feed the remaining prompt tokens one at a time (and in a chunk of 3).
  const int T = int(ids_.size());
  const int split = T / 2;
  Batch b;
  b.Add(0, 0, std::vector<int32_t>(ids_.begin(), ids_.begin() + split));
  b.Finalize();
  std::vector<float> logits;
  runner_->Forward(b, &logits);
  for (int t = split; t < T; ++t) {
    Batch d;
    d.Add(0, t, {ids_[size_t(t)]});
    d.Finalize();
    runner_->Forward(d, &logits);
    std::vector<float> r(ref_.begin() + long(t) * V_, ref_.begin() + long(t + 1) * V_);
    EXPECT_LE(test::RelL2(logits, r), 10 * Tolerance()) << "position " << t;
  }
}

TEST_P(Golden, BatchOfSequencesEqualsSeparateRuns) {
  // Three prompts (and a decode step mixed with a prefill chunk) in one batch vs one at a time:
  // identical logits, bit for bit on the CPU (batch invariance).
  const int T = int(ids_.size());
  std::vector<std::vector<int32_t>> prompts = {
      std::vector<int32_t>(ids_.begin(), ids_.end()),
      std::vector<int32_t>(ids_.begin() + 1, ids_.begin() + std::max(2, T / 2)),
      std::vector<int32_t>(ids_.rbegin(), ids_.rbegin() + std::min(T, 5))};
  std::vector<std::vector<float>> separate;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Batch b;
    b.Add(int(i), 0, prompts[i], true);
    b.Finalize();
    std::vector<float> l;
    runner_->Forward(b, &l);
    separate.push_back(l);
  }
  Batch all;
  for (size_t i = 0; i < prompts.size(); ++i) all.Add(int(i), 0, prompts[i], true);
  all.Finalize();
  std::vector<float> l;
  runner_->Forward(all, &l);
  size_t off = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<float> got(l.begin() + long(off), l.begin() + long(off + separate[i].size()));
    off += separate[i].size();
    if (GetParam().backend == "cpu")
      EXPECT_EQ(got, separate[i]) << "sequence " << i << " differs inside a batch";
    else
      EXPECT_LE(test::RelL2(got, separate[i]), BatchTolerance()) << "sequence " << i;
  }
  // Mixed step: slot 0 decodes one more token while slot 3 prefills a fresh prompt.
  Batch mixed;
  mixed.Add(0, T, {ids_[0]});
  mixed.Add(3, 0, prompts[1], true);
  mixed.Finalize();
  std::vector<float> ml;
  runner_->Forward(mixed, &ml);
  const std::vector<float> tail(ml.begin() + V_, ml.end());
  if (GetParam().backend == "cpu") {
    EXPECT_EQ(tail, separate[1]);
  }
}

std::vector<Param> Params() {
  std::vector<Param> out;
  std::vector<std::string> backends = {"cpu"};
  if (const char* b = std::getenv("ES_GOLDEN_BACKENDS")) {
    backends.clear();
    std::string s = b;
    size_t i = 0;
    while (i <= s.size()) {
      size_t j = s.find(',', i);
      if (j == std::string::npos) j = s.size();
      if (j > i) backends.push_back(s.substr(i, j - i));
      i = j + 1;
    }
  } else if (VulkanBackendBuilt()) {
    backends.push_back("vulkan");
  }
  for (const auto& v : Variants())
    for (const auto& b : backends) out.push_back({v, b});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, Golden, ::testing::ValuesIn(Params()), [](const auto& info) {
  return info.param.variant + "_" + info.param.backend;
});

}  // namespace
}  // namespace es
