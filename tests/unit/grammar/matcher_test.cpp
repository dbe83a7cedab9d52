// Token masks (matcher.h) against their reference: a token is allowed exactly when accepting its
// bytes one by one from the current state succeeds.
#include "edgeseek/internal/grammar/matcher.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/json_schema.h"
#include "grammar_util.h"

namespace es::grammar {
namespace {

bool Bit(const std::vector<uint64_t>& mask, int32_t id) {
  return (mask[size_t(id) >> 6] >> (id & 63)) & 1;
}

// Walks `steps` random allowed tokens; at every step compares the mask with the reference.
void CheckAgainstReference(const std::string& gbnf, const std::shared_ptr<const TokenTrie>& vocab,
                           uint64_t seed, int steps) {
  Matcher m(std::make_shared<Grammar>(Grammar::ParseGbnf(gbnf)), vocab);
  std::mt19937_64 rng(seed);
  for (int s = 0; s < steps; ++s) {
    const std::vector<uint64_t> mask = m.Mask();
    ASSERT_EQ(mask, m.MaskByWalk())
        << "step " << s << ": the plain-token shortcut differs from the walk";
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
      Matcher copy = m;
      const bool ref = copy.Accept(id);
      ASSERT_EQ(Bit(mask, id), ref)
          << "step " << s << " token " << id << " '" << vocab->bytes(id) << "'";
      if (ref) allowed.push_back(id);
    }
    if (allowed.empty()) return;
    ASSERT_TRUE(m.Accept(allowed[rng() % allowed.size()]));
  }
}

TEST(Matcher, MaskEqualsPerTokenAcceptance) {
  const auto vocab = test::SmallVocab();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CheckAgainstReference(JsonObjectGbnf(), vocab, seed, 25);
    CheckAgainstReference("root ::= ( [a-z]+ \" \" )* \"é\" [^\\x00-\\x7F]{1,3} \"!\"", vocab, seed,
                          12);
  }
}

// The plain-token shortcut of Mask() (matcher.h) against the whole walk and the per-token
// reference: strings bounded and unbounded, escapes, multi-byte and unfinished characters,
// classes that do not treat plain characters alike.
TEST(Matcher, PlainTokensShortcutEqualsTheWalk) {
  std::vector<std::string> bytes;
  const auto small = test::SmallVocab();
  for (int32_t id = 0; id < small->vocab_size(); ++id) bytes.push_back(small->bytes(id));
  for (const char* t :
       {"hello", "hello world", "abcdefgh", "ab", "日本語です", "x\xC3", "\xC3\xA9t\xE2\x82",
        "\xED\xA0", "\xE0\x80", "\xF4\x90", "\xF4\x8F", "tab\there", "q\"", "\\\\", "ünï"})
    bytes.push_back(t);
  const auto vocab = std::make_shared<const TokenTrie>(bytes);
  const char* grammars[] = {
      "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,5} \"\\\"\"",
      "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{3,7} \"\\\"\" \"!\"",
      "root ::= [^\"]* \"\\\"\"",
      "root ::= ( [a-z]+ \" \" )* \"é\" [^\\x00-\\x7F]{1,3} \"!\"",
      "root ::= [^x]{0,4} \"x\"",
  };
  for (const char* g : grammars)
    for (uint64_t seed = 1; seed <= 4; ++seed) CheckAgainstReference(g, vocab, seed, 12);
  for (const char* schema :
       {R"({"type":"object","properties":{"a":{"type":"string","maxLength":4},"b":{"type":"string"},
                                 "c":{"enum":["x y","z"]}},"required":["a","b","c"]})",
        R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":9},"maxItems":3})"}) {
    const std::string gbnf = SchemaToGbnf(SchemaModel::Parse(nlohmann::json::parse(schema)));
    for (uint64_t seed = 1; seed <= 4; ++seed) CheckAgainstReference(gbnf, vocab, seed, 30);
  }
  // The real vocabulary (when fetched): the shortcut and the walk agree along random walks.
  if (const auto qwen = test::QwenVocab()) {
    const std::string gbnf = SchemaToGbnf(SchemaModel::Parse(nlohmann::json::parse(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"bio":{"type":"string"}},"required":["name","bio"]})")));
    Matcher m(std::make_shared<Grammar>(Grammar::ParseGbnf(gbnf)), qwen);
    std::mt19937_64 rng(5);
    for (int s = 0; s < 24; ++s) {
      const std::vector<uint64_t> mask = m.Mask();
      ASSERT_EQ(mask, m.MaskByWalk()) << "step " << s;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < qwen->vocab_size(); ++id)
        if (Bit(mask, id)) allowed.push_back(id);
      if (allowed.empty()) break;
      ASSERT_TRUE(m.Accept(allowed[rng() % allowed.size()]));
    }
  }
}

