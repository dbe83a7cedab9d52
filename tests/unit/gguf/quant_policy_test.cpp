// Quantization policies: presets equal their config files, ChooseType's fixed rules (integers,
// 1-D tensors, fallback on row lengths), rule order, and parse errors that name the field.
#include "edgeseek/internal/formats/quant_policy.h"

#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"

namespace es {
namespace {

TEST(QuantPolicy, PresetsEqualConfigFiles) {
  for (const std::string& name : BuiltinQuantPolicyNames()) {
    const std::string path = test::SourceDir() + "/configs/quant/" + name + ".json";
    EXPECT_EQ(test::ReadFile(path), std::string(BuiltinQuantPolicyJson(name))) << path;
    EXPECT_TRUE(LoadQuantPolicy(path).SameAs(BuiltinQuantPolicy(name))) << name;
  }
  EXPECT_EQ(BuiltinQuantPolicyNames().size(), 4u);
}

TEST(QuantPolicy, Q4KMKeepsSensitiveTensorsHigher) {
  const QuantPolicy p = BuiltinQuantPolicy("q4_k_m");
  const DType src = DType::kBF16;
  EXPECT_EQ(ChooseType(p, "blk.3.attn_q.weight", {2048, 2048}, src), DType::kQ4_K);
  EXPECT_EQ(ChooseType(p, "blk.3.ffn_up.weight", {11008, 4096}, src), DType::kQ4_K);
  EXPECT_EQ(ChooseType(p, "blk.3.ffn_gate_exps.weight", {64, 1408, 2048}, src), DType::kQ4_K);
  EXPECT_EQ(ChooseType(p, "token_embd.weight", {151936, 1536}, src), DType::kQ6_K);
  EXPECT_EQ(ChooseType(p, "output.weight", {151936, 1536}, src), DType::kQ6_K);
  EXPECT_EQ(ChooseType(p, "blk.0.attn_v.weight", {256, 1536}, src), DType::kQ6_K);
  EXPECT_EQ(ChooseType(p, "blk.0.attn_kv_b.weight", {4096, 512}, src), DType::kQ6_K);
  EXPECT_EQ(ChooseType(p, "blk.0.attn_k_b.weight", {16, 512, 128}, src),
            DType::kQ8_0);  // 128-wide rows
  EXPECT_EQ(ChooseType(p, "blk.0.attn_v_b.weight", {16, 128, 512}, src), DType::kQ6_K);
  EXPECT_EQ(ChooseType(p, "blk.9.ffn_down_exps.weight", {64, 2048, 1408}, src),
            DType::kQ5_1);  // 1408 % 256 != 0
  EXPECT_EQ(ChooseType(p, "blk.9.ffn_down.weight", {2048, 10944}, src),
            DType::kQ5_1);  // V2-Lite dense FFN
  EXPECT_EQ(ChooseType(p, "blk.9.ffn_down.weight", {1536, 8960}, src),
            DType::kQ5_K);  // 8960 = 35 * 256
  EXPECT_EQ(ChooseType(p, "blk.9.ffn_down_shexp.weight", {2048, 2816}, src), DType::kQ5_K);
  EXPECT_EQ(ChooseType(p, "blk.1.ffn_gate_inp.weight", {64, 2048}, src), DType::kF32);
  EXPECT_EQ(ChooseType(p, "blk.1.attn_norm.weight", {2048}, src), DType::kF32);
  EXPECT_EQ(ChooseType(p, "blk.1.exp_probs_b.bias", {64}, src), DType::kF32);
  EXPECT_EQ(ChooseType(p, "blk.1.attn_q.bias", {2048}, DType::kF16), DType::kF32);
  // The attention regex is anchored: a name that merely contains the pattern does not match.
  EXPECT_EQ(ChooseType(p, "xblk.0.attn_v.weight", {256, 1536}, src), DType::kQ4_K);
}

TEST(QuantPolicy, FallbackOnRowLength) {
  const QuantPolicy p = BuiltinQuantPolicy("q4_k");
  EXPECT_EQ(ChooseType(p, "w", {8, 256}, DType::kF32), DType::kQ4_K);
  EXPECT_EQ(ChooseType(p, "w", {8, 96}, DType::kF32), DType::kQ5_0);  // 96 % 256 != 0
  EXPECT_EQ(ChooseType(p, "w", {8, 100}, DType::kF32), DType::kF16);  // 100 % 32 != 0
  EXPECT_EQ(ChooseType(BuiltinQuantPolicy("q6_k"), "w", {8, 64}, DType::kF32), DType::kQ8_0);
  EXPECT_EQ(ChooseType(BuiltinQuantPolicy("q5_k"), "w", {8, 64}, DType::kF32), DType::kQ5_1);
  EXPECT_EQ(ChooseType(BuiltinQuantPolicy("i4g"), "blk.0.ffn_up.weight", {8, 64}, DType::kF32),
            DType::kQ5_0);
  EXPECT_EQ(ChooseType(BuiltinQuantPolicy("i4g"), "blk.0.ffn_up.weight", {8, 384}, DType::kF32),
            DType::kI4G);
  EXPECT_EQ(ChooseType(BuiltinQuantPolicy("q8_0"), "w", {8, 31}, DType::kF32), DType::kF16);
  EXPECT_EQ(FallbackType(DType::kF16), DType::kF16);
}

TEST(QuantPolicy, IntegerTensorsAreNeverConverted) {
  const QuantPolicy p = BuiltinQuantPolicy("q4_0");
  EXPECT_EQ(ChooseType(p, "ids", {8, 64}, DType::kI32), DType::kI32);
  EXPECT_EQ(ChooseType(p, "ids", {8, 64}, DType::kI8), DType::kI8);
}

TEST(QuantPolicy, RulesInOrderGlobRegexAndSource) {
  const QuantPolicy p = ParseQuantPolicy(R"({
    "default": "q4_0",
    "rules": [
      {"match": "blk.1?.*", "type": "source"},
      {"regex": "blk\\.[0-9]+\\.ffn_.*", "type": "q8_0"},
      {"match": "blk.*", "type": "q5_1"}
    ]})",
                                         "test.json");
  EXPECT_EQ(p.name, "test.json");
  EXPECT_EQ(ChooseType(p, "blk.12.ffn_up.weight", {4, 64}, DType::kBF16),
            DType::kBF16);  // first rule: keep source
  EXPECT_EQ(ChooseType(p, "blk.2.ffn_up.weight", {4, 64}, DType::kBF16), DType::kQ8_0);
  EXPECT_EQ(ChooseType(p, "blk.2.attn_q.weight", {4, 64}, DType::kBF16), DType::kQ5_1);
  EXPECT_EQ(ChooseType(p, "output.weight", {4, 64}, DType::kBF16), DType::kQ4_0);
}

