// The real chat templates shipped in tokenizer_config.json of DeepSeek-V3, Qwen3 and Llama 3.1
// (fetched by scripts/fetch_test_data.sh into .cache/tokenizers/; absent data fails the test).
// Expected prompts are written out by reading each template by hand, including its quirks
// (DeepSeek-V3's single tool call leaves the tool-calls block unclosed; Qwen3 drops reasoning of
// turns before the last user query). tests/unit/jinja/template_golden_test.cpp compares against
// transformers' own renderings.
#include "edgeseek/internal/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

namespace es::test {
namespace {

nlohmann::ordered_json LoadConfig(const std::string& name) {
  const std::string path = SourceDir() + "/.cache/tokenizers/" + name + "/tokenizer_config.json";
  std::ifstream f(path);
  if (!f) {
    ADD_FAILURE() << "missing test data " << path << ": run scripts/fetch_test_data.sh";
    return nullptr;
  }
  return nlohmann::ordered_json::parse(f);
}

struct Loaded {
  TemplateConfig cfg;
  std::unique_ptr<ChatTemplate> tpl;
};

Loaded Load(const std::string& name) {
  Loaded l;
  auto j = LoadConfig(name);
  if (j.is_null()) return l;
  l.cfg = ReadTemplateConfig(j);
  l.tpl = std::make_unique<ChatTemplate>(l.cfg.chat_template);
  return l;
}

std::string RenderWith(const Loaded& l, const std::string& messages, bool add_gen,
                       const std::string& tools = "null", const std::string& extra = "null") {
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(messages);
  in.tools = nlohmann::ordered_json::parse(tools);
  in.extra = nlohmann::ordered_json::parse(extra);
  in.add_generation_prompt = add_gen;
  in.bos_token = l.cfg.bos_token;
  in.eos_token = l.cfg.eos_token;
  return l.tpl->Render(in);
}

TEST(ChatTemplate, Llama31) {
  Loaded l = Load("llama3_1");
  ASSERT_TRUE(l.tpl);
  EXPECT_EQ(l.cfg.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(l.cfg.eos_token, "<|eot_id|>");
  EXPECT_EQ(
      RenderWith(l,
                 R"([{"role": "system", "content": "Sys"}, {"role": "user", "content": " Hi \n"}])",
                 true),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(
      RenderWith(l, R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b "}])",
                 false),
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>");
  EXPECT_EQ(RenderWith(l, "[]", false), "");
}

TEST(ChatTemplate, DeepSeekV3) {
  Loaded l = Load("deepseek_v3");
  ASSERT_TRUE(l.tpl);
  const std::string bos = "<｜begin▁of▁sentence｜>";
  EXPECT_EQ(l.cfg.bos_token, bos);
  EXPECT_EQ(l.cfg.eos_token, "<｜end▁of▁sentence｜>");
  EXPECT_EQ(
      RenderWith(l, R"([{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"},
                              {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
                              {"role": "user", "content": "U2"}])",
                 true),
      bos +
          "S1\n\nS2<｜User｜>U1<｜Assistant｜>A1<｜end▁of▁sentence｜><｜User｜>U2<｜Assistant｜>");
  EXPECT_EQ(RenderWith(l, R"([{"role": "user", "content": "U"}])", false), bos + "<｜User｜>U");
  EXPECT_EQ(
      RenderWith(l, R"([{"role": "user", "content": "Weather?"},
                        {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                        {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "warm"},
                        {"role": "assistant", "content": "It is sunny."}])",
                 true),
      bos +
          "<｜User｜>Weather?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
          "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"
          "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>"
          "\n<｜tool▁output▁begin｜>warm<｜tool▁output▁end｜>"
          "<｜tool▁outputs▁end｜>It is sunny.<｜end▁of▁sentence｜><｜Assistant｜>");
  // Ending on tool output: the outputs block is closed and no generation prompt follows.
  EXPECT_EQ(
      RenderWith(l, R"([{"role": "user", "content": "q"},
                              {"role": "assistant", "content": null, "tool_calls": [
                                {"type": "function", "function": {"name": "f", "arguments": "{}"}},
                                {"type": "function", "function": {"name": "g", "arguments": "[]"}}]},
                              {"role": "tool", "content": "r"}])",
                 true),
      bos +
          "<｜User｜>q<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<"
          "｜tool▁sep｜>f"
          "\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g"
          "\n```json\n[]\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
          "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>r<｜tool▁output▁end｜><"
          "｜tool▁outputs▁end｜>");
  // A tool-call message without content renders `'<｜Assistant｜>' + undefined`: jinja2 raises.
  EXPECT_THROW(RenderWith(l, R"([{"role": "assistant", "tool_calls": []}])", false), es::Error);
}

