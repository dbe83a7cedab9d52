// Tokenizer API beyond tokenizer.json: building from GGUF-style vocabulary arrays
// (FromBpeVocab) gives the same ids as the JSON it mirrors, and Encode is safe to call from
// several threads at once (shared word cache).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "tok_test_util.h"

namespace es {
namespace {

using nlohmann::json;

TEST(TokenizerApi, FromBpeVocabMatchesTokenizerJson) {
  const std::string dir = test::SourceDir() + "/tests/data/tiny_tokenizer";
  const json j = json::parse(test::ReadFile(dir + "/tokenizer.json"));
  auto from_json = Tokenizer::Load(dir);
  BpeVocabSpec spec;
  spec.tokens.resize(from_json->vocab_size());
  spec.token_types.assign(spec.tokens.size(), TokenType::kNormal);
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
    spec.tokens[it.value().get<int>()] = it.key();
  for (const auto& a : j["added_tokens"]) {
    spec.tokens[a["id"].get<int>()] = a["content"].get<std::string>();
    spec.token_types[a["id"].get<int>()] = TokenType::kControl;
  }
  for (const auto& m : j["model"]["merges"])
    spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  spec.eos_id = from_json->eos_id();
  spec.chat_template = from_json->chat_template();
  auto from_vocab = Tokenizer::FromBpeVocab(spec);
  EXPECT_EQ(from_vocab->vocab_size(), from_json->vocab_size());
  EXPECT_EQ(from_vocab->eos_token(), "<|im_end|>");
  for (const std::string s : {"The quick brown fox, 42 times!", "<|im_start|>user\nhello<|im_end|>",
                              "  spaces\tand\ttabs\r\n", "\xE4\xBD\xA0\xE5\xA5\xBD"}) {
    EXPECT_EQ(from_vocab->Encode(s), from_json->Encode(s)) << s;
    EXPECT_EQ(from_vocab->Decode(from_vocab->Encode(s)), s);
  }
  EXPECT_TRUE(from_vocab->IsSpecial(from_vocab->TokenId("<|im_end|>")));

  // A text repeated at later ids (issue 23): encoding keeps the first id, each id decodes to its
  // own text, a repeated control token stays special; an id taken twice is one clear error.
  const int32_t n = int32_t(spec.tokens.size()), a = from_json->TokenId("a");
  spec.tokens.insert(spec.tokens.end(), {"a", "<|im_end|>"});
  spec.token_types.insert(spec.token_types.end(), {TokenType::kUserDefined, TokenType::kControl});
  auto dup = Tokenizer::FromBpeVocab(spec);
  EXPECT_EQ(dup->vocab_size(), n + 2);
  EXPECT_EQ(dup->Encode("a <|im_end|>"), from_json->Encode("a <|im_end|>"));
  EXPECT_EQ(dup->TokenId("a"), a);
  EXPECT_EQ(dup->Decode({n, a, n + 1}), "aa<|im_end|>");
  EXPECT_EQ(dup->Decode({n, n + 1}, /*skip_special=*/true), "a");
  try {
    dup->AddDuplicateId(a, "b", TokenType::kNormal);
    ADD_FAILURE() << "an id taken twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("id " + std::to_string(a) + " ('b') is already taken by 'a'"),
        std::string::npos)
        << e.what();
  }
}

TEST(TokenizerApi, ConcurrentEncodeIsConsistent) {
  auto t = Tokenizer::Load(test::SourceDir() + "/tests/data/tiny_tokenizer");
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "word" + std::to_string(i * 7919 % 1000) + " the story of a king. ";
  const auto expected = t->Encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      int good = 1;
      for (int r = 0; r < 5; ++r) good &= t->Encode(text) == expected;
      ok[k] = good;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 1) << "thread " << k;
}

}  // namespace
}  // namespace es
