// Tool calls: the call formats of the chat templates we ship, parsed out of a model's text into
// OpenAI `tool_calls`, and the grammar that makes a model write a valid call (tool_choice
// "required" or a named function):
//   kHermes   (Qwen2.5 / Qwen3)     <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
//   kDeepSeek (DeepSeek-V3 / R1) <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
//                                   \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                                   (V3-0324's N<｜tool▁sep｜>{...} form is parsed too)
//   kLlama3   (Llama 3.1)           [<|python_tag|>]{"name": N, "parameters": {...}} as the whole
//   text
// A call that does not parse (bad JSON, an unknown function) leaves the text as content: auto
// mode never fails a request over what the model wrote.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace es::server {

enum class ToolFormat { kNone, kHermes, kDeepSeek, kLlama3 };
// From the chat template's text (the markers it writes for assistant tool calls).
ToolFormat DetectToolFormat(const std::string& chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedOutput {
  std::string content;          // text outside the calls
  std::vector<ToolCall> calls;  // empty: no (valid) call
};
ParsedOutput ParseToolCalls(ToolFormat f, const std::string& text,
                            const std::set<std::string>& names);

// Where a call may begin in `text`: the offset of the first start marker (or of a possible
// partial one at the end), so a stream can hold that text back; npos when none.
size_t ToolCallStart(ToolFormat f, const std::string& text);

// ---- streaming: OpenAI's tool_calls deltas, written as the model writes the call ----
// A call's first piece carries its name (the caller adds the id and type), the next ones
// fragments of its arguments' JSON text, token by token. A stream commits to a call once its
// name is a known tool and its arguments object has opened; a call whose head does not parse
// that way (unknown name, "arguments" before "name", text that only looks like a marker) is held
// back and, at the end, parsed whole as ParseToolCalls does (a call, or content after all).
// Once committed, a call's arguments are what the model writes up to its closing brace: with
// tool_choice required or named the grammar makes them valid; in auto mode a client validates
// them, as with OpenAI's own streams (and a reply cut by max_tokens ends mid-arguments).
struct ToolCallPiece {
  int index = 0;          // the call's index in the reply
  std::string name;       // set on the call's first piece only
  std::string arguments;  // a fragment of the arguments (empty on the first piece)
};

class ToolCallStream {
 public:
  ToolCallStream(ToolFormat f, std::set<std::string> names) : f_(f), names_(std::move(names)) {}
  // Feeds the text written since the last call (`done`: the output has ended); appends the
  // plain text to *content and the calls' pieces to *pieces.
  void Feed(const std::string& text, bool done, std::string* content,
            std::vector<ToolCallPiece>* pieces);
  int calls() const { return calls_; }  // calls begun so far

  enum class Parse { kOk, kMore, kBad };  // (internal; public for the parsers in the .cpp)

 private:
  enum class State { kText, kHeader, kArgs, kTail, kBetween, kWhole, kAfter };
  Parse Header(std::string* name, size_t* args_at) const;  // from buf_'s start
  Parse Tail(size_t* len) const;
  bool StartsWithMarker() const;  // buf_ begins with the whole start marker of a call
  Parse Between(size_t* skip, bool* more_calls) const;
  // One state of Feed's machine each; false: wait for more text (or the end).
  bool StepText(bool done, std::string* content);
  bool StepHeader(bool done, std::string* content, std::vector<ToolCallPiece>* pieces);
  bool StepArgs(bool done, std::vector<ToolCallPiece>* pieces);
  bool StepTail(bool done);
  bool StepBetween(bool done);
  bool StepWhole(bool done, std::string* content, std::vector<ToolCallPiece>* pieces);
  void Emit(std::string* content) {
    content->append(buf_);
    buf_.clear();
  }

  ToolFormat f_;
  std::set<std::string> names_;
  State state_ = State::kText;
  std::string buf_;  // text not given out yet: from the current call's head (or its args)
  int calls_ = 0;
  bool wrote_text_ = false;  // Llama 3.1: a call is the whole text, so none after plain text
  int depth_ = 0;            // kArgs: the scanner's nesting depth, inside a string, after '\'
  bool in_string_ = false, escape_ = false;
};

// Validated request tools: names and parameter schemas (an object schema when absent).
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;
};
// GBNF of exactly one call to one of `tools` (all of them for "required", one when named) in
// format f, the arguments following each tool's parameters schema. es::Error if unsupported.
std::string ToolCallGbnf(ToolFormat f, const std::vector<ToolSpec>& tools);

}  // namespace es::server
