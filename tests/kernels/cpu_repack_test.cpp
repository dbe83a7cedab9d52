// Tests of the weights repacked at load for the x86 column-lane kernels (backends/cpu/kernels/
// repack.h): PackedMatMul on repacked Q4_0 / Q8_0 weights is bit-identical to MatMul on the raw
// rows — over N not a multiple of 8 (the zero-padded last group), odd numbers of blocks, R = 1
// (GEMV), 3 and 17 (GEMM tiles and single rows), R past one task's 128 rows, bias on and off,
// 1 and 2 threads, without writing past N in a row of stride ldy > N; the repacked copy is the
// size of the raw rows (whole groups); and a whole model, quantized at load or mmapped from a GGUF
// file, gives the same logits with repacking on (ES_CPU_REPACK=1) and off (=0) through the CPU
// backend's PrepareWeight.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/repack.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/quality.h"
#include "edgeseek/internal/runtime/runner.h"
#include "matmul_case_util.h"
#include "test_util.h"

namespace es {
namespace {

class CpuRepack : public ::testing::TestWithParam<DType> {};

TEST_P(CpuRepack, BitIdenticalToRawKernels) {
  const DType type = GetParam();
  if (!cpu::RepackSupports(type))
    GTEST_SKIP() << Name(type) << " has no repacked layout on " << cpu::SimdTargetName();
  struct Shape {
    int64_t N, blocks;
  };
  // N: one partial group, whole groups, groups plus a tail, more than one 32-column task.
  const Shape shapes[] = {{5, 1}, {8, 3}, {13, 17}, {37, 2}, {70, 5}};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const Shape& s : shapes) {
      const int64_t N = s.N, K = s.blocks * 32, ldy = N + 3;
      const auto w = test::RandomWeights(type, N, K, uint64_t(N * 131 + K)).bytes;
      const cpu::PackedWeight pw = cpu::Repack(w.data(), type, N, K, pool);
      EXPECT_EQ(pw.bytes, size_t((N + 7) / 8 * 8) * RowBytes(type, K)) << "N=" << N;
      const auto bias = test::RandomFloats(size_t(N), 7);
      for (int64_t R : {1, 3, 17, 130}) {
        if (R == 130 && s.N != 13) continue;  // one shape past a task's 128 rows is enough
        const auto x = test::RandomFloats(size_t(R * K), uint64_t(R * 7 + K), 2.0f);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          // Sentinels past N in each row: neither path may write there.
          std::vector<float> raw(size_t(R * ldy), -7.0f), packed(size_t(R * ldy), -7.0f);
          cpu::MatMul(x.data(), R, K, w.data(), type, N, b, raw.data(), ldy, pool);
          cpu::PackedMatMul(x.data(), R, pw, b, packed.data(), ldy, pool);
          const std::string where = std::string(Name(type)) +
                                    " threads=" + std::to_string(threads) +
                                    " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                    " R=" + std::to_string(R) + (b ? " bias" : "");
          ASSERT_EQ(0, std::memcmp(raw.data(), packed.data(), raw.size() * sizeof(float))) << where;
          for (int64_t r = 0; r < R; ++r)
            for (int64_t n = N; n < ldy; ++n)
              ASSERT_EQ(packed[size_t(r * ldy + n)], -7.0f) << where;
          // And the outputs are real numbers (not a trivially equal pair of zeros).
          ASSERT_NE(packed[0], 0.0f) << where;
        }
      }
    }
  }
}

TEST_P(CpuRepack, BadShapesAreRejected) {
  const DType type = GetParam();
  if (!cpu::RepackSupports(type)) GTEST_SKIP();
  ThreadPool pool(1);
  const auto w = test::RandomWeights(type, 8, 64, 1).bytes;
  EXPECT_THROW(cpu::Repack(w.data(), type, 8, 48, pool), Error);  // K not whole blocks
  const cpu::PackedWeight pw = cpu::Repack(w.data(), type, 8, 64, pool);
  std::vector<float> x(64, 1.0f), y(8);
  EXPECT_THROW(cpu::PackedMatMul(x.data(), 1, pw, nullptr, y.data(), 7, pool), Error);  // ldy < N
}

