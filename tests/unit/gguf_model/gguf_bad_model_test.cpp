// Bad GGUF models: each fault is one es::Error line naming the file and the key or tensor at
// fault (shapes given as found and as expected); an unsupported tokenizer only matters when a
// tokenizer is needed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/runtime/model.h"
#include "gguf_model_util.h"
#include "test_util.h"

namespace es {
namespace {

std::string Golden(const std::string& v) {
  return test::SourceDir() + "/tests/golden/data/models/" + v;
}

// Loads the GGUF written from `variant` with `o`; returns the error message ("" if it loaded).
std::string LoadError(const std::string& variant, const test::HfToGgufOptions& o) {
  const std::string path = test::TempDir() + "/bad.gguf";
  test::WriteHfAsGguf(Golden(variant), path, o);
  try {
    Model::Load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void ExpectOneLine(const std::string& msg, const std::vector<std::string>& parts) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(GgufBadModel, ShapeDisagreesWithMetadata) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("qwen2.feed_forward_length", GgufValue::U32(300)); };
  ExpectOneLine(LoadError("qwen2_tied", o),
                {"tensor blk.0.ffn_gate.weight", "has shape [224, 128]", "expected [300, 128]"});
}

TEST(GgufBadModel, StackedExpertsDisagreeWithMetadata) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("deepseek2.expert_feed_forward_length", GgufValue::U32(40)); };
  ExpectOneLine(LoadError("dsv2_lite", o), {"tensor blk.1.ffn_gate_exps.weight",
                                            "has shape [8, 48, 128]", "expected [8, 40, 128]"});
}

TEST(GgufBadModel, MissingTensor) {
  test::HfToGgufOptions o;
  o.skip_tensor = "blk.1.attn_v.weight";
  ExpectOneLine(LoadError("llama3_f32", o), {"missing tensor blk.1.attn_v.weight"});
  o.skip_tensor = "blk.0.attn_kv_b.weight";
  ExpectOneLine(LoadError("dsv2_lite", o), {"missing tensor blk.0.attn_kv_b.weight", "attn_k_b"});
}

TEST(GgufBadModel, UnknownArchitecture) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("general.architecture", GgufValue::Str("gpt2")); };
  ExpectOneLine(LoadError("qwen2_tied", o),
                {"unknown architecture 'gpt2'", "general.architecture"});
}

TEST(GgufBadModel, MissingRequiredKey) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Remove("qwen2.block_count"); };
  ExpectOneLine(LoadError("qwen2_tied", o), {"missing key qwen2.block_count"});
  o.edit = [](GgufWriter& w) { w.Remove("deepseek2.attention.kv_lora_rank"); };
  ExpectOneLine(LoadError("dsv2_lite", o), {"missing key deepseek2.attention.kv_lora_rank"});
  o.edit = [](GgufWriter& w) { w.Remove("general.architecture"); };
  ExpectOneLine(LoadError("qwen2_tied", o), {"missing key general.architecture"});
}

TEST(GgufBadModel, KeyOfTheWrongType) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("llama.attention.head_count", GgufValue::Str("four")); };
  ExpectOneLine(LoadError("llama3_f32", o), {"llama.attention.head_count", "string"});
}

// q-LoRA is decided from the key and the tensors: a key without tensors is an error.
TEST(GgufBadModel, QLoraKeyWithoutTensors) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("deepseek2.attention.q_lora_rank", GgufValue::U32(32)); };
  ExpectOneLine(LoadError("dsv2_lite", o),
                {"deepseek2.attention.q_lora_rank is 32", "blk.0.attn_q_a.weight is missing"});
}

