// Tool calls: the call formats of the chat templates we ship, parsed out of a model's text into
// OpenAI `tool_calls`, and the grammar that makes a model write a valid call (tool_choice
// "required" or a named function):
//   kHermes   (Qwen2.5 / Qwen3)     <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   kDeepSeek (DeepSeek-V3 / R1)    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//                                   \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                                   (V3-0324's N<｜tool▁sep｜>{...} form is parsed too)
//   kLlama3   (Llama 3.1)           [<|python_tag|>]{"name": N, "parameters": {...}} as the whole text
// A call that does not parse (bad JSON, an unknown function) leaves the text as content: auto
// mode never fails a request over what the model wrote.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace es::server {

enum class ToolFormat { kNone, kHermes, kDeepSeek, kLlama3 };
// From the chat template's text (the markers it writes for assistant tool calls).
ToolFormat DetectToolFormat(const std::string& chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedOutput {
  std::string content;         // text outside the calls
  std::vector<ToolCall> calls; // empty: no (valid) call
};
ParsedOutput ParseToolCalls(ToolFormat f, const std::string& text, const std::set<std::string>& names);

// Where a call may begin in `text`: the offset of the first start marker (or of a possible
// partial one at the end), so a stream can hold that text back; npos when none.
size_t ToolCallStart(ToolFormat f, const std::string& text);

// Validated request tools: names and parameter schemas (an object schema when absent).
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;
};
// GBNF of exactly one call to one of `tools` (all of them for "required", one when named) in
// format f, the arguments following each tool's parameters schema. es::Error if unsupported.
std::string ToolCallGbnf(ToolFormat f, const std::vector<ToolSpec>& tools);

}  // namespace es::server
