// Every corpus case of tests/golden/tokenizer against the `tokenizers` library's output for the
// three real tokenizers (DeepSeek-V3, Qwen3, Llama 3.1): ids without and with special tokens,
// decode, decode skipping special tokens, exact equality. Invalid-UTF-8 cases are fed as raw
// bytes (our lossy repair must give the same text Python's errors="replace" gave).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tok_test_util.h"

namespace es {
namespace {

using nlohmann::json;

class GoldenCorpus : public ::testing::TestWithParam<std::string> {};

std::string Abbrev(const std::string& s) { return s.size() > 120 ? s.substr(0, 120) + "..." : s; }

TEST_P(GoldenCorpus, EveryCaseExact) {
  const std::string name = GetParam();
  const Tokenizer& tok = test::RealTokenizer(name);
  const std::string dir = test::SourceDir() + "/tests/golden/tokenizer/";
  const auto corpus = test::ReadJsonl(dir + "corpus.jsonl");
  const auto golden = test::ReadJsonl(dir + name + ".jsonl");
  ASSERT_EQ(corpus.size(), golden.size());
  ASSERT_GE(corpus.size(), 50u);
  int failures = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const json& c = corpus[i];
    const json& g = golden[i];
    ASSERT_EQ(c["name"], g["name"]);
    const std::string input = c.contains("bytes_b64")
                                  ? test::Base64Decode(c["bytes_b64"].get<std::string>())
                                  : c["text"].get<std::string>();
    const auto ids = tok.Encode(input, false);
    const auto ids_sp = tok.Encode(input, true);
    const auto exp_ids = g["ids"].get<std::vector<int32_t>>();
    const auto exp_sp = g["ids_special"].get<std::vector<int32_t>>();
    const std::string dec = tok.Decode(exp_ids, false);
    const std::string dec_skip = tok.Decode(exp_sp, true);
    const bool ok = ids == exp_ids && ids_sp == exp_sp && dec == g["decoded"].get<std::string>() &&
                    dec_skip == g["decoded_skip"].get<std::string>();
    EXPECT_EQ(ids, exp_ids) << name << " case " << c["name"] << ": "
                            << Abbrev(g["text"].get<std::string>());
    EXPECT_EQ(ids_sp, exp_sp) << name << " case " << c["name"];
    EXPECT_EQ(dec, g["decoded"].get<std::string>()) << name << " case " << c["name"];
    EXPECT_EQ(dec_skip, g["decoded_skip"].get<std::string>()) << name << " case " << c["name"];
    if (!ok && ++failures > 8) FAIL() << "too many failures";
  }
}

TEST_P(GoldenCorpus, StreamingDecodeEqualsDecode) {
  const std::string name = GetParam();
  const Tokenizer& tok = test::RealTokenizer(name);
  const auto golden =
      test::ReadJsonl(test::SourceDir() + "/tests/golden/tokenizer/" + name + ".jsonl");
  for (const auto& g : golden) {
    for (const bool skip : {false, true}) {
      const auto ids = g["ids_special"].get<std::vector<int32_t>>();
      StreamDecoder sd(tok, skip);
      std::string text;
      for (const int32_t id : ids) {
        const std::string part = sd.Push(id);
        // Only whole characters come out: the part is valid UTF-8 and never ends in U+FFFD that
        // Decode would not also have at that point.
        text += part;
      }
      text += sd.Flush();
      EXPECT_EQ(text, tok.Decode(ids, skip)) << name << " case " << g["name"] << " skip=" << skip;
    }
  }
}

TEST_P(GoldenCorpus, MetaFacts) {
  const std::string name = GetParam();
  const Tokenizer& tok = test::RealTokenizer(name);
  const json meta =
      json::parse(test::ReadFile(test::SourceDir() + "/tests/golden/tokenizer/meta.json"));
  const json& m = meta["tokenizers"][name];
  EXPECT_EQ(tok.vocab_size(), m["vocab_size_with_added"].get<int>());
  EXPECT_EQ(tok.bos_id(), m["bos_id"].is_null() ? -1 : m["bos_id"].get<int>());
  EXPECT_EQ(tok.eos_id(), m["eos_id"].is_null() ? -1 : m["eos_id"].get<int>());
  EXPECT_EQ(tok.bos_token(), m["bos_token"].is_null() ? "" : m["bos_token"].get<std::string>());
  EXPECT_EQ(tok.eos_token(), m["eos_token"].get<std::string>());
  EXPECT_EQ(tok.add_bos(), m["add_bos_token"].get<bool>());
  EXPECT_FALSE(tok.chat_template().empty());
}

INSTANTIATE_TEST_SUITE_P(Real, GoldenCorpus, ::testing::Values("deepseek_v3", "qwen3", "llama3_1"));

}  // namespace
}  // namespace es
