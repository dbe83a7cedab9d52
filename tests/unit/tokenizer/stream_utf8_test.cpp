// Streaming detokenization (only whole UTF-8 characters come out, byte-level and byte_fallback
// pieces never split a character) and the lossy UTF-8 repair of input text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tok_test_util.h"
#include "tokenizer/utf8.h"

namespace es {
namespace {

using nlohmann::json;

std::unique_ptr<Tokenizer> Tiny() {
  return Tokenizer::Load(test::SourceDir() + "/tests/data/tiny_tokenizer");
}

// Pushes ids one at a time; checks every part is valid UTF-8 and the whole equals Decode.
void CheckStream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip,
                 std::vector<std::string>* parts) {
  StreamDecoder sd(t, skip);
  std::string all;
  for (const int32_t id : ids) {
    std::string p = sd.Push(id);
    EXPECT_TRUE(tok::IsValidUtf8(p));
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "a cut character leaked out";
    all += p;
    if (parts) parts->push_back(p);
  }
  all += sd.Flush();
  EXPECT_EQ(all, t.Decode(ids, skip));
}

TEST(StreamDecoder, ByteLevelMultiByteCharacters) {
  auto t = Tiny();
  const std::string text =
      "h\xC3\xA9llo \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!";  // héllo 你好
                                                                                  // 👍🏽!
  const auto ids = t->Encode(text);
  std::vector<std::string> parts;
  CheckStream(*t, ids, false, &parts);
  // The tiny vocabulary has no merges for these characters: 你 is three byte tokens, and the
  // first two of them must produce nothing.
  size_t empty = 0;
  for (const auto& p : parts) empty += p.empty();
  EXPECT_GE(empty, 2u + 2u + 6u);
  EXPECT_EQ(t->Decode(ids), text);
}

TEST(StreamDecoder, SpecialTokensShownOrSkipped) {
  auto t = Tiny();
  const auto ids = t->Encode("<|im_start|>user\nHi there<|im_end|>");
  ASSERT_EQ(ids.front(), t->TokenId("<|im_start|>"));
  StreamDecoder shown(*t, false), hidden(*t, true);
  std::string a, b;
  for (const int32_t id : ids) {
    a += shown.Push(id);
    b += hidden.Push(id);
  }
  a += shown.Flush();
  b += hidden.Flush();
  EXPECT_EQ(a, "<|im_start|>user\nHi there<|im_end|>");
  EXPECT_EQ(b, "user\nHi there");
}

TEST(StreamDecoder, ByteFallbackAndFlushOfCutCharacter) {
  json vocab = {{"<unk>", 0}, {"\xE2\x96\x81", 1}, {"a", 258}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 2 + b;
  }
  json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array()},
        {"unk_token", "<unk>"},
        {"byte_fallback", true}}},
      {"pre_tokenizer",
       json::parse(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always"})")},
      {"decoder",
       json::parse(
           R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
                {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})")}};
  auto t = Tokenizer::FromJson(j, nullptr);
  const auto ids = t->Encode("a \xE2\x82\xAC a");  // "a € a": ▁ a ▁ <E2> <82> <AC> ▁ a
  ASSERT_EQ(ids.size(), 8u);
  std::vector<std::string> parts;
  CheckStream(*t, ids, false, &parts);
  EXPECT_EQ(t->Decode(ids), "a \xE2\x82\xAC a");
  // A stream cut inside € flushes the U+FFFD that Decode gives for the cut bytes.
  StreamDecoder sd(*t, false);
  std::string s;
  for (size_t i = 0; i + 3 < ids.size(); ++i) s += sd.Push(ids[i]);
  s += sd.Flush();
  EXPECT_EQ(s, t->Decode(std::vector<int32_t>(ids.begin(), ids.end() - 3)));
  EXPECT_EQ(s, "a \xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8, LossyRepairMaximalSubparts) {
  // Unicode 15 ch. 3, "U+FFFD substitution of maximal subparts" example.
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(tok::ToValidUtf8(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(tok::ToValidUtf8("\xC0\xAF"), r + r);                  // overlong
  EXPECT_EQ(tok::ToValidUtf8("\xED\xA0\x80"), r + r + r);          // surrogate
  EXPECT_EQ(tok::ToValidUtf8("end \xE4\xB8"), "end " + r);         // truncated 3-byte
  EXPECT_EQ(tok::ToValidUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF
  EXPECT_EQ(tok::ToValidUtf8("ok \xF0\x9F\x98\x80"), "ok \xF0\x9F\x98\x80");
  EXPECT_TRUE(tok::IsValidUtf8(""));
  EXPECT_FALSE(tok::IsValidUtf8("\xFF"));
}

TEST(Utf8, EncodeOfInvalidInputEqualsEncodeOfRepairedText) {
  auto t = Tiny();
  const std::string bad =
      "abc\x80"
      "def \xFF\xFEhello \xE4\xB8";
  EXPECT_EQ(t->Encode(bad), t->Encode(tok::ToValidUtf8(bad)));
  EXPECT_EQ(t->Decode(t->Encode(bad)), tok::ToValidUtf8(bad));
}

}  // namespace
}  // namespace es