TEST(ChatTemplate, Qwen3Basic) {
  Loaded l = Load("qwen3");
  ASSERT_TRUE(l.tpl);
  EXPECT_EQ(l.cfg.bos_token, "");
  EXPECT_EQ(l.cfg.eos_token, "<|im_end|>");
  const char* msgs =
      R"([{"role": "system", "content": "You are X"}, {"role": "user", "content": "Hi"}])";
  EXPECT_EQ(RenderWith(l, msgs, true),
            "<|im_start|>system\nYou are "
            "X<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(RenderWith(l, msgs, true, "null", R"({"enable_thinking": false})"),
            "<|im_start|>system\nYou are X<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(RenderWith(l, msgs, false, "null", R"({"enable_thinking": true})"),
            "<|im_start|>system\nYou are X<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3Reasoning) {
  Loaded l = Load("qwen3");
  ASSERT_TRUE(l.tpl);
  // Reasoning of turns before the last user query is dropped.
  EXPECT_EQ(RenderWith(l, R"([{"role": "user", "content": "Q1"},
                              {"role": "assistant", "content": "<think>\nR1\n</think>\n\nA1"},
                              {"role": "user", "content": "Q2"}])",
                       true),
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n");
  // The final assistant turn keeps it, normalized.
  EXPECT_EQ(RenderWith(l, R"([{"role": "user", "content": "Q"},
                              {"role": "assistant", "content": "<think>R</think>A"}])",
                       false),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</"
            "think>\n\nA<|im_end|>\n");
  EXPECT_EQ(RenderWith(l, R"([{"role": "user", "content": "Q"},
                              {"role": "assistant", "content": "A", "reasoning_content": "\nR\n"}])",
                       false),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</"
            "think>\n\nA<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3Tools) {
  Loaded l = Load("qwen3");
  ASSERT_TRUE(l.tpl);
  const char* tools =
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Get weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  const char* msgs = R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"temp\": 20}"}])";
  EXPECT_EQ(
      RenderWith(l, msgs, true, tools),
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
      "query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get "
      "weather\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
      "\"required\": [\"city\"]}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ReadTemplateConfigForms) {
  auto c = ReadTemplateConfig(nlohmann::json::parse(
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}],
          "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": null})"));
  EXPECT_EQ(c.chat_template, "D");
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "");
  EXPECT_EQ(ReadTemplateConfig(nlohmann::json::parse("{}")).chat_template, "");
  EXPECT_THROW(ReadTemplateConfig(
                   nlohmann::json::parse(R"({"chat_template": [{"name": "x", "template": "T"}]})")),
               es::Error);
  EXPECT_THROW(ReadTemplateConfig(nlohmann::json::parse(R"({"chat_template": 3})")), es::Error);
  EXPECT_THROW(ReadTemplateConfig(nlohmann::json::parse(R"({"bos_token": 3})")), es::Error);
  EXPECT_THROW(ReadTemplateConfig(nlohmann::json::parse("[]")), es::Error);
}

TEST(ChatTemplate, LoadTemplateConfigFromFolder) {
  const std::string dir = TempDir();
  EXPECT_THROW(LoadTemplateConfig(dir), es::Error);  // no tokenizer_config.json
  WriteFile(dir + "/tokenizer_config.json", "{not json");
  try {
    LoadTemplateConfig(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const es::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
  WriteFile(dir + "/tokenizer_config.json", R"({"chat_template": "A", "eos_token": "</s>"})");
  EXPECT_EQ(LoadTemplateConfig(dir).chat_template, "A");
  EXPECT_EQ(LoadTemplateConfig(dir + "/tokenizer_config.json").eos_token, "</s>");
  WriteFile(dir + "/chat_template.jinja", "B");
  EXPECT_EQ(LoadTemplateConfig(dir).chat_template, "B");
}

TEST(ChatTemplate, ContextVariables) {
  ChatTemplate t(
      "{{ tools is none }} {{ documents is none }} {{ bos_token is defined }} "
      "{{ eos_token }} {{ add_generation_prompt }} {{ date_string }} {{ messages|length }}");
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "x"}])");
  in.eos_token = "</s>";
  in.add_generation_prompt = true;
  in.extra = nlohmann::json::parse(R"({"date_string": "26 Jul 2024"})");
  EXPECT_EQ(t.Render(in), "True True False </s> True 26 Jul 2024 1");
  in.messages = "not an array";
  EXPECT_THROW(t.Render(in), es::Error);
  EXPECT_THROW(ChatTemplate("{% if %}"), es::Error);
}

}  // namespace
}  // namespace es::test
