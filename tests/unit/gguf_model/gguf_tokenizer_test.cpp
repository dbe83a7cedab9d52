// Tokenizers from GGUF metadata: the vocabularies of the real tokenizer.json files in
// .cache/tokenizers (Qwen3 -> pre "qwen2", Llama 3.1 -> "llama-bpe", DeepSeek-V3 -> "deepseek-v3")
// written as tokenizer.ggml.* must encode and decode the tokenizer goldens exactly as the
// tokenizer.json path does (tests/golden/tokenizer/*.jsonl, made by `tokenizers`).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "gguf_model_util.h"
#include "runtime/gguf_model.h"
#include "test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TokCase {
  std::string name, pre;
};
void PrintTo(const TokCase& c, std::ostream* os) { *os << c.name << " (pre " << c.pre << ")"; }

class GgufTokenizerGolden : public ::testing::TestWithParam<TokCase> {};

TEST_P(GgufTokenizerGolden, SameIdsAsTokenizerJson) {
  const TokCase& p = GetParam();
  const std::string dir = test::SourceDir() + "/.cache/tokenizers/" + p.name;
  ASSERT_TRUE(fs::exists(dir + "/tokenizer.json"))
      << dir << " missing: run scripts/fetch_test_data.sh";
  const std::string path = test::TempDir() + "/vocab.gguf";
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str("qwen2"));
  test::SetGgufVocab(w, dir, p.pre);
  w.WriteFile(path);
  const auto f = GgufFile::Open(path);
  std::string why;
  const auto tok = GgufTokenizer(*f, &why);
  ASSERT_TRUE(tok) << why;
  const json meta =
      json::parse(test::ReadFile(test::SourceDir() + "/tests/golden/tokenizer/meta.json"));
  const json& m = meta["tokenizers"][p.name];
  EXPECT_EQ(tok->vocab_size(), m["vocab_size_with_added"].get<int>());
  if (!m["bos_id"].is_null()) {
    EXPECT_EQ(tok->bos_id(), m["bos_id"].get<int>());
  }
  EXPECT_EQ(tok->eos_id(), m["eos_id"].get<int>());
  EXPECT_FALSE(tok->chat_template().empty());
  std::istringstream lines(
      test::ReadFile(test::SourceDir() + "/tests/golden/tokenizer/" + p.name + ".jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const json c = json::parse(line);
    const std::string text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->Encode(text), ids) << p.name << " case " << c["name"];
    EXPECT_EQ(tok->Encode(text, true), c["ids_special"].get<std::vector<int32_t>>()) << c["name"];
    EXPECT_EQ(tok->Decode(ids), c["decoded"].get<std::string>()) << c["name"];
    EXPECT_EQ(tok->Decode(c["ids_special"].get<std::vector<int32_t>>(), true),
              c["decoded_skip"].get<std::string>())
        << c["name"];
    ++n;
  }
  EXPECT_GT(n, 50);
}

INSTANTIATE_TEST_SUITE_P(Real, GgufTokenizerGolden,
                         ::testing::Values(TokCase{"qwen3", "qwen2"},
                                           TokCase{"llama3_1", "llama-bpe"},
                                           TokCase{"deepseek_v3", "deepseek-v3"}),
                         [](const auto& info) { return info.param.name; });

// Every pre-tokenizer name compiles; an unknown one is named in the reason.
TEST(GgufTokenizer, PreTokenizerNames) {
  for (const char* pre : {"default", "gpt2", "qwen2", "deepseek-r1-qwen", "llama-bpe",
                          "deepseek-v3", "deepseek-llm"}) {
    const std::string path = test::TempDir() + "/" + pre + ".gguf";
    GgufWriter w;
    w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str("qwen2"));
    test::SetGgufVocab(w, test::SourceDir() + "/tests/data/tiny_tokenizer", pre);
    w.WriteFile(path);
    std::string why;
    const auto tok = GgufTokenizer(*GgufFile::Open(path), &why);
    ASSERT_TRUE(tok) << pre << ": " << why;
    const std::string text = "Hello world 12345, naïve 東京\n\nok";
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text) << pre;
  }
  EXPECT_EQ(GgufPreTokenizerRegexes("deepseek-v3", "f").size(), 3u);
  EXPECT_EQ(GgufPreTokenizerRegexes("deepseek-llm", "f").size(), 6u);
  try {
    GgufPreTokenizerRegexes("chatglm-bpe", "m.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre 'chatglm-bpe' is not supported"),
              std::string::npos)
        << e.what();
  }
}