TEST(Matcher, TokensMayEndInsideACharacter) {
  const auto vocab = test::SmallVocab();
  Matcher m(std::make_shared<Grammar>(Grammar::ParseGbnf("root ::= \"\\\"\" \"é\" \"\\\"\"")),
            vocab);
  ASSERT_TRUE(m.AcceptText("\""));
  const auto& mask = m.Mask();
  EXPECT_TRUE(Bit(mask, 1 + 0xC3));   // the lead byte of é alone
  EXPECT_FALSE(Bit(mask, 1 + 0xE2));  // the lead byte of € cannot become é
  EXPECT_FALSE(Bit(mask, 1 + 0x80));  // a lone continuation byte is never valid UTF-8
  {
    Matcher any(std::make_shared<Grammar>(Grammar::ParseGbnf("root ::= [^\"]+")), vocab);
    ASSERT_TRUE(any.AcceptText("\xED"));
    EXPECT_FALSE(any.AcceptText("\xA0"));  // ED A0..BF: only surrogates follow, a dead end
    EXPECT_TRUE(any.AcceptText("\x9F"));   // ED 9F: U+D7C0..U+D7FF
  }
  ASSERT_TRUE(m.Accept(1 + 0xC3));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.AcceptText("\xA8"));  // è's continuation
  EXPECT_TRUE(m.AcceptText("\xA9\""));
  EXPECT_TRUE(m.accepting());
}

TEST(Matcher, StatesAndMasksAreReused) {
  const auto vocab = test::SmallVocab();
  Matcher m(std::make_shared<Grammar>(Grammar::ParseGbnf(JsonObjectGbnf())), vocab);
  ASSERT_TRUE(m.AcceptText("{\"k\": \""));
  const std::vector<uint64_t> inside = m.Mask();
  ASSERT_TRUE(m.AcceptText("abc"));
  const size_t states = m.n_states();
  ASSERT_TRUE(m.AcceptText("d"));
  EXPECT_EQ(m.n_states(), states);  // "inside the string" again: no new state
  EXPECT_EQ(m.Mask(), inside);
}

// ApplyMask against the plain rule (bit clear or past the mask: -inf) over odd sizes and
// densities (the word-level shortcuts: full, sparse, dense words).
TEST(Matcher, ApplyMaskEqualsThePlainRule) {
  std::mt19937_64 rng(9);
  for (int vocab : {1, 63, 64, 65, 200, 1000}) {
    for (double density : {0.0, 0.02, 0.5, 0.97, 1.0}) {
      std::vector<uint64_t> mask(size_t(vocab + 63) / 64 - (vocab > 100 ? 1 : 0),
                                 0);  // may be short
      for (size_t w = 0; w < mask.size(); ++w)
        for (int k = 0; k < 64; ++k)
          if (std::uniform_real_distribution<double>(0, 1)(rng) < density)
            mask[w] |= uint64_t(1) << k;
      std::vector<float> row(static_cast<size_t>(vocab)), want(static_cast<size_t>(vocab));
      for (int i = 0; i < vocab; ++i) row[size_t(i)] = want[size_t(i)] = float(i % 17) - 8.0f;
      int allowed = 0;
      for (int i = 0; i < vocab; ++i) {
        const bool on = size_t(i / 64) < mask.size() && Bit(mask, i);
        allowed += on;
        if (!on) want[size_t(i)] = -INFINITY;
      }
      EXPECT_EQ(ApplyMask(mask, row.data(), vocab), allowed) << vocab << " " << density;
      EXPECT_EQ(row, want) << vocab << " " << density;
    }
  }
}

TEST(Matcher, AmbiguityAndSizeAreBounded) {
  MatcherLimits lim;
  lim.max_state_stacks = 8;
  // Twenty ways to read the same "a": more open parses than the limit allows.
  std::string g = "root ::= x0";
  for (int i = 0; i < 20; ++i)
    g += " | x" + std::to_string(i) + "\nx" + std::to_string(i) + " ::= \"a\"";
  EXPECT_THROW(Matcher(std::make_shared<Grammar>(Grammar::ParseGbnf(g)), test::SmallVocab(), lim),
               Error);
}

}  // namespace
}  // namespace es::grammar
