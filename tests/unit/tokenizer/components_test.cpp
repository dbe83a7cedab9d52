// Each normalizer, pre-tokenizer, model option, added-token flag, post-processor and decoder on
// small hand-written tokenizer.json snippets, with hand-checked expectations.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "tok_test_util.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/pre_tokenizers.h"

namespace es {
namespace {

using nlohmann::json;
using Strings = std::vector<std::string>;

std::string Norm(const char* type_json, std::string text) {
  auto n = tok::MakeNormalizer(json::parse(type_json), "normalizer");
  n->Normalize(&text);
  return text;
}

Strings Pre(const json& j, const std::string& text, bool at_start = true) {
  auto p = tok::MakePreTokenizer(j, "pre_tokenizer");
  std::vector<tok::Piece> pieces(1);
  pieces[0].text = text;
  pieces[0].at_start = at_start;
  p->PreTokenize(&pieces);
  Strings out;
  for (auto& x : pieces) out.push_back(x.text);
  return out;
}

Strings Dec(const char* j, Strings tokens) {
  auto d = tok::MakeDecoder(json::parse(j), "decoder");
  d->DecodeChain(&tokens);
  return tokens;
}

json SplitJson(const std::string& regex, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", behavior},
          {"invert", invert}};
}

// ---- normalizers ---------------------------------------------------------------------------

TEST(Normalizers, UnicodeForms) {
  EXPECT_EQ(Norm(R"({"type":"NFC"})", "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(Norm(R"({"type":"NFD"})", "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(Norm(R"({"type":"NFKC"})", "\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");  // ﬁ ①
  EXPECT_EQ(Norm(R"({"type":"NFKD"})", "\xEF\xAC\x81\xC3\xA9"), "fie\xCC\x81");
  EXPECT_EQ(Norm(R"({"type":"NFC"})", "plain ascii"), "plain ascii");
  // Marks compose with the ASCII letter before them, runs between ASCII are handled apart.
  EXPECT_EQ(Norm(R"({"type":"NFC"})",
                 "xe\xCC\x81y\xCC\x81z \xE2\x80\x99"
                 "a\xCC\x8A"),
            "x\xC3\xA9\xC3\xBDz \xE2\x80\x99\xC3\xA5");
  EXPECT_EQ(Norm(R"({"type":"NFD"})", "\xC3\xA9t\xC3\xA9"), "e\xCC\x81te\xCC\x81");
  // Hangul jamo compose under NFC.
  EXPECT_EQ(Norm(R"({"type":"NFC"})", "\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // 가
}

TEST(Normalizers, LowercaseStripReplacePrepend) {
  EXPECT_EQ(Norm(R"({"type":"Lowercase"})", "HeLLo \xC3\x80\xC3\x89 \xC4\xB0"),
            "hello \xC3\xA0\xC3\xA9 i\xCC\x87");
  EXPECT_EQ(Norm(R"({"type":"Strip","strip_left":true,"strip_right":false})", "  \t hi \n"),
            "hi \n");
  EXPECT_EQ(Norm(R"({"type":"Strip","strip_left":true,"strip_right":true})", "\xE3\x80\x80 hi \n"),
            "hi");
  EXPECT_EQ(Norm(R"({"type":"Strip","strip_left":true,"strip_right":true})", "   "), "");
  EXPECT_EQ(Norm(R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})", "a b  c"),
            "a\xE2\x96\x81"
            "b\xE2\x96\x81\xE2\x96\x81"
            "c");
  EXPECT_EQ(Norm(R"({"type":"Replace","pattern":{"String":"a.b"},"content":"X"})", "a.b axb"),
            "X axb");
  EXPECT_EQ(Norm(R"({"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "})", "a   b  c d"),
            "a b c d");
  EXPECT_EQ(Norm(R"({"type":"Prepend","prepend":"\u2581"})", "abc"),
            "\xE2\x96\x81"
            "abc");
  EXPECT_EQ(Norm(R"({"type":"Prepend","prepend":"\u2581"})", ""), "");
  EXPECT_EQ(
      Norm(
          R"({"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"String":" "},"content":"_"},
                   {"type":"Prepend","prepend":"_"},{"type":"Lowercase"}]})",
          "A B"),
      "_a_b");
  EXPECT_EQ(Norm(R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"}]})",
                 "caf\xC3\xA9"),
            "cafe");
}

TEST(Normalizers, UnknownTypeIsNamed) {
  try {
    tok::MakeNormalizer(json::parse(R"({"type":"Precompiled","precompiled_charsmap":""})"),
                        "tokenizer.json normalizer");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Precompiled'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("normalizer"), std::string::npos) << e.what();
  }
}