// The tiny ChatML tokenizer through GGUF gives the ids of its tokenizer.json.
TEST(GgufTokenizer, TinyTokenizerMatchesJson) {
  const std::string dir = test::SourceDir() + "/tests/data/tiny_tokenizer";
  const std::string path = test::TempDir() + "/tiny.gguf";
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str("qwen2"));
  test::SetGgufVocab(w, dir, "gpt2");
  w.WriteFile(path);
  std::string why;
  const auto g = GgufTokenizer(*GgufFile::Open(path), &why);
  ASSERT_TRUE(g) << why;
  const auto j = Tokenizer::Load(dir);
  for (const std::string text :
       {"<|im_start|>user\nHello there!<|im_end|>\n", "  spaces   and\ttabs", "", "ü€😀"}) {
    EXPECT_EQ(g->Encode(text), j->Encode(text)) << text;
    EXPECT_EQ(g->Decode(g->Encode(text)), text);
  }
  EXPECT_EQ(g->eos_id(), j->eos_id());
  EXPECT_EQ(g->chat_template(), j->chat_template());
}

// GGUF vocabularies can hold one text at several ids (converters pad a vocabulary with repeated
// texts; llama.cpp's loader asserts on them, transformers' GGUF converter keeps the last id in
// its vocab dict and cannot decode the others). Issue 23: such a file loads; encoding gives the
// first id of a text (normal and added tokens alike), and every id decodes to its own text.
TEST(GgufTokenizer, DuplicateTokenTextsLoadAndKeepTheFirstId) {
  const std::string dir = test::SourceDir() + "/tests/data/tiny_tokenizer";
  const auto j = Tokenizer::Load(dir);
  const int32_t a = j->TokenId("a"), im_end = j->TokenId("<|im_end|>");
  ASSERT_GE(a, 0);
  ASSERT_GE(im_end, 0);
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str("qwen2"));
  test::SetGgufVocab(w, dir, "gpt2");
  // The vocabulary again with three more ids: "a" as a normal token, "<|im_end|>" as a control
  // token, "a" once more as a user-defined one.
  const std::string path0 = test::TempDir() + "/dup0.gguf";
  w.WriteFile(path0);
  const auto f0 = GgufFile::Open(path0);
  std::vector<std::string> tokens = f0->GetStringArray(kKeyTokenizerTokens);
  std::vector<int64_t> types = f0->GetIntArray(kKeyTokenizerTokenType);
  const int32_t n = int32_t(tokens.size());
  for (auto [text, type] : {std::pair<std::string, GgufTokenType>{"a", GgufTokenType::kNormal},
                            {"<|im_end|>", GgufTokenType::kControl},
                            {"a", GgufTokenType::kUserDefined}}) {
    tokens.push_back(text);
    types.push_back(int64_t(type));
  }
  w.Set(std::string(kKeyTokenizerTokens), GgufValue::StrArray(tokens));
  w.Set(std::string(kKeyTokenizerTokenType), GgufValue::IntArray(GgufType::kI32, types));
  const std::string path = test::TempDir() + "/dup.gguf";
  w.WriteFile(path);
  std::string why;
  const auto g = GgufTokenizer(*GgufFile::Open(path), &why);
  ASSERT_TRUE(g) << why;
  EXPECT_EQ(g->vocab_size(), n + 3);
  // Encoding: the first id, as before the duplicates were appended.
  for (const std::string text : {"a", "aaa a", "<|im_start|>user\na<|im_end|>\n"})
    EXPECT_EQ(g->Encode(text), j->Encode(text)) << text;
  EXPECT_EQ(g->TokenId("a"), a);
  EXPECT_EQ(g->TokenId("<|im_end|>"), im_end);
  // Decoding: each id its own text, the duplicates too.
  EXPECT_EQ(g->Decode({a, n, n + 2, a}), "aaaa");
  EXPECT_EQ(g->Decode({n + 1}), "<|im_end|>");
  EXPECT_EQ(g->Decode({n + 1}, /*skip_special=*/true), "");
  EXPECT_EQ(g->TokenText(n), "a");
  EXPECT_EQ(g->TokenText(n + 1), "<|im_end|>");
  EXPECT_EQ(g->TokenText(n + 2), "a");
}

}  // namespace
}  // namespace es
