// Tool call formats (server/tool_calls.h): parsing each shipped template's form, malformed calls
// left as content, and the required-call grammar: random walks under it always parse into a
// call whose arguments the tool's schema accepts.
#include <gtest/gtest.h>

#include <random>

#include "edgeseek/grammar/json_schema.h"
#include "edgeseek/grammar/matcher.h"
#include "server/tool_calls.h"

namespace es::server {
namespace {

using json = nlohmann::json;
const std::set<std::string> kNames = {"get_weather", "add"};

TEST(ToolCalls, HermesQwen) {
  auto p = ParseToolCalls(ToolFormat::kHermes,
                          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                          "</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}</tool_call>",
                          kNames);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json::parse(R"({"city":"Oslo"})"));
  EXPECT_EQ(p.calls[1].name, "add");
  // Malformed: bad JSON, unknown name, unclosed — all content, never an error.
  for (const char* bad : {"<tool_call>{\"name\": \"add\", \"arguments\": {</tool_call>",
                          "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"add\", \"arguments\": {}}", "no call at all"}) {
    auto q = ParseToolCalls(ToolFormat::kHermes, bad, kNames);
    EXPECT_TRUE(q.calls.empty()) << bad;
    EXPECT_EQ(q.content, bad);
  }
}

TEST(ToolCalls, DeepSeekBothForms) {
  const std::string r1 =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 2}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  auto p = ParseToolCalls(ToolFormat::kDeepSeek, r1, kNames);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "add");
  EXPECT_EQ(json::parse(p.calls[0].arguments)["city"], "Paris");
  const std::string v3 = "Sure<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  p = ParseToolCalls(ToolFormat::kDeepSeek, v3, kNames);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "Sure");
  EXPECT_TRUE(ParseToolCalls(ToolFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add", kNames).calls.empty());
}

TEST(ToolCalls, Llama3) {
  auto p = ParseToolCalls(ToolFormat::kLlama3, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}", kNames);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(ParseToolCalls(ToolFormat::kLlama3, "The answer is {\"name\": \"add\"}", kNames).calls.empty());
}

TEST(ToolCalls, FormatFromTemplateAndHoldBack) {
  EXPECT_EQ(DetectToolFormat("{{'<｜tool▁calls▁begin｜>'}}"), ToolFormat::kDeepSeek);
  EXPECT_EQ(DetectToolFormat("<tool_call>\\n{{ tool_call | tojson }}"), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat("{{- '<|python_tag|>' }}"), ToolFormat::kLlama3);
  EXPECT_EQ(DetectToolFormat("{{ messages }}"), ToolFormat::kNone);
  EXPECT_EQ(ToolCallStart(ToolFormat::kHermes, "abc <tool_c"), 4u);  // a partial marker is held
  EXPECT_EQ(ToolCallStart(ToolFormat::kHermes, "abc"), std::string::npos);
}

// The required-call grammar: every random walk over a byte vocabulary is a call that parses,
// to one of the tools, with arguments valid against that tool's schema.
TEST(ToolCalls, RequiredGrammarWalksAreValidCalls) {
  std::vector<ToolSpec> tools = {
      {"get_weather", nlohmann::ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},
          "unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false})")},
      {"add", nlohmann::ordered_json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
          "required":["a","b"]})")}};
  std::vector<std::string> bytes{""};
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kDeepSeek, ToolFormat::kLlama3}) {
    auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::ParseGbnf(ToolCallGbnf(f, tools)));
    for (uint64_t seed = 0; seed < 20; ++seed) {
      grammar::Matcher m(g, trie);
      std::mt19937_64 rng(seed);
      std::string text;
      for (int step = 0; step < 600 && !(m.accepting() && !m.can_continue()); ++step) {
        const auto& mask = m.Mask();
        std::vector<int32_t> ok;
        for (int32_t id = 0; id < trie->vocab_size(); ++id)
          if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) ok.push_back(id);
        ASSERT_FALSE(ok.empty()) << int(f) << " after: " << text << " accepting " << m.accepting();
        const int32_t id = ok[rng() % ok.size()];
        ASSERT_TRUE(m.Accept(id));
        text += bytes[size_t(id)];
      }
      if (!m.accepting()) continue;  // a long string: the token budget, not a failure
      auto p = ParseToolCalls(f, text, kNames);
      ASSERT_EQ(p.calls.size(), 1u) << text;
      const auto& spec = p.calls[0].name == "add" ? tools[1] : tools[0];
      const auto errors = grammar::SchemaModel::Parse(spec.parameters).Validate(json::parse(p.calls[0].arguments));
      EXPECT_TRUE(errors.empty()) << text;
    }
  }
}

}  // namespace
}  // namespace es::server