// ---- pre-tokenizers ------------------------------------------------------------------------

TEST(PreTokenizers, SplitBehaviors) {
  const std::string t = "a  b c";
  EXPECT_EQ(Pre(SplitJson("\\s+", "Removed"), t), (Strings{"a", "b", "c"}));
  EXPECT_EQ(Pre(SplitJson("\\s+", "Isolated"), t), (Strings{"a", "  ", "b", " ", "c"}));
  EXPECT_EQ(Pre(SplitJson("\\s+", "MergedWithPrevious"), t), (Strings{"a  ", "b ", "c"}));
  EXPECT_EQ(Pre(SplitJson("\\s+", "MergedWithNext"), t), (Strings{"a", "  b", " c"}));
  EXPECT_EQ(Pre(SplitJson("\\s", "Contiguous"), t), (Strings{"a", "  ", "b", " ", "c"}));
  EXPECT_EQ(Pre(SplitJson("\\w+", "Removed", /*invert=*/true), "hi, you!"), (Strings{"hi", "you"}));
  EXPECT_EQ(Pre(SplitJson("-", "MergedWithPrevious"), "a-b--c-"), (Strings{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(Pre(SplitJson("x", "Isolated"), ""), (Strings{}));
  json lit = {{"type", "Split"},
              {"pattern", {{"String", "."}}},
              {"behavior", "Removed"},
              {"invert", false}};
  EXPECT_EQ(Pre(lit, "a.b+c"), (Strings{"a", "b+c"}));  // "." is literal, not "any char"
}

TEST(PreTokenizers, UnicodeRegexCaseInsensitiveAndLookahead) {
  const std::string qwen =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(Pre(SplitJson(qwen, "Isolated"), "HE'LL go   now"),
            (Strings{"HE", "'LL", " go", "  ", " now"}));
  EXPECT_EQ(Pre(SplitJson(qwen, "Isolated"), "x42!?\r\n\n y"),
            (Strings{"x", "4", "2", "!?\r\n\n", " y"}));
  EXPECT_EQ(Pre(SplitJson("[\\p{L}\\p{M}]+", "Isolated"), "cafe\xCC\x81 ok"),
            (Strings{"cafe\xCC\x81", " ", "ok"}));
  EXPECT_EQ(Pre(SplitJson("\\p{P}+|\\p{S}+", "Isolated"), "a,.b$+"),
            (Strings{"a", ",.", "b", "$+"}));
  // \s is Unicode White_Space (ideographic space U+3000), as in Oniguruma.
  EXPECT_EQ(Pre(SplitJson("\\s+", "Removed"),
                "a\xE3\x80\x80"
                "b"),
            (Strings{"a", "b"}));
}

TEST(PreTokenizers, ByteLevel) {
  EXPECT_EQ(Pre(json::parse(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})"),
                "Hello world"),
            (Strings{"\xC4\xA0Hello", "\xC4\xA0world"}));
  EXPECT_EQ(Pre(json::parse(R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false})"),
                "a b\n"),
            (Strings{"a\xC4\xA0"
                     "b\xC4\x8A"}));
  EXPECT_EQ(
      Pre(json::parse(R"({"type":"ByteLevel","add_prefix_space":false})"), "it's  ok\xC3\xA9"),
      (Strings{"it", "'s", "\xC4\xA0", "\xC4\xA0ok\xC3\x83\xC2\xA9"}));
}

TEST(PreTokenizers, DigitsMetaspaceSequence) {
  EXPECT_EQ(Pre(json::parse(R"({"type":"Digits","individual_digits":false})"), "ab123c4"),
            (Strings{"ab", "123", "c", "4"}));
  EXPECT_EQ(Pre(json::parse(R"({"type":"Digits","individual_digits":true})"), "ab123c4"),
            (Strings{"ab", "1", "2", "3", "c", "4"}));
  const std::string u = "\xE2\x96\x81";
  const json always = json::parse(
      R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":true})");
  EXPECT_EQ(Pre(always, "Hey friend"), (Strings{u + "Hey", u + "friend"}));
  EXPECT_EQ(Pre(always, "Hey friend", /*at_start=*/false), (Strings{u + "Hey", u + "friend"}));
  const json first = json::parse(
      R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":true})");
  EXPECT_EQ(Pre(first, "Hey friend"), (Strings{u + "Hey", u + "friend"}));
  EXPECT_EQ(Pre(first, "Hey friend", /*at_start=*/false), (Strings{"Hey", u + "friend"}));
  const json never = json::parse(
      R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never","split":false})");
  EXPECT_EQ(Pre(never, "Hey  friend"), (Strings{"Hey" + u + u + "friend"}));
  const json legacy =
      json::parse(R"({"type":"Metaspace","replacement":"\u2581","add_prefix_space":true})");
  EXPECT_EQ(Pre(legacy, "a  b"), (Strings{u + "a", u, u + "b"}));
  const json seq =
      json::parse(R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},
      {"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})");
  EXPECT_EQ(Pre(seq, "a 12"), (Strings{"a\xC4\xA0", "1", "2"}));
  EXPECT_EQ(Pre(json::parse(R"({"type":"Whitespace"})"), "Hi, you!  x"),
            (Strings{"Hi", ",", "you", "!", "x"}));
  EXPECT_EQ(Pre(json::parse(R"({"type":"WhitespaceSplit"})"), " a\tb  c "),
            (Strings{"a", "b", "c"}));
  EXPECT_EQ(Pre(json::parse(R"({"type":"Punctuation","behavior":"Isolated"})"), "a,b!"),
            (Strings{"a", ",", "b", "!"}));
}

TEST(PreTokenizers, ErrorsNameTheFault) {
  try {
    Pre(json::parse(R"({"type":"BertPreTokenizerX"})"), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'BertPreTokenizerX'"), std::string::npos) << e.what();
  }
  try {
    Pre(SplitJson("(unclosed", "Isolated"), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
  }
  try {
    Pre(SplitJson("x", "Sideways"), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Sideways'"), std::string::npos) << e.what();
  }
}

// ---- BPE model -----------------------------------------------------------------------------

std::unique_ptr<Tokenizer> Bpe(const json& vocab, const json& merges,
                               json model_extra = json::object(), json extra = json::object()) {
  json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
            {"added_tokens", json::array()}};
  for (auto it = model_extra.begin(); it != model_extra.end(); ++it)
    j["model"][it.key()] = it.value();
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return Tokenizer::FromJson(j, nullptr);
}

using Ids = std::vector<int32_t>;

TEST(BpeModel, MergeOrderStringAndPairForms) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"bc", 5}};
  auto t1 = Bpe(vocab, {"a b", "ab c"});
  EXPECT_EQ(t1->Encode("abc"), (Ids{4}));
  EXPECT_EQ(t1->Encode("abab"), (Ids{3, 3}));
  auto t2 = Bpe(vocab, json::parse(R"([["a","b"],["ab","c"]])"));
  EXPECT_EQ(t2->Encode("abc"), (Ids{4}));
  auto t3 = Bpe(vocab, {"b c", "a b"});  // rank decides: bc first, then a+bc has no merge
  EXPECT_EQ(t3->Encode("abc"), (Ids{0, 5}));
  EXPECT_EQ(t3->Encode("ababc"), (Ids{3, 0, 5}));
  EXPECT_EQ(t3->Decode({3, 0, 5}), "ab a bc");  // no decoder: tokens joined by spaces
}

