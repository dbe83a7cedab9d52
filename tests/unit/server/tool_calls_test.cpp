// Tool call formats (server/tool_calls.h): parsing each shipped template's form, malformed calls
// left as content, and the required-call grammar: random walks under it always parse into a
// call whose arguments the tool's schema accepts; the stream parser (ToolCallStream) gives the
// same calls fed byte by byte, the name once the arguments open and the arguments as they come.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/grammar/matcher.h"

namespace es::server {
namespace {

using json = nlohmann::json;
const std::set<std::string> kNames = {"get_weather", "add"};

TEST(ToolCalls, HermesQwen) {
  auto p = ParseToolCalls(
      ToolFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n"
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
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"
      "\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": "
      "2}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  auto p = ParseToolCalls(ToolFormat::kDeepSeek, r1, kNames);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "add");
  EXPECT_EQ(json::parse(p.calls[0].arguments)["city"], "Paris");
  const std::string v3 =
      "Sure<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": "
      "1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  p = ParseToolCalls(ToolFormat::kDeepSeek, v3, kNames);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "Sure");
  EXPECT_TRUE(ParseToolCalls(ToolFormat::kDeepSeek,
                             "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add", kNames)
                  .calls.empty());
}

TEST(ToolCalls, Llama3) {
  auto p = ParseToolCalls(ToolFormat::kLlama3, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}",
                          kNames);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(ParseToolCalls(ToolFormat::kLlama3, "The answer is {\"name\": \"add\"}", kNames)
                  .calls.empty());
}

TEST(ToolCalls, FormatFromTemplateAndHoldBack) {
  EXPECT_EQ(DetectToolFormat("{{'<｜tool▁calls▁begin｜>'}}"), ToolFormat::kDeepSeek);
  EXPECT_EQ(DetectToolFormat("<tool_call>\\n{{ tool_call | tojson }}"), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat("{{- '<|python_tag|>' }}"), ToolFormat::kLlama3);
  EXPECT_EQ(DetectToolFormat("{{ messages }}"), ToolFormat::kNone);
  EXPECT_EQ(ToolCallStart(ToolFormat::kHermes, "abc <tool_c"), 4u);  // a partial marker is held
  EXPECT_EQ(ToolCallStart(ToolFormat::kHermes, "abc"), std::string::npos);
}

// What a stream gives for `text` fed in pieces of `step` bytes: the content, the calls (name
// and arguments joined), and for each call the offset of the text fed when its name and its
// first argument fragment came out.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<size_t> name_at, first_args_at;
  size_t arg_pieces = 0;
};
Streamed Stream(ToolFormat f, const std::string& text, size_t step) {
  ToolCallStream s(f, kNames);
  Streamed out;
  for (size_t at = 0; at < text.size() || at == 0; at += step) {
    const size_t end = std::min(text.size(), at + step);
    std::vector<ToolCallPiece> pieces;
    s.Feed(text.substr(at, end - at), end == text.size(), &out.content, &pieces);
    for (const auto& p : pieces) {
      if (!p.name.empty()) {
        EXPECT_EQ(p.index, int(out.calls.size()));
        EXPECT_TRUE(p.arguments.empty());
        out.calls.push_back({p.name, ""});
        out.name_at.push_back(end);
        out.first_args_at.push_back(std::string::npos);
        continue;
      }
      EXPECT_EQ(p.index, int(out.calls.size()) - 1) << "a fragment of an earlier call";
      if (out.calls.empty()) continue;
      if (out.first_args_at.back() == std::string::npos) out.first_args_at.back() = end;
      out.calls.back().arguments += p.arguments;
      ++out.arg_pieces;
    }
    if (end == text.size()) break;
  }
  EXPECT_EQ(s.calls(), int(out.calls.size()));
  return out;
}

std::string TrimWs(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n\r\t");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \n\r\t") - b + 1);
}

