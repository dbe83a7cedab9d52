// `edgeseek template`: exact output on stdout (nothing added), the accepted messages-file forms,
// and one-line errors with a non-zero exit code.
#include <gtest/gtest.h>

#include <chrono>

#include "test_util.h"

namespace es::test {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

TEST(TemplateCli, RendersExactly) {
  const std::string dir = TempDir();
  WriteFile(dir + "/m.json",
            R"([{"role": "system", "content": "You are X"}, {"role": "user", "content": "Hi"}])");
  const std::string tok = SourceDir() + "/.cache/tokenizers/qwen3";
  std::string out, err;
  int rc = RunCommand(CliPath() + " template --tokenizer " + Quote(tok) + " --messages " +
                          Quote(dir + "/m.json") + " --add-generation-prompt",
                      &out, &err);
  ASSERT_EQ(rc, 0) << err << " (missing data? run scripts/fetch_test_data.sh)";
  EXPECT_EQ(out,
            "<|im_start|>system\nYou are "
            "X<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Without the flag; tokenizer given as the config file itself.
  rc = RunCommand(CliPath() + " template --tokenizer " + Quote(tok + "/tokenizer_config.json") +
                      " --messages " + Quote(dir + "/m.json"),
                  &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(out, "<|im_start|>system\nYou are X<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(TemplateCli, ObjectFormWithToolsAndVariables) {
  const std::string dir = TempDir();
  WriteFile(dir + "/m.json",
            R"({"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": false,
                                 "tools": [{"type": "function", "function": {"name": "f", "z": 1, "a": 2}}]})");
  std::string out, err;
  int rc = RunCommand(CliPath() + " template --tokenizer " +
                          Quote(SourceDir() + "/.cache/tokenizers/qwen3") + " --messages " +
                          Quote(dir + "/m.json") + " --add-generation-prompt",
                      &out, &err);
  ASSERT_EQ(rc, 0) << err;
  // Tool keys keep the file's order (z before a), as Python dicts do.
  EXPECT_NE(out.find(R"({"type": "function", "function": {"name": "f", "z": 1, "a": 2}})"),
            std::string::npos)
      << out;
  const std::string suffix = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  ASSERT_GE(out.size(), suffix.size());
  EXPECT_EQ(out.substr(out.size() - suffix.size()), suffix);
}

TEST(TemplateCli, ChatTemplateListAndErrors) {
  const std::string dir = TempDir();
  WriteFile(
      dir + "/tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('Role bad is not allowed') }}{% endif %}[{{ m.content }}]{% endfor %}"}],
                "bos_token": "<s>"})");
  WriteFile(dir + "/ok.json",
            R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])");
  WriteFile(dir + "/bad.json", R"([{"role": "bad", "content": "a"}])");
  WriteFile(dir + "/broken.json", R"([{"role": )");
  std::string out, err;
  ASSERT_EQ(RunCommand(CliPath() + " template --tokenizer " + Quote(dir) + " --messages " +
                           Quote(dir + "/ok.json"),
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "[a][b]");

  auto expect_error = [&](const std::string& args, const std::string& needle) {
    int rc = RunCommand(CliPath() + " template " + args, &out, &err);
    EXPECT_NE(rc, 0) << args;
    EXPECT_EQ(out, "") << args;
    EXPECT_NE(err.find(needle), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << "error must be one line: " << err;
  };
  expect_error("--tokenizer " + Quote(dir) + " --messages " + Quote(dir + "/bad.json"),
               "Role bad is not allowed");
  expect_error("--tokenizer " + Quote(dir) + " --messages " + Quote(dir + "/broken.json"),
               "invalid JSON");
  expect_error("--tokenizer " + Quote(dir) + " --messages " + Quote(dir + "/none.json"),
               "cannot open");
  expect_error("--tokenizer " + Quote(dir + "/nowhere") + " --messages " + Quote(dir + "/ok.json"),
               "does not exist");

  WriteFile(dir + "/tokenizer_config.json",
            R"({"chat_template": "line one\n{% for m in messages %}{{ m.content }"})");
  expect_error("--tokenizer " + Quote(dir) + " --messages " + Quote(dir + "/ok.json"),
               "chat template:2:");
  WriteFile(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  expect_error("--tokenizer " + Quote(dir) + " --messages " + Quote(dir + "/ok.json"),
               "no chat_template");
}

TEST(TemplateCli, ChatTemplateJinjaFileTakesPrecedence) {
  const std::string dir = TempDir();
  WriteFile(dir + "/tokenizer_config.json", R"({"chat_template": "config {{ messages|length }}"})");
  WriteFile(dir + "/m.json", R"([{"role": "user", "content": "a"}])");
  std::string out, err;
  ASSERT_EQ(RunCommand(CliPath() + " template --tokenizer " + Quote(dir) + " --messages " +
                           Quote(dir + "/m.json"),
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "config 1");
  WriteFile(dir + "/chat_template.jinja", "file {{ messages[0].content }}\n");
  ASSERT_EQ(RunCommand(CliPath() + " template --tokenizer " + Quote(dir) + " --messages " +
                           Quote(dir + "/m.json"),
                       &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "file a");  // the file's trailing newline is dropped, as jinja2 does
}

// The render budget holds in the CLI too: a template that would loop 10^10 times fails on one
// line naming the limit, quickly.
TEST(TemplateCli, RenderBudgetEndsAHostileTemplate) {
  const std::string dir = TempDir();
  WriteFile(
      dir + "/tokenizer_config.json",
      R"({"chat_template": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"})");
  WriteFile(dir + "/m.json", R"([{"role": "user", "content": "a"}])");
  std::string out, err;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(RunCommand(CliPath() + " template --tokenizer " + Quote(dir) + " --messages " +
                           Quote(dir + "/m.json"),
                       &out, &err),
            0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_NE(err.find("render budget exceeded"), std::string::npos) << err;
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace es::test
