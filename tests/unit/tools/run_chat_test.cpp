// `run` and `chat` on a tiny synthetic Qwen2 with the tiny ChatML tokenizer: streaming works,
// sampling is deterministic for a seed, chat handles /reset and /quit, bad setups fail clearly.
#include <gtest/gtest.h>

#include "test_util.h"

namespace es {
namespace {

std::string Base() {
  return test::CliPath() + " --synthetic " + test::SourceDir() +
         "/tests/server/tiny_config.json --tokenizer " + test::SourceDir() +
         "/tests/data/tiny_tokenizer -t 1";
}

std::string Cmd(const std::string& verb, const std::string& rest) {
  // Verb first, then its options.
  const std::string b = Base();
  const std::string cli = test::CliPath();
  return cli + " " + verb + b.substr(cli.size()) + " " + rest;
}

TEST(RunChat, RunIsDeterministicForASeed) {
  std::string a, b, err;
  ASSERT_EQ(test::RunCommand(Cmd("run", "-p 'Hello there' -n 12 --temp 0.9 --seed 7"), &a, &err), 0)
      << err;
  ASSERT_EQ(test::RunCommand(Cmd("run", "-p 'Hello there' -n 12 --temp 0.9 --seed 7"), &b, &err), 0)
      << err;
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a.empty());
  std::string g1, g2;
  ASSERT_EQ(test::RunCommand(Cmd("run", "-p 'Hello' -n 6 --temp 0"), &g1, &err), 0) << err;
  ASSERT_EQ(
      test::RunCommand(Cmd("run", "-p 'Hello' -n 6 --temp 0 --system 'Be brief.'"), &g2, &err), 0)
      << err;
  EXPECT_FALSE(g1.empty());
}

TEST(RunChat, ChatResetAndQuit) {
  std::string out, err;
  ASSERT_EQ(test::RunCommand("printf 'hi\\n/reset\\nhello again\\n/quit\\nnever read\\n' | " +
                                 Cmd("chat", "-n 4 --temp 0"),
                             &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("(conversation cleared)"), std::string::npos) << out;
}

TEST(RunChat, ModelWithoutTokenizerFails) {
  std::string out, err;
  const int rc = test::RunCommand(test::CliPath() + " run --synthetic " + test::SourceDir() +
                                      "/tests/server/tiny_config.json -p hi",
                                  &out, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("tokenizer"), std::string::npos) << err;
}

}  // namespace
}  // namespace es