TEST(BpeModel, IgnoreMergesUnkFuseByteFallback) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}};
  EXPECT_EQ(Bpe(vocab, json::array())->Encode("abc"), (Ids{0, 1, 2}));
  EXPECT_EQ(Bpe(vocab, json::array(), {{"ignore_merges", true}})->Encode("abc"), (Ids{3}));

  const json v2 = {{"<unk>", 0}, {"a", 1}};
  EXPECT_EQ(Bpe(v2, json::array(), {{"unk_token", "<unk>"}})->Encode("axxa"), (Ids{1, 0, 0, 1}));
  EXPECT_EQ(Bpe(v2, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}})->Encode("axxa"),
            (Ids{1, 0, 1}));
  EXPECT_EQ(Bpe(v2, json::array())->Encode("axa"),
            (Ids{1, 1}));  // no unk: dropped, as `tokenizers`

  json v3 = {{"<unk>", 0}, {"a", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v3[name] = 2 + b;
  }
  const json dec =
      json::parse(R"({"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Fuse"}]})");
  auto t =
      Bpe(v3, json::array(), {{"unk_token", "<unk>"}, {"byte_fallback", true}}, {{"decoder", dec}});
  const Ids ids = t->Encode("a\xC3\xA9");  // é = C3 A9
  EXPECT_EQ(ids, (Ids{1, 2 + 0xC3, 2 + 0xA9}));
  EXPECT_EQ(t->Decode(ids), "a\xC3\xA9");
  EXPECT_EQ(t->Decode({1, 2 + 0xC3}), "a\xEF\xBF\xBD");  // cut character -> U+FFFD
  EXPECT_EQ(t->Decode({2 + 0xE4, 2 + 0xBD, 1}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");  // one per byte
}

TEST(BpeModel, BadMergesAndModelTypes) {
  const json vocab = {{"a", 0}, {"b", 1}};
  try {
    Bpe(vocab, {"a b"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merges[0]"), std::string::npos) << e.what();
  }
  try {
    Bpe(vocab, {"ab"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merges[0]"), std::string::npos) << e.what();
  }
  try {
    Tokenizer::FromJson(json::parse(R"({"model":{"type":"Unigram","vocab":[]}})"), nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Unigram'"), std::string::npos) << e.what();
  }
  try {
    Bpe(vocab, json::array(), json::object(), {{"decoder", {{"type", "CTCx"}}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'CTCx'"), std::string::npos) << e.what();
  }
}

// ---- added tokens --------------------------------------------------------------------------

json Added(const std::string& content, int id, bool special, json flags = json::object()) {
  json a = {{"id", id},        {"content", content},     {"special", special},  {"lstrip", false},
            {"rstrip", false}, {"normalized", !special}, {"single_word", false}};
  for (auto it = flags.begin(); it != flags.end(); ++it) a[it.key()] = it.value();
  return a;
}

TEST(AddedTokens, LongestMatchStripSingleWordNormalized) {
  json j = test::ByteLevelJson({}, json::object());
  j["added_tokens"] = {Added("<a>", 300, true), Added("<a><b>", 301, true),
                       Added("<mask>", 302, true, {{"lstrip", true}, {"rstrip", true}}),
                       Added("ab", 303, false, {{"single_word", true}, {"normalized", false}}),
                       Added("hello", 304, false, {{"normalized", true}})};
  j["normalizer"] = {{"type", "Lowercase"}};
  auto t = Tokenizer::FromJson(j, nullptr);
  const int32_t x = 'x', sp_x = -1;
  (void)sp_x;
  EXPECT_EQ(t->Encode("<a><b>x<a>"), (Ids{301, x, 300}));
  EXPECT_EQ(t->Encode("x <mask>  x"), (Ids{x, 302, x}));  // the spaces around are swallowed
  // single_word: "ab" inside "cab" / "abc" is not a match.
  const Ids ids = t->Encode("ab cab");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 303);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 303), 1);
  // normalized=true: matched on the lowercased text.
  EXPECT_EQ(t->Encode("HELLO"), (Ids{304}));
  EXPECT_TRUE(t->IsSpecial(300));
  EXPECT_FALSE(t->IsSpecial(303));
  EXPECT_EQ(t->Decode({300, x, 303}, /*skip_special=*/true), "xab");
  EXPECT_EQ(t->Decode({300, x, 303}, false), "<a>xab");
  EXPECT_EQ(t->vocab_size(), 305);
  EXPECT_EQ(t->TokenId("<mask>"), 302);
  EXPECT_EQ(t->TokenText(301), "<a><b>");
  EXPECT_EQ(t->TokenId("nope"), -1);
}

TEST(AddedTokens, PiecesBetweenTokensArePreTokenizedApart) {
  // Metaspace "first": only the piece at offset 0 gets the prefix.
  const std::string u = "\xE2\x96\x81";
  json j = {
      {"model", {{"type", "BPE"}, {"vocab", json::object()}, {"merges", json::array()}}},
      {"added_tokens", {Added("<s>", 0, true)}},
      {"pre_tokenizer",
       json::parse(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first"})")}};
  auto t = Tokenizer::FromJson(j, nullptr);
  auto texts = [&](const std::string& s) {
    Strings out;
    for (const auto& p : t->pipeline().PreTokenized(s)) out.push_back(p.text);
    return out;
  };
  EXPECT_EQ(texts("Hi<s>Hi there"), (Strings{u + "Hi", "<s>", "Hi", u + "there"}));
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  t = Tokenizer::FromJson(j, nullptr);
  EXPECT_EQ(texts("Hi<s>Hi there"), (Strings{u + "Hi", "<s>", u + "Hi", u + "there"}));
}

// ---- post-processors and tokenizer_config --------------------------------------------------

TEST(PostProcessors, TemplateBertConfigBos) {
  json j = test::ByteLevelJson({}, json::object());
  j["added_tokens"] = {Added("<s>", 300, true), Added("</s>", 301, true)};
  j["post_processor"] = json::parse(R"({"type":"TemplateProcessing",
      "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],
      "pair":[], "special_tokens":{"<s>":{"id":"<s>","ids":[300],"tokens":["<s>"]},"</s>":{"id":"</s>","ids":[301],"tokens":["</s>"]}}})");
  auto t = Tokenizer::FromJson(j, nullptr);
  EXPECT_EQ(t->Encode("a", true), (Ids{300, 'a', 301}));
  EXPECT_EQ(t->Encode("a", false), (Ids{'a'}));
  EXPECT_EQ(t->Encode("", true), (Ids{300, 301}));

  j["post_processor"] =
      json::parse(R"({"type":"TemplateProcessing","single":"<s> $A:0 </s>:0","pair":"",
      "special_tokens":{"<s>":{"id":"<s>","ids":[300],"tokens":["<s>"]},"</s>":{"id":"</s>","ids":[301],"tokens":["</s>"]}}})");
  EXPECT_EQ(Tokenizer::FromJson(j, nullptr)->Encode("a", true), (Ids{300, 'a', 301}));

  j["post_processor"] =
      json::parse(R"({"type":"BertProcessing","sep":["</s>",301],"cls":["<s>",300]})");
  EXPECT_EQ(Tokenizer::FromJson(j, nullptr)->Encode("b", true), (Ids{300, 'b', 301}));

  // ByteLevel post-processor adds nothing; add_bos_token from the config prepends BOS once.
  j["post_processor"] =
      json::parse(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false})");
  const json cfg = json::parse(R"({"add_bos_token":true,"add_eos_token":true,
      "bos_token":{"__type":"AddedToken","content":"<s>"},"eos_token":"</s>","chat_template":"{{ x }}"})");
  auto t2 = Tokenizer::FromJson(j, &cfg);
  EXPECT_EQ(t2->bos_id(), 300);
  EXPECT_EQ(t2->eos_id(), 301);
  EXPECT_EQ(t2->bos_token(), "<s>");
  EXPECT_EQ(t2->chat_template(), "{{ x }}");
  EXPECT_EQ(t2->Encode("a", true), (Ids{300, 'a', 301}));
  EXPECT_EQ(t2->Encode("<s>a", true), (Ids{300, 'a', 301}));  // already first: not doubled
  EXPECT_EQ(t2->Encode("a", false), (Ids{'a'}));
  EXPECT_EQ(t2->config()["eos_token"], "</s>");
}

// ---- decoders ------------------------------------------------------------------------------

TEST(Decoders, EachType) {
  const std::string u = "\xE2\x96\x81";
  EXPECT_EQ(Dec(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always"})",
                {u + "Hey", u + "friend"}),
            (Strings{"Hey", " friend"}));
  EXPECT_EQ(
      Dec(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never"})", {u + "Hey"}),
      (Strings{" Hey"}));
  EXPECT_EQ(
      Dec(R"({"type":"Replace","pattern":{"String":"\u2581"},"content":" "})", {u + "a" + u, "b"}),
      (Strings{" a ", "b"}));
  EXPECT_EQ(Dec(R"({"type":"ByteFallback"})", {"a", "<0xE2>", "<0x82>", "<0xAC>", "<0xZZ>"}),
            (Strings{"a", "\xE2\x82\xAC", "<0xZZ>"}));
  EXPECT_EQ(Dec(R"({"type":"Fuse"})", {"a", "b", "c"}), (Strings{"abc"}));
  EXPECT_EQ(Dec(R"({"type":"Strip","content":" ","start":1,"stop":1})", {"  a  ", "b"}),
            (Strings{" a ", "b"}));
  // "ä½" stands for bytes E4 BD, the start of 你: one U+FFFD for the cut character.
  EXPECT_EQ(Dec(R"({"type":"ByteLevel"})", {"\xC4\xA0Hello", "\xC4\x8A", "\xC3\xA4\xC2\xBD"}),
            (Strings{" Hello\n\xEF\xBF\xBD"}));
  // A token with characters outside the byte map is taken as its own UTF-8 bytes.
  EXPECT_EQ(Dec(R"({"type":"ByteLevel"})", {"<\xEF\xBD\x9C"
                                            "x>",
                                            "\xC4\xA0"}),
            (Strings{"<\xEF\xBD\x9C"
                     "x> "}));
  // Llama-2 style chain.
  EXPECT_EQ(
      Dec(R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
      {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})",
          {u + "Hello", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", u + "world"}),
      (Strings{"Hello\xF0\x9F\x98\x80 world"}));
}

}  // namespace
}  // namespace es