// A stream fed in any piece size gives what the whole text parses into: the same calls (same
// arguments as JSON) and the same content.
void ExpectStreamMatchesParse(ToolFormat f, const std::string& text) {
  const ParsedOutput whole = ParseToolCalls(f, text, kNames);
  for (size_t step : {size_t(1), size_t(2), size_t(3), size_t(7), text.size()}) {
    const Streamed st = Stream(f, text, step);
    ASSERT_EQ(st.calls.size(), whole.calls.size()) << "step " << step << ": " << text;
    for (size_t i = 0; i < st.calls.size(); ++i) {
      EXPECT_EQ(st.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(json::parse(st.calls[i].arguments), json::parse(whole.calls[i].arguments))
          << st.calls[i].arguments;
    }
    EXPECT_EQ(TrimWs(st.content), TrimWs(whole.content)) << "step " << step << ": " << text;
  }
}

TEST(ToolCallStream, ArgumentsComeTokenByToken) {
  const std::string hermes =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
      "\"days\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":\"}\\\"{\"}}</"
      "tool_call>";
  const std::string deepseek =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"
      "\"city\": \"Paris\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": "
      "2}\n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  const std::string deepseek_v3 =
      "Sure<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": {\"b\": "
      "1}}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const std::string llama =
      "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 22}}";
  const std::pair<ToolFormat, std::string> cases[] = {
      {ToolFormat::kHermes, hermes},
      {ToolFormat::kDeepSeek, deepseek},
      {ToolFormat::kDeepSeek, deepseek_v3},
      {ToolFormat::kLlama3, llama},
      {ToolFormat::kLlama3, "{\"name\": \"add\", \"arguments\": {}}"}};
  for (const auto& [f, text] : cases) {
    ExpectStreamMatchesParse(f, text);
    // Byte by byte: the name comes out as soon as the arguments open, the arguments in many
    // fragments, each call's before the text has reached its end.
    const Streamed st = Stream(f, text, 1);
    ASSERT_FALSE(st.calls.empty()) << text;
    size_t search = 0;
    for (size_t i = 0; i < st.calls.size(); ++i) {
      const size_t args_open = text.find('{', text.find(st.calls[i].name, search));
      EXPECT_EQ(st.name_at[i], args_open + 1) << text;
      EXPECT_EQ(st.first_args_at[i], args_open + 1) << text;
      search = args_open + st.calls[i].arguments.size();
    }
    EXPECT_EQ(st.arg_pieces, [&] {
      size_t n = 0;
      for (auto& c : st.calls) n += c.arguments.size();
      return n;
    }()) << "one fragment per byte fed";
  }
  EXPECT_EQ(Stream(ToolFormat::kHermes, hermes, 1).content, "Let me check.\n");
}

TEST(ToolCallStream, MalformedCallsAreContent) {
  // Never a call: text that looks like a marker, unknown tools, bad JSON, a head cut off.
  for (const char* text : {"<tools> are <tool_ nice",
                           "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\": \"add\", \"arguments\": 5}</tool_call>",
                           "<tool_call>{\"name\": \"add\"", "a < b <tool_call>"}) {
    ExpectStreamMatchesParse(ToolFormat::kHermes, text);
    EXPECT_EQ(Stream(ToolFormat::kHermes, text, 1).content, text);
  }
  for (const char* text :
       {"The answer is {\"name\": \"add\", \"parameters\": {}}", "{not json", "<b>hi</b>"}) {
    ExpectStreamMatchesParse(ToolFormat::kLlama3, text);
    EXPECT_EQ(Stream(ToolFormat::kLlama3, text, 2).content, text);
  }
  ExpectStreamMatchesParse(
      ToolFormat::kDeepSeek,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>rm<｜tool▁sep｜>{}<｜tool▁call▁end｜>");
  // A head in another key order cannot stream; it is held and parsed whole at the end.
  const std::string reordered =
      "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"add\"}</tool_call>";
  ExpectStreamMatchesParse(ToolFormat::kHermes, reordered);
  EXPECT_EQ(Stream(ToolFormat::kHermes, reordered, 1).calls.size(), 1u);
  // Cut off inside the arguments (max_tokens): the call ends as written, nothing becomes content.
  const Streamed cut =
      Stream(ToolFormat::kHermes, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1", 1);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, "{\"a\": 1");
  EXPECT_EQ(cut.content, "");
  // Text after the calls is content.
  const Streamed after = Stream(
      ToolFormat::kHermes, "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call> done", 3);
  ASSERT_EQ(after.calls.size(), 1u);
  EXPECT_EQ(after.content, " done");
}

// The required-call grammar: every random walk over a byte vocabulary is a call that parses,
// to one of the tools, with arguments valid against that tool's schema.
TEST(ToolCalls, RequiredGrammarWalksAreValidCalls) {
  std::vector<ToolSpec> tools = {
      {"get_weather", nlohmann::ordered_json::parse(
                          R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},
          "unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false})")},
      {"add", nlohmann::ordered_json::parse(
                  R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
          "required":["a","b"]})")}};
  std::vector<std::string> bytes{""};
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kDeepSeek, ToolFormat::kLlama3}) {
    auto g = std::make_shared<const grammar::Grammar>(
        grammar::Grammar::ParseGbnf(ToolCallGbnf(f, tools)));
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
      ExpectStreamMatchesParse(f, text);
      const auto& spec = p.calls[0].name == "add" ? tools[1] : tools[0];
      const auto errors =
          grammar::SchemaModel::Parse(spec.parameters).Validate(json::parse(p.calls[0].arguments));
      EXPECT_TRUE(errors.empty()) << text;
    }
  }
}

}  // namespace
}  // namespace es::server
