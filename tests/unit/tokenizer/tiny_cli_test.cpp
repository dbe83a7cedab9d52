// The tiny test tokenizer (tests/data/tiny_tokenizer) and the `edgeseek tokenize` verb: encode,
// --special, --jsonl, --decode, invalid UTF-8 on stdin, and bad input with a clear error line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "tok_test_util.h"

namespace es {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string TinyDir() { return test::SourceDir() + "/tests/data/tiny_tokenizer"; }

TEST(TinyTokenizer, ShapeAndChatML) {
  auto t = Tokenizer::Load(TinyDir());
  EXPECT_LE(t->vocab_size(), 512);
  EXPECT_GT(t->vocab_size(), 256 + 24);
  for (const char* s : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = t->TokenId(s);
    ASSERT_GE(id, 256) << s;
    EXPECT_TRUE(t->IsSpecial(id)) << s;
  }
  EXPECT_EQ(t->eos_token(), "<|im_end|>");
  EXPECT_EQ(t->eos_id(), t->TokenId("<|im_end|>"));
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_NE(t->chat_template().find("<|im_start|>"), std::string::npos);
  // Merges learned on English: common words are single tokens, round trips are exact.
  const auto ids = t->Encode("The quick brown fox and the lazy dog");
  EXPECT_LT(ids.size(), 20u);
  EXPECT_EQ(t->TokenText(ids[0]), "The");
  for (const std::string s : {"", " ", "hello\n\n  world\t!", "<|im_start|>user\nHi<|im_end|>\n",
                              "\xE2\x82\xAC 12 \xF0\x9F\x98\x80"})
    EXPECT_EQ(t->Decode(t->Encode(s)), s);
  EXPECT_EQ(t->Encode("<|im_start|>x")[0], t->TokenId("<|im_start|>"));
  EXPECT_EQ(t->Encode("x", true), t->Encode("x", false));  // no BOS for ChatML
}

TEST(TinyTokenizer, LoadFileAndMissing) {
  auto t = Tokenizer::Load(TinyDir() + "/tokenizer.json");
  EXPECT_EQ(t->eos_token(), "<|im_end|>");  // tokenizer_config.json next to the file is read
  EXPECT_THROW(Tokenizer::Load(test::TempDir()), Error);
  EXPECT_THROW(Tokenizer::Load(test::TempDir() + "/nope.json"), Error);
}

TEST(TokenizerErrors, MalformedJsonNamesPosition) {
  const std::string dir = test::TempDir();
  test::WriteFile(dir + "/tokenizer.json", "{\n  \"model\": {\"type\": \"BPE\",, }\n}");
  try {
    Tokenizer::Load(dir);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
    EXPECT_NE(m.find("byte 29"), std::string::npos) << m;
    EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  }
  test::WriteFile(
      dir + "/tokenizer.json",
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Fancy"}})");
  try {
    Tokenizer::Load(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported normalizer type 'Fancy'"), std::string::npos)
        << e.what();
  }
  test::WriteFile(
      dir + "/tokenizer.json",
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Mystery"}})");
  try {
    Tokenizer::Load(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported pre-tokenizer type 'Mystery'"),
              std::string::npos)
        << e.what();
  }
  test::WriteFile(dir + "/tokenizer.json",
                  R"({"model":{"type":"BPE","vocab":{"a":"zero"},"merges":[]}})");
  EXPECT_THROW(Tokenizer::Load(dir), Error);
}

// ---- CLI -----------------------------------------------------------------------------------

struct Cli {
  int rc;
  std::string out, err;
};

Cli RunCli(const std::string& args, const std::string& stdin_bytes) {
  const std::string in = test::TempDir() + "/stdin.bin";
  test::WriteFile(in, stdin_bytes);
  Cli r;
  r.rc = test::RunCommand(
      test::CliPath() + " tokenize --tokenizer " + TinyDir() + " " + args + " < " + in, &r.out,
      &r.err);
  return r;
}

TEST(TokenizeCli, EncodeDecodeJsonl) {
  auto t = Tokenizer::Load(TinyDir());
  const std::string text = "Hello world!\n<|im_start|>assistant\nOK";
  Cli r = RunCli("", text);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get<Ids>(), t->Encode(text));
  r = RunCli("--special", text);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get<Ids>(), t->Encode(text, true));

  r = RunCli("--jsonl", "{\"text\": \"a b\"}\n\n{\"text\": \"line\\nbreak\"}\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            json(t->Encode("a b")).dump() + "\n" + json(t->Encode("line\nbreak")).dump() + "\n");

  const Ids ids = t->Encode(text);
  r = RunCli("--decode", json(ids).dump());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, text);  // raw text, special tokens kept, nothing added
  r = RunCli("--decode --jsonl", "{\"ids\": " + json(ids).dump() + "}\n{\"ids\": []}\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, json(text).dump() + "\n\"\"\n");
}

TEST(TokenizeCli, InvalidUtf8OnStdinIsReplaced) {
  auto t = Tokenizer::Load(TinyDir());
  const std::string bad =
      "abc\x80"
      "def \xFF\xFE hi \xE4\xB8";
  Cli r = RunCli("", bad);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).get<Ids>(),
            t->Encode("abc\xEF\xBF\xBD"
                      "def \xEF\xBF\xBD\xEF\xBF\xBD hi \xEF\xBF\xBD"));
}

TEST(TokenizeCli, BadInputNamesLineAndFails) {
  Cli r = RunCli("--jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("malformed JSON"), std::string::npos) << r.err;
  r = RunCli("--jsonl", "[1, 2]\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
  r = RunCli("--decode", "[1, 99999]");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("99999"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
  r = RunCli("--decode --jsonl", "{\"ids\": [1]}\n{\"ids\": [-3]}\n");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  r = RunCli("--decode", "[1, 2");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("byte"), std::string::npos) << r.err;
  const std::string dir = test::TempDir();
  test::WriteFile(dir + "/tokenizer.json", "{\"model\": [");
  Cli c;
  c.rc = test::RunCommand(test::CliPath() + " tokenize --tokenizer " + dir + " </dev/null", &c.out,
                          &c.err);
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.err.find("malformed JSON"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace es