std::string ParseError(const std::string& json) {
  try {
    ParseQuantPolicy(json, "p.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(QuantPolicy, ParseErrorsNameTheField) {
  EXPECT_NE(ParseError("{").find("policy p.json: invalid JSON"), std::string::npos);
  EXPECT_EQ(ParseError("[]"), "policy p.json: expected a JSON object at the top level");
  EXPECT_EQ(ParseError(R"({"rules": []})"),
            "policy p.json: missing field 'default' (the type of tensors no rule matches)");
  EXPECT_NE(
      ParseError(R"({"default": "q9"})").find("policy p.json: default: unknown tensor type 'q9'"),
      std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q8_k"})").find("cannot be used for weights"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q4_0", "defualt": 1})").find("unknown field 'defualt'"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q4_0", "rules": [{"match": "a", "type": "q5"}]})")
                .find("policy p.json: rules[0].type: unknown tensor type 'q5'"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q4_0", "rules": [{"type": "q5_0"}]})")
                .find("rules[0]: needs exactly one"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q4_0", "rules": [{"regex": "(", "type": "q5_0"}]})")
                .find("rules[0]: invalid regex '('"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"default": "q4_0", "rules": [{"match": "a", "type": "q5_0", "x": 1}]})")
                .find("rules[0]: unknown field 'x'"),
            std::string::npos);
  EXPECT_NE(
      ParseError(R"({"default": "q4_0", "file_type": "7"})").find("file_type must be an integer"),
      std::string::npos);
  try {
    BuiltinQuantPolicy("q3_k_s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "unknown quantization type 'q3_k_s' (presets: q8_0, q4_0, q4_k_m, i4g"),
              std::string::npos);
  }
  EXPECT_THROW(LoadQuantPolicy("/nonexistent/p.json"), Error);
}

}  // namespace
}  // namespace es