INSTANTIATE_TEST_SUITE_P(Types, CpuRepack, ::testing::Values(DType::kQ4_0, DType::kQ8_0),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(CpuRepackTypes, UnsupportedTypesAreNotRepacked) {
  EXPECT_FALSE(cpu::RepackSupports(DType::kQ4_K));
  EXPECT_FALSE(cpu::RepackSupports(DType::kF32));
}

// The whole path through the backend: a golden Qwen2 checkpoint (biases, tied embeddings) with
// its matmul weights in `type`; logits over 40 tokens (prefill chunks of 16, so GEMM tiles and
// single rows) and one decode step (the GEMV) with repacking on and off, bit for bit.
std::vector<float> ModelLogits(std::shared_ptr<Model> m, const char* repack, bool expect_repacked) {
  if (repack)
    setenv("ES_CPU_REPACK", repack, 1);
  else
    unsetenv("ES_CPU_REPACK");
  BackendOptions bo;
  bo.threads = 2;
  Runner r(m, CreateBackend("cpu", bo), {});
  unsetenv("ES_CPU_REPACK");
  // The backend says what it repacked: make sure the "on" run really took the repacked path.
  const bool repacked = r.backend().description().find("repacked") != std::string::npos;
  EXPECT_EQ(repacked, expect_repacked && cpu::RepackSupports(DType::kQ4_0))
      << r.backend().description();
  const std::vector<int32_t> toks = RandomTokens(40, m->vocab_size(), 3);
  std::vector<float> out = SequenceLogits(r, toks, 16);
  const std::vector<int32_t> one(toks.begin(), toks.begin() + 1);
  const std::vector<float> dec = SequenceLogits(r, one, 1);  // R = 1: the GEMV
  out.insert(out.end(), dec.begin(), dec.end());
  return out;
}

const std::string kQwen2Tied = "/tests/golden/data/models/qwen2_tied";

// Weights quantized at load live in the model's memory: repacked only when asked for.
TEST(CpuRepackModel, LogitsAreTheSameWithRepackingOnAndOff) {
  for (const std::string type : {"q4_0", "q8_0"}) {
    auto m = Model::Load(test::SourceDir() + kQwen2Tied);
    QuantizeModelWeights(*m, BuiltinQuantPolicy(type), 2);
    const auto off = ModelLogits(m, "0", false), on = ModelLogits(m, "1", true);
    ASSERT_EQ(off.size(), on.size());
    EXPECT_EQ(0, std::memcmp(off.data(), on.data(), off.size() * sizeof(float))) << type;
    // The default never doubles the model's own memory; and the raw weights are intact after a
    // runner repacked them (the model's memory is never handed back).
    const auto dflt = ModelLogits(m, nullptr, false);
    EXPECT_EQ(0, std::memcmp(off.data(), dflt.data(), off.size() * sizeof(float))) << type;
  }
}

// A GGUF file (mmapped): the raw pages of repacked weights are handed back to the kernel, and
// the tied embedding's rows are read from the file again by the embedding lookup.
TEST(CpuRepackModel, GgufFileLogitsAreTheSameWithRawPagesReleased) {
  for (const std::string type : {"q4_0", "q8_0"}) {
    const std::string path = test::TempDir() + "/qwen2_tied_" + type + ".gguf";
    ConvertHfToGguf(test::SourceDir() + kQwen2Tied, path, BuiltinQuantPolicy(type));
    auto m = Model::Load(path);
    const auto off = ModelLogits(m, "0", false), on = ModelLogits(m, "1", true);
    ASSERT_EQ(off.size(), on.size());
    EXPECT_EQ(0, std::memcmp(off.data(), on.data(), off.size() * sizeof(float))) << type;
    // Once more without repacking, after the "on" runner handed the file's pages back.
    const auto again = ModelLogits(m, "0", false);
    EXPECT_EQ(0, std::memcmp(off.data(), again.data(), off.size() * sizeof(float))) << type;
  }
}

}  // namespace
}  // namespace es
