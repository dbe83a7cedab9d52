// ONNX goldens: onnxruntime's logits for ONNX files exported from the golden checkpoints on the
// GPU machine (scripts/gpu/onnx_goldens.py: torch.onnx TorchScript and dynamo exports with past
// KV, ORT-GenAI builder-style graphs, MatMulNBits int4 variants), compared with edgeseek's
// logits of the same files: one prefill of the golden input ids (every row) and one decode step
// of next_id, within each case's tolerance (1e-4 f32, 1e-3 int4) relative to the logits' scale;
// for the f32 files also the greedy continuation of the source checkpoint's golden.json.
// Skipped while tests/golden/data/onnx/ holds no cases. The int4 cases (onnxruntime's quantizer
// on f32 models: f32 scales) must also stay 4-bit: every projection an I4F weight, none F32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Cases() {
  std::vector<std::string> out;
  const fs::path root = fs::path(test::SourceDir()) / "tests/golden/data/onnx";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root, ec))
    if (e.path().filename() == "reference.json") out.push_back(e.path().parent_path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> ReadF32(const std::string& path) {
  const std::string s = test::ReadFile(path);
  std::vector<float> v(s.size() / 4);
  std::memcpy(v.data(), s.data(), v.size() * 4);
  return v;
}

void Compare(const std::vector<float>& got, const std::vector<float>& want, double tol,
             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[i])));
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
  }
  EXPECT_LE(diff, tol * scale) << what << ": max |edgeseek - onnxruntime| = " << diff;
  std::printf("%s: max |edgeseek - onnxruntime| = %.3g (allowed %.3g)\n", what.c_str(), diff,
              tol * scale);
}

bool IsInt4(const std::string& dir) {
  return dir.size() > 5 && dir.compare(dir.size() - 5, 5, "_int4") == 0;
}

// The greedy continuation of the f32 files equals the source checkpoint's (golden.json of
// tests/golden/data/models/<model>: transformers' greedy ids of the same prompt, eos masked).
// The int4 files' weights are not the checkpoint's: their logits are checked, not this.
void ExpectSourceGreedy(Runner& r, const nlohmann::json& ref, const std::string& dir,
                        const std::string& backend) {
  const std::string src = test::SourceDir() + "/tests/golden/data/models/" +
                          ref["model"].get<std::string>() + "/golden.json";
  ASSERT_TRUE(fs::exists(src)) << src;
  const nlohmann::json golden = nlohmann::json::parse(test::ReadFile(src));
  ASSERT_EQ(golden["input_ids"], ref["input_ids"]) << src << ": another prompt than " << dir;
  const auto expect = golden["greedy_new_ids"].get<std::vector<int32_t>>();
  GenerateOptions go;
  go.max_new_tokens = int(expect.size());
  go.min_new_tokens = go.max_new_tokens;
  go.eos_ids = golden["eos_token_ids_masked"].get<std::vector<int32_t>>();
  go.sampling.temperature = 0;
  const int slot = r.AcquireSlot();
  EXPECT_EQ(Generate(r, slot, ref["input_ids"].get<std::vector<int32_t>>(), go), expect)
      << backend << " " << dir << ": greedy continuation";
  r.ReleaseSlot(slot);
}

// Every case on `backend`, with an f32 KV cache (a GPU's default f16 cache alone is ~3e-4 of the
// logits' scale off, above the f32 tolerance), at each file's tolerance or `min_tol` if larger
// (`math` names the mode in the messages).
void RunCases(const std::vector<std::string>& cases, const std::string& backend, double min_tol = 0,
              const std::string& math = "") {
  for (const std::string& dir : cases) {
    SCOPED_TRACE(dir);
    const nlohmann::json ref = nlohmann::json::parse(test::ReadFile(dir + "/reference.json"));
    std::shared_ptr<Model> m;
    try {
      m = Model::Load(dir);
    } catch (const std::exception& e) {
      ADD_FAILURE() << dir << ": import failed: " << e.what();
      continue;
    }
    if (IsInt4(dir)) {
      int i4f = 0;
      for (const Tensor* t : m->weights()) {
        if (t->name.find("_proj.weight") == std::string::npos) continue;
        EXPECT_NE(t->dtype, DType::kF32) << dir << ": " << t->name << " was dequantized";
        i4f += t->dtype == DType::kI4F;
      }
      EXPECT_GT(i4f, 0) << dir << ": no I4F weights";
    }
    const std::vector<int32_t> ids = ref["input_ids"].get<std::vector<int32_t>>();
    const double tol = std::max(ref["tolerance"].get<double>(), min_tol);
    BackendOptions bo;
    bo.threads = 2;
    RunnerOptions ro;
    ro.context = 256;
    ro.kv_dtype = DType::kF32;
    Runner r(m, CreateBackend(backend, bo), ro);
    Batch b;
    b.Add(0, 0, ids, true);
    b.Finalize();
    std::vector<float> prefill, step;
    r.Forward(b, &prefill);
    const std::string what = backend + math + " " + dir;
    Compare(prefill, ReadF32(dir + "/logits_prefill.f32"), tol, what + " prefill");
    Batch d;
    d.Add(0, int64_t(ids.size()), {ref["next_id"].get<int32_t>()}, true);
    d.Finalize();
    r.Forward(d, &step);
    Compare(step, ReadF32(dir + "/logits_step.f32"), tol, what + " decode step");
    if (!IsInt4(dir)) ExpectSourceGreedy(r, ref, dir, backend + math);
  }
}

TEST(OnnxGolden, LogitsMatchOnnxruntime) {
  const std::vector<std::string> cases = Cases();
  if (cases.empty())
    GTEST_SKIP() << "no ONNX goldens under tests/golden/data/onnx (scripts/gpu/onnx_goldens.py)";
  RunCases(cases, "cpu");
}

// The same files and tolerances on the Vulkan backend (lavapipe in CI) where it runs f32 math. A
// device with cooperative matrices runs prefill GEMMs in f16 by default (ES_VK_F16_ACT): then the
// f32 files come within golden_test.cpp's f16-math 2e-3 of the logits' scale, not 1e-4 (H100:
// llama3_f32 prefill 1.0e-3, decode step 2.1e-4); `ES_VK_F16_ACT=0 es_test_golden` checks the
// files' own tolerances there (H100, session 34: every file within 8.6e-6 of the scale).
TEST(OnnxGolden, LogitsMatchOnnxruntimeOnVulkan) {
  const std::vector<std::string> cases = Cases();
  if (cases.empty())
    GTEST_SKIP() << "no ONNX goldens under tests/golden/data/onnx (scripts/gpu/onnx_goldens.py)";
  if (!VulkanBackendBuilt()) GTEST_SKIP() << "built without the Vulkan backend";
  std::string description;
  try {
    description = CreateBackend("vulkan", {})->description();
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  if (description.find("f16 math") != std::string::npos)
    RunCases(cases, "vulkan", 2e-3, " (f16 math)");
  else
    RunCases(cases, "vulkan");
}

}  // namespace
}  // namespace es
