// The CLI verbs on GGUF files: logits, generate, inspect, bench and run take `-m FILE.gguf` and
// agree with the same checkpoint as a Hugging Face folder; an f16 GGUF runs on Vulkan too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "gguf_model_util.h"
#include "test_util.h"

namespace es {
namespace {

class GgufCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test as its own process, maybe in parallel.
    dir_ = new std::string(test::BinaryDir() + "/test_tmp/GgufCli_" + std::to_string(getpid()));
    std::filesystem::create_directories(*dir_);
    test::HfToGgufOptions o;
    o.tokenizer_dir = Tiny();
    test::WriteHfAsGguf(Hf(), *dir_ + "/m.gguf", o);
    QuantizeGguf(*dir_ + "/m.gguf", *dir_ + "/m_f16.gguf", BuiltinQuantPolicy("f16"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Hf() { return test::SourceDir() + "/tests/golden/data/models/qwen2_tied"; }
  static std::string Tiny() { return test::SourceDir() + "/tests/data/tiny_tokenizer"; }
  static std::string Gguf() { return *dir_ + "/m.gguf"; }
  static std::string Gguf16() { return *dir_ + "/m_f16.gguf"; }

  static std::vector<float> Logits(const std::string& model, const std::string& extra = "") {
    const std::string out = *dir_ + "/logits.f32";
    std::string err;
    const int rc = test::RunCommand(test::CliPath() + " logits -m " + model +
                                        " --ids 1,17,42,99,7,300 --out " + out + " " + extra,
                                    nullptr, &err);
    EXPECT_EQ(rc, 0) << err;
    const std::string s = test::ReadFile(out);
    std::vector<float> v(s.size() / 4);
    std::memcpy(v.data(), s.data(), v.size() * 4);
    return v;
  }
  static std::string Out(const std::string& args, int want_rc = 0) {
    std::string out, err;
    const int rc = test::RunCommand(test::CliPath() + " " + args, &out, &err);
    EXPECT_EQ(rc, want_rc) << args << "\n" << err;
    return want_rc == 0 ? out : err;
  }
  static std::string* dir_;
};
std::string* GgufCli::dir_ = nullptr;

TEST_F(GgufCli, LogitsMatchTheFolder) {
  const auto a = Logits(Gguf()), b = Logits(Hf());
  ASSERT_EQ(a.size(), 6u * 384u);
  EXPECT_LE(test::RelL2(a, b), 1e-5);
  const auto c = Logits(Gguf16());
  EXPECT_LE(test::RelL2(c, b), 2e-3);
}

TEST_F(GgufCli, GenerateMatchesTheFolder) {
  const std::string args = " --ids 1,17,42,99 -n 8 --temp 0";
  const std::string a = Out("generate -m " + Gguf() + args);
  EXPECT_EQ(a, Out("generate -m " + Hf() + args));
  EXPECT_GE(std::count(a.begin(), a.end(), ' '), 7) << a;
}

TEST_F(GgufCli, Inspect) {
  const std::string a = Out("inspect -m " + Gguf16());
  EXPECT_NE(a.find("Qwen2ForCausalLM (2 layers, hidden 128, vocab 384)"), std::string::npos) << a;
  EXPECT_NE(a.find("f16"), std::string::npos) << a;
  const std::string j = Out("inspect --json -m " + Gguf());
  EXPECT_NE(j.find("\"architecture\":\"Qwen2ForCausalLM\""), std::string::npos) << j;
}

TEST_F(GgufCli, Bench) {
  const std::string a = Out("bench -m " + Gguf16() + " -p 8 -n 4 -r 1 -t 2 --json");
  EXPECT_NE(a.find("{"), std::string::npos) << a;
}

// run chats with the GGUF alone (its vocabulary and chat template) and says the same as the
// folder with the tokenizer given separately.
TEST_F(GgufCli, RunUsesTheFileTokenizer) {
  const std::string args = " -p 'Hello there' -n 6 --temp 0";
  const std::string a = Out("run -m " + Gguf() + args);
  EXPECT_EQ(a, Out("run -m " + Hf() + " --tokenizer " + Tiny() + args));
}

TEST_F(GgufCli, RunWithAnUnsupportedTokenizerSaysWhy) {
  const std::string bad = *dir_ + "/bad_tok.gguf";
  test::HfToGgufOptions o;
  o.tokenizer_dir = Tiny();
  o.edit = [](GgufWriter& w) { w.Set("tokenizer.ggml.model", GgufValue::Str("llama")); };
  test::WriteHfAsGguf(Hf(), bad, o);
  const std::string err = Out("run -m " + bad + " -p hi -n 2", 1);
  EXPECT_NE(err.find("tokenizer model 'llama' (tokenizer.ggml.model) is not supported"),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // Token ids still work.
  Out("generate -m " + bad + " --ids 1,2 -n 2 --temp 0");
}

TEST_F(GgufCli, VulkanRunsAnF16Gguf) {
  if (!VulkanBackendBuilt()) {  // then the verb must say so on one line
    const std::string err =
        Out("logits -m " + Gguf16() + " --ids 1 --out /dev/null --backend vulkan", 1);
    EXPECT_NE(err.find("ulkan"), std::string::npos) << err;
    return;
  }
  const auto cpu = Logits(Gguf16());
  const auto vk = Logits(Gguf16(), "--backend vulkan");
  ASSERT_EQ(vk.size(), cpu.size());
  EXPECT_LE(test::RelL2(vk, cpu), 1e-3);
  const std::string args = " --ids 1,17,42,99 -n 6 --temp 0";
  EXPECT_EQ(Out("generate --backend vulkan -m " + Gguf16() + args),
            Out("generate -m " + Gguf16() + args));
  EXPECT_FALSE(
      Out("run --backend vulkan -m " + Gguf16() + " -p 'Hello there' -n 4 --temp 0").empty());
  // bench on Vulkan holds decode against the device's measured copy bandwidth.
  const std::string bench = Out("bench --backend vulkan -m " + Gguf16() + " -p 8 -n 2 -r 1");
  EXPECT_NE(bench.find("bandwidth  decode reads"), std::string::npos) << bench;
  // A dense q8_0 GGUF too (Vulkan reads Q8_0 in matmul and embedding).
  const std::string q8 = *dir_ + "/m_q8.gguf";
  QuantizeGguf(Gguf(), q8, BuiltinQuantPolicy("q8_0"));
  EXPECT_LE(test::RelL2(Logits(q8, "--backend vulkan"), Logits(q8)), 0.05);
}

}  // namespace
}  // namespace es
