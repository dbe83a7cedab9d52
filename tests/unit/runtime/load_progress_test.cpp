// The waits of loading a real model show one progress line (core/progress.h) when an output is
// set: quantizing at load (QuantizeModelWeights) and preparing the weights for the backend
// (Runner: repack / prefault on the CPU, upload on a GPU), and dequantizing an FP8 checkpoint;
// erased when each ends. The golden Llama is a Hugging Face folder, loaded as `chat` /
// `generate` / `serve` load one.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

std::string LlamaDir() { return test::SourceDir() + "/tests/golden/data/models/llama3"; }

// Runs `fn` with progress lines going to a temporary file and no delay; returns what was drawn.
template <class Fn>
std::string Drawn(Fn&& fn) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  SetProgressOutput(f, 0.0);
  try {
    fn();
  } catch (...) {
    SetProgressOutput(nullptr);
    std::fclose(f);
    throw;
  }
  SetProgressOutput(nullptr);
  const std::string s = ReadAll(f);
  std::fclose(f);
  return s;
}

TEST(LoadProgress, QuantizingAtLoadAndPreparingWeightsDrawAndErase) {
  std::shared_ptr<Model> m;
  const std::string load = Drawn([&] {
    LoadOptions lo;
    lo.quantize = std::make_shared<QuantPolicy>(BuiltinQuantPolicy("q8_0"));
    m = Model::Load(LlamaDir(), lo);
  });
  EXPECT_EQ(load.find('\n'), std::string::npos) << load;  // one line, rewritten with \r
  EXPECT_NE(load.find("\rquantizing weights: "), std::string::npos) << load;
  EXPECT_NE(load.find("(100%)"), std::string::npos) << load;
  EXPECT_EQ(load.substr(load.size() - 4), "\r\033[K") << load;  // erased at the end

  const std::string prepare = Drawn([&] {
    Runner r(m, CreateBackend("cpu", {}), RunnerOptions{});
    EXPECT_GT(r.context(), 0);
  });
  EXPECT_EQ(prepare.find('\n'), std::string::npos) << prepare;
  EXPECT_NE(prepare.find("\rpreparing weights (cpu): "), std::string::npos) << prepare;
  EXPECT_NE(prepare.find("(100%)"), std::string::npos) << prepare;
  EXPECT_EQ(prepare.substr(prepare.size() - 4), "\r\033[K") << prepare;
}

// An FP8 checkpoint (V3's block-scaled E4M3) is dequantized as it loads: one line over its FP8
// bytes, erased at the end; a checkpoint without FP8 weights draws none.
TEST(LoadProgress, Fp8DequantizationDrawsAndErases) {
  const std::string fp8 = Drawn([&] {
    auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/dsv3_fp8");
    EXPECT_GT(m->vocab_size(), 0);
  });
  EXPECT_EQ(fp8.find('\n'), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("\rconverting FP8 weights: "), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("(100%)"), std::string::npos) << fp8;
  EXPECT_EQ(fp8.substr(fp8.size() - 4), "\r\033[K") << fp8;
  const std::string plain = Drawn([&] { Model::Load(LlamaDir()); });
  EXPECT_EQ(plain.find("FP8"), std::string::npos) << plain;
}

TEST(LoadProgress, SilentWithoutAnOutput) {
  SetProgressOutput(nullptr);
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  SetProgressOutput(f, 60.0);  // the load is shorter than the delay: nothing drawn
  { Runner r(Model::Load(LlamaDir()), CreateBackend("cpu", {}), RunnerOptions{}); }
  SetProgressOutput(nullptr);
  EXPECT_EQ(ReadAll(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace es