// An unsupported tokenizer: logits on ids still work; the reason is kept for run/chat.
TEST(GgufBadModel, UnknownTokenizerModelOnlyMattersForText) {
  const std::string path = test::TempDir() + "/tok.gguf";
  test::HfToGgufOptions o;
  o.tokenizer_dir = test::SourceDir() + "/tests/data/tiny_tokenizer";
  o.edit = [](GgufWriter& w) { w.Set("tokenizer.ggml.model", GgufValue::Str("llama")); };
  test::WriteHfAsGguf(Golden("qwen2_tied"), path, o);
  const auto m = Model::Load(path);
  EXPECT_EQ(m->tokenizer(), nullptr);
  EXPECT_NE(
      m->tokenizer_error().find("tokenizer model 'llama' (tokenizer.ggml.model) is not supported"),
      std::string::npos)
      << m->tokenizer_error();
  EXPECT_EQ(test::PrefillLogits(m, {1, 2, 3}).size(), size_t(3 * m->vocab_size()));
  // Same for an unknown pre-tokenizer name.
  o.edit = [](GgufWriter& w) { w.Set("tokenizer.ggml.pre", GgufValue::Str("chatglm-bpe")); };
  test::WriteHfAsGguf(Golden("qwen2_tied"), path, o);
  const auto m2 = Model::Load(path);
  EXPECT_EQ(m2->tokenizer(), nullptr);
  EXPECT_NE(m2->tokenizer_error().find("tokenizer.ggml.pre 'chatglm-bpe'"), std::string::npos);
  // And with the right one it is there.
  o.edit = nullptr;
  test::WriteHfAsGguf(Golden("qwen2_tied"), path, o);
  const auto m3 = Model::Load(path);
  ASSERT_NE(m3->tokenizer(), nullptr);
  EXPECT_TRUE(m3->tokenizer_error().empty());
}

// Garbage that used to load (issue 23): a NaN epsilon or a zero rope base gave NaN logits, and
// `generate` then emitted token 0 forever. Each is one error naming the key.
TEST(GgufBadModel, NonFiniteOrZeroHyperparameters) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) {
    w.Set("qwen2.attention.layer_norm_rms_epsilon", GgufValue::F32(std::nanf("")));
  };
  ExpectOneLine(LoadError("qwen2_tied", o),
                {"key qwen2.attention.layer_norm_rms_epsilon is nan", "positive finite"});
  o.edit = [](GgufWriter& w) { w.Set("qwen2.rope.freq_base", GgufValue::F32(0)); };
  ExpectOneLine(LoadError("qwen2_tied", o), {"key qwen2.rope.freq_base is 0", "positive finite"});
  o.edit = [](GgufWriter& w) { w.Set("llama.rope.freq_base", GgufValue::F32(-INFINITY)); };
  ExpectOneLine(LoadError("llama3_f32", o), {"key llama.rope.freq_base is -inf"});
  // Positive and finite but below 1: infinite rotary frequencies, NaN logits, exit 0
  // (tests/fuzz/corrupt_model_probe.py).
  o.edit = [](GgufWriter& w) { w.Set("qwen2.rope.freq_base", GgufValue::F32(1e-45f)); };
  ExpectOneLine(LoadError("qwen2_tied", o),
                {"key qwen2.rope.freq_base is 1.4013e-45 (a rope base must be at least 1)"});
  o.edit = [](GgufWriter& w) {
    w.Set("deepseek2.expert_weights_scale", GgufValue::F32(std::nanf("")));
  };
  ExpectOneLine(LoadError("dsv2_lite", o), {"key deepseek2.expert_weights_scale is nan"});
}

// Counts are bounded by the tensors in the file before anything proportional to them is built:
// block_count = 10^7 (a 4-byte edit) made `inspect` run 20 s and take 3 GB.
TEST(GgufBadModel, CountsBoundedByTheTensorsPresent) {
  test::HfToGgufOptions o;
  o.edit = [](GgufWriter& w) { w.Set("qwen2.block_count", GgufValue::U32(10000000)); };
  const auto t0 = std::chrono::steady_clock::now();
  ExpectOneLine(LoadError("qwen2_tied", o),
                {"key qwen2.block_count is 10000000", "tensors for 2 blocks"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  o.edit = [](GgufWriter& w) { w.Set("qwen2.block_count", GgufValue::U32(0xFFFFFFFFu)); };
  ExpectOneLine(LoadError("qwen2_tied", o), {"key qwen2.block_count is 4294967295"});
  o.edit = [](GgufWriter& w) { w.Set("deepseek2.expert_count", GgufValue::U32(10000000)); };
  ExpectOneLine(LoadError("dsv2_lite", o),
                {"key deepseek2.expert_count is 10000000", "ffn_gate_exps.weight has shape [8,"});
}

}  // namespace
}  // namespace es
