// The CPU backend's --profile (BackendOptions::profile): a DeepSeek-V2 golden model (MLA + MoE)
// run with profiling prints, when the backend goes away, one table per phase (decode steps and
// prefill) with a line per op family — the layers merged — and the bytes it read; the logits are
// bit-identical to a run without profiling, and without it nothing is printed.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/quality.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

// Logits of a 12-token prompt (prefill) and one more token (a decode step); stderr of the whole
// run, the backend's destruction included, in *err.
std::vector<float> Logits(bool profile, std::string* err) {
  auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/dsv2_lite");
  BackendOptions bo;
  bo.threads = 2;
  bo.profile = profile;
  testing::internal::CaptureStderr();
  std::vector<float> out;
  {
    Runner r(m, CreateBackend("cpu", bo), {});
    const std::vector<int32_t> toks = RandomTokens(12, m->vocab_size(), 5);
    out = SequenceLogits(r, toks, 12);
    const std::vector<float> dec = SequenceLogits(r, {toks[0]}, 1);
    out.insert(out.end(), dec.begin(), dec.end());
  }
  *err = testing::internal::GetCapturedStderr();
  return out;
}

TEST(CpuProfile, PrintsOpFamiliesPerPhaseAndKeepsTheResults) {
  std::string on_err, off_err;
  const std::vector<float> on = Logits(true, &on_err), off = Logits(false, &off_err);
  ASSERT_EQ(on.size(), off.size());
  EXPECT_EQ(0, std::memcmp(on.data(), off.data(), on.size() * sizeof(float)));
  EXPECT_EQ(off_err.find("cpu profile"), std::string::npos) << off_err;
  EXPECT_NE(on_err.find("cpu profile, decode (1 row per sequence): 1 steps"), std::string::npos)
      << on_err;
  EXPECT_NE(on_err.find("cpu profile, prefill and mixed steps: 1 steps (12 rows)"),
            std::string::npos)
      << on_err;
  // One line for every layer's experts and MLA (the layer index merged), with bytes read; the
  // experts with the residual add the default fusion plan folds into them (cpu/fusion_caps.h).
  EXPECT_NE(on_err.find("model.layers.*.mlp.experts (moe+add)"), std::string::npos) << on_err;
  EXPECT_NE(on_err.find("model.layers.*.self_attn.mla (mla_attention)"), std::string::npos)
      << on_err;
  EXPECT_EQ(on_err.find("model.layers.1."), std::string::npos) << on_err;
}

}  // namespace
}  // namespace es
