// Tool call formats (tool_calls.h).
#include "tool_calls.h"

#include "edgeseek/core/error.h"
#include "edgeseek/grammar/grammar.h"
#include "edgeseek/grammar/json_schema.h"
#include "edgeseek/runtime/text_stream.h"

namespace es::server {

using json = nlohmann::json;

namespace {

const std::string kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>";
const std::string kDsSep = "<｜tool▁sep｜>";

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \n\r\t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \n\r\t") - b + 1);
}

// {"name": N, <args_key>: {...}} → a call, when N is a known tool and the arguments an object.
bool CallFromJson(const std::string& text, const char* args_key, const std::set<std::string>& names, ToolCall* out) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.at("name").is_string()) return false;
  const std::string name = j.at("name").get<std::string>();
  if (!names.count(name)) return false;
  json args = j.contains(args_key) ? j.at(args_key) : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);  // some models quote it
  if (!args.is_object()) return false;
  *out = {name, args.dump()};
  return true;
}

ParsedOutput Hermes(const std::string& text, const std::set<std::string>& names) {
  ParsedOutput p;
  size_t at = text.find(kHermesOpen);
  if (at == std::string::npos) return {text, {}};
  p.content = Trim(text.substr(0, at));
  while (at != std::string::npos) {
    const size_t body = at + kHermesOpen.size();
    const size_t end = text.find(kHermesClose, body);
    if (end == std::string::npos) return {text, {}};
    ToolCall c;
    if (!CallFromJson(Trim(text.substr(body, end - body)), "arguments", names, &c)) return {text, {}};
    p.calls.push_back(std::move(c));
    const size_t next = text.find_first_not_of(" \n\r\t", end + kHermesClose.size());
    if (next == std::string::npos) break;
    if (text.compare(next, kHermesOpen.size(), kHermesOpen) != 0) return {text, {}};  // text after calls
    at = next;
  }
  return p;
}

ParsedOutput DeepSeek(const std::string& text, const std::set<std::string>& names) {
  const size_t begin = text.find(kDsCallsBegin);
  if (begin == std::string::npos) return {text, {}};
  ParsedOutput p;
  p.content = Trim(text.substr(0, begin));
  size_t at = begin + kDsCallsBegin.size();
  const size_t end_all = text.find(kDsCallsEnd, at);
  const std::string calls = text.substr(at, end_all == std::string::npos ? std::string::npos : end_all - at);
  size_t k = 0;
  while ((k = calls.find(kDsCallBegin, k)) != std::string::npos) {
    const size_t body = k + kDsCallBegin.size();
    const size_t end = calls.find(kDsCallEnd, body);
    if (end == std::string::npos) return {text, {}};
    const std::string one = calls.substr(body, end - body);
    const size_t sep = one.find(kDsSep);
    if (sep == std::string::npos) return {text, {}};
    std::string name = Trim(one.substr(0, sep)), args = one.substr(sep + kDsSep.size());
    if (name == "function") {  // V3 / R1: function<sep>NAME\n```json\n{...}\n```
      const size_t nl = args.find('\n');
      name = Trim(args.substr(0, nl));
      args = nl == std::string::npos ? "" : args.substr(nl + 1);
      const size_t f0 = args.find("```");
      if (f0 != std::string::npos) {
        const size_t s = args.find('\n', f0);
        const size_t f1 = args.rfind("```");
        if (s == std::string::npos || f1 <= s) return {text, {}};
        args = args.substr(s + 1, f1 - s - 1);
      }
    }
    const json a = json::parse(Trim(args), nullptr, false);
    if (!names.count(name) || a.is_discarded() || !a.is_object()) return {text, {}};
    p.calls.push_back({name, a.dump()});
    k = end + kDsCallEnd.size();
  }
  if (p.calls.empty()) return {text, {}};
  return p;
}

ParsedOutput Llama3(const std::string& text, const std::set<std::string>& names) {
  std::string t = Trim(text);
  if (t.rfind("<|python_tag|>", 0) == 0) t = Trim(t.substr(14));
  ToolCall c;
  if (t.empty() || t[0] != '{') return {text, {}};
  if (!CallFromJson(t, "parameters", names, &c) && !CallFromJson(t, "arguments", names, &c)) return {text, {}};
  return {"", {c}};
}

}  // namespace

ToolFormat DetectToolFormat(const std::string& tpl) {
  if (tpl.find("tool▁calls▁begin") != std::string::npos) return ToolFormat::kDeepSeek;
  if (tpl.find("<tool_call>") != std::string::npos) return ToolFormat::kHermes;
  if (tpl.find("<|python_tag|>") != std::string::npos || tpl.find("ipython") != std::string::npos)
    return ToolFormat::kLlama3;
  return ToolFormat::kNone;
}

ParsedOutput ParseToolCalls(ToolFormat f, const std::string& text, const std::set<std::string>& names) {
  switch (f) {
    case ToolFormat::kHermes: return Hermes(text, names);
    case ToolFormat::kDeepSeek: return DeepSeek(text, names);
    case ToolFormat::kLlama3: return Llama3(text, names);
    case ToolFormat::kNone: break;
  }
  return {text, {}};
}

size_t ToolCallStart(ToolFormat f, const std::string& text) {
  if (f == ToolFormat::kLlama3) {  // the whole text is the call: hold it from a leading '{'
    const size_t b = text.find_first_not_of(" \n\r\t");
    return b != std::string::npos && (text[b] == '{' || text.compare(b, 1, "<") == 0) ? b : std::string::npos;
  }
  const std::string& marker = f == ToolFormat::kHermes ? kHermesOpen : kDsCallsBegin;
  if (f == ToolFormat::kNone) return std::string::npos;
  const size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  const size_t partial = PartialSuffix(text, marker);
  return partial ? text.size() - partial : std::string::npos;
}

std::string ToolCallGbnf(ToolFormat f, const std::vector<ToolSpec>& tools) {
  ES_CHECK(f != ToolFormat::kNone, "this model's chat template has no tool call format");
  ES_CHECK(!tools.empty(), "no tools to call");
  std::string root = "root ::= ", rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string prefix = "t" + std::to_string(i) + "-";
    rules += grammar::SchemaToGbnf(grammar::SchemaModel::Parse(tools[i].parameters), prefix, /*with_basics=*/false);
    const std::string name = tools[i].name, args = prefix + "root";
    std::string call;
    if (f == ToolFormat::kHermes)
      call = grammar::GbnfLiteral("<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": ") + " " + args + " " +
             grammar::GbnfLiteral("}\n</tool_call>");
    else if (f == ToolFormat::kDeepSeek)
      call = grammar::GbnfLiteral(kDsCallsBegin + kDsCallBegin + "function" + kDsSep + name + "\n```json\n") + " " + args +
             " " + grammar::GbnfLiteral("\n```" + kDsCallEnd + kDsCallsEnd);
    else
      call = grammar::GbnfLiteral("{\"name\": \"" + name + "\", \"parameters\": ") + " " + args + " \"}\"";
    root += (i ? " | " : "") + call;
  }
  return root + "\n" + rules + grammar::JsonBasicsGbnf();
}

}  // namespace es::server
