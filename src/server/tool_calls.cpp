// Tool call formats (tool_calls.h).
#include "tool_calls.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/runtime/text_stream.h"

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
bool CallFromJson(const std::string& text, const char* args_key, const std::set<std::string>& names,
                  ToolCall* out) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.at("name").is_string())
    return false;
  const std::string name = j.at("name").get<std::string>();
  if (!names.count(name)) return false;
  json args = j.contains(args_key) ? j.at(args_key) : json::object();
  if (args.is_string())
    args = json::parse(args.get<std::string>(), nullptr, false);  // some models quote it
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
    if (!CallFromJson(Trim(text.substr(body, end - body)), "arguments", names, &c))
      return {text, {}};
    p.calls.push_back(std::move(c));
    const size_t next = text.find_first_not_of(" \n\r\t", end + kHermesClose.size());
    if (next == std::string::npos) break;
    if (text.compare(next, kHermesOpen.size(), kHermesOpen) != 0)
      return {text, {}};  // text after calls
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
  const std::string calls =
      text.substr(at, end_all == std::string::npos ? std::string::npos : end_all - at);
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
  if (!CallFromJson(t, "parameters", names, &c) && !CallFromJson(t, "arguments", names, &c))
    return {text, {}};
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

ParsedOutput ParseToolCalls(ToolFormat f, const std::string& text,
                            const std::set<std::string>& names) {
  switch (f) {
    case ToolFormat::kHermes:
      return Hermes(text, names);
    case ToolFormat::kDeepSeek:
      return DeepSeek(text, names);
    case ToolFormat::kLlama3:
      return Llama3(text, names);
    case ToolFormat::kNone:
      break;
  }
  return {text, {}};
}

size_t ToolCallStart(ToolFormat f, const std::string& text) {
  if (f == ToolFormat::kLlama3) {  // the whole text is the call: hold it from a leading '{'
    const size_t b = text.find_first_not_of(" \n\r\t");
    return b != std::string::npos && (text[b] == '{' || text.compare(b, 1, "<") == 0)
               ? b
               : std::string::npos;
  }
  const std::string& marker = f == ToolFormat::kHermes ? kHermesOpen : kDsCallsBegin;
  if (f == ToolFormat::kNone) return std::string::npos;
  const size_t at = text.find(marker);
  if (at != std::string::npos) return at;
  const size_t partial = PartialSuffix(text, marker);
  return partial ? text.size() - partial : std::string::npos;
}

// ---- streaming ------------------------------------------------------------------------------
namespace {

using Parse = ToolCallStream::Parse;

// A resumable reader of a call's head or tail in text that may still grow: the first step that
// does not match makes it kBad, one that runs past the end kMore, and both stick.
struct Cursor {
  const std::string& s;
  size_t i = 0;
  Parse r = Parse::kOk;
  bool ok() const { return r == Parse::kOk; }
  bool AtEnd() {
    if (ok() && i >= s.size()) r = Parse::kMore;
    return !ok();
  }
  void Ws() {
    while (ok() && i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
      ++i;
  }
  void Lit(const std::string& lit) {
    if (!ok()) return;
    const size_t n = std::min(lit.size(), s.size() - i);
    if (s.compare(i, n, lit, 0, n) != 0)
      r = Parse::kBad;
    else if (n < lit.size())
      r = Parse::kMore;
    else
      i += n;
  }
  bool Next(char c) { return !AtEnd() && s[i] == c; }  // (kMore at the end)
  // A JSON string (names and keys: a bounded length).
  std::string Str() {
    if (AtEnd()) return {};
    if (s[i] != '"') {
      r = Parse::kBad;
      return {};
    }
    bool esc = false;
    size_t j = i + 1;
    for (; j < s.size() && j - i < 512; ++j) {
      if (esc)
        esc = false;
      else if (s[j] == '\\')
        esc = true;
      else if (s[j] == '"')
        break;
    }
    if (j >= s.size() || s[j] != '"') {
      r = j - i >= 512 ? Parse::kBad : Parse::kMore;
      return {};
    }
    const json v = json::parse(s.substr(i, j - i + 1), nullptr, false);
    if (v.is_discarded() || !v.is_string()) {
      r = Parse::kBad;
      return {};
    }
    i = j + 1;
    return v.get<std::string>();
  }
  // The text up to `stop` (at most `max` bytes), `stop` consumed.
  std::string Until(const std::string& stop, size_t max) {
    if (!ok()) return {};
    const size_t at = s.find(stop, i);
    if (at == std::string::npos || at - i > max) {
      r = s.size() - i > max ? Parse::kBad : Parse::kMore;
      return {};
    }
    std::string out = s.substr(i, at - i);
    i = at + stop.size();
    return out;
  }
};

// {"name": N, "<key>": — the head of a JSON call whose name comes first.
std::string JsonHead(Cursor& c, const std::set<std::string>& arg_keys) {
  c.Lit("{");
  c.Ws();
  const std::string k1 = c.Str();
  if (c.ok() && k1 != "name") c.r = Parse::kBad;
  c.Ws();
  c.Lit(":");
  c.Ws();
  std::string name = c.Str();
  c.Ws();
  c.Lit(",");
  c.Ws();
  const std::string k2 = c.Str();
  if (c.ok() && !arg_keys.count(k2)) c.r = Parse::kBad;
  c.Ws();
  c.Lit(":");
  c.Ws();
  return name;
}

}  // namespace

Parse ToolCallStream::Header(std::string* name, size_t* args_at) const {
  Cursor c{buf_};
  c.Ws();
  if (f_ == ToolFormat::kHermes) {
    c.Lit(kHermesOpen);
    c.Ws();
    *name = JsonHead(c, {"arguments"});
  } else if (f_ == ToolFormat::kLlama3) {
    if (c.Next('<')) {
      c.Lit("<|python_tag|>");
      c.Ws();
    }
    *name = JsonHead(c, {"parameters", "arguments"});
  } else {
    if (calls_ == 0) c.Lit(kDsCallsBegin);
    c.Ws();
    c.Lit(kDsCallBegin);
    const std::string pre = Trim(c.Until(kDsSep, 128));
    if (c.ok() && pre == "function") {  // V3 / R1: function<sep>NAME\n```json\n{
      *name = Trim(c.Until("\n", 256));
      c.Ws();
      if (c.Next('`')) {
        c.Lit("```");
        c.Until("\n", 16);
      }
    } else {  // V3-0324: NAME<sep>{
      *name = pre;
    }
    c.Ws();
  }
  if (!c.Next('{') && c.ok()) c.r = Parse::kBad;  // (kMore while the arguments have not opened)
  if (c.ok() && !names_.count(*name)) c.r = Parse::kBad;
  *args_at = c.i;
  return c.r;
}

bool ToolCallStream::StartsWithMarker() const {
  const size_t b = buf_.find_first_not_of(" \n\r\t");
  if (b == std::string::npos) return false;
  if (f_ == ToolFormat::kLlama3)
    return buf_[b] == '{' || buf_.compare(b, 14, "<|python_tag|>") == 0;
  const std::string& m = f_ == ToolFormat::kHermes ? kHermesOpen
                         : calls_ == 0             ? kDsCallsBegin
                                                   : kDsCallBegin;
  return buf_.compare(b, m.size(), m) == 0;
}

Parse ToolCallStream::Tail(size_t* len) const {
  Cursor c{buf_};
  c.Ws();
  if (f_ == ToolFormat::kHermes) {
    c.Lit("}");
    c.Ws();
    c.Lit(kHermesClose);
  } else if (f_ == ToolFormat::kLlama3) {
    c.Lit("}");
  } else {
    if (c.Next('`')) {
      c.Lit("```");
      c.Ws();
    }
    c.Lit(kDsCallEnd);
  }
  *len = c.i;
  return c.r;
}

Parse ToolCallStream::Between(size_t* skip, bool* more_calls) const {
  Cursor c{buf_};
  c.Ws();
  *skip = c.i;
  *more_calls = false;
  if (f_ == ToolFormat::kLlama3)
    return c.AtEnd() ? c.r : Parse::kBad;  // one call is the whole text
  if (f_ == ToolFormat::kHermes) {
    c.Lit(kHermesOpen);
    *more_calls = c.ok();
    return c.r;
  }
  Cursor next{buf_, c.i}, end{buf_, c.i};
  next.Lit(kDsCallBegin);
  end.Lit(kDsCallsEnd);
  if (next.ok()) {
    *more_calls = true;
    return Parse::kOk;
  }
  if (end.ok()) {
    *skip = end.i;  // the calls' end marker goes with the whitespace
    return Parse::kOk;
  }
  return next.r == Parse::kMore || end.r == Parse::kMore ? Parse::kMore : Parse::kBad;
}

// Text before a call: passes it on until a call may start.
bool ToolCallStream::StepText(bool done, std::string* content) {
  size_t at = std::string::npos;
  if (f_ == ToolFormat::kLlama3) {
    const size_t b = buf_.find_first_not_of(" \n\r\t");
    if (wrote_text_ || (b != std::string::npos && buf_[b] != '{' && buf_[b] != '<')) {
      state_ = State::kAfter;
      return true;
    }
    at = b == std::string::npos ? std::string::npos : 0;
    if (at == std::string::npos && !done) return false;  // only whitespace yet
  } else {
    at = ToolCallStart(f_, buf_);
  }
  if (at == std::string::npos) {
    if (!buf_.empty()) wrote_text_ = true;
    Emit(content);
    return false;
  }
  if (at > 0) {
    content->append(buf_, 0, at);
    buf_.erase(0, at);
    wrote_text_ = true;
  }
  state_ = State::kHeader;
  return true;
}

// A call's start marker and name.
bool ToolCallStream::StepHeader(bool done, std::string* content,
                                std::vector<ToolCallPiece>* pieces) {
  std::string name;
  size_t args_at = 0;
  const Parse r = Header(&name, &args_at);
  if (r == Parse::kMore) {
    if (!done) return false;
    state_ = State::kAfter;  // an unfinished head is text
    return true;
  }
  if (r == Parse::kBad && !StartsWithMarker()) {
    // Text that only began like a marker ("<tool" of "<tools>"): one byte is text, and
    // the search for a call goes on after it.
    content->append(buf_, 0, 1);
    buf_.erase(0, 1);
    wrote_text_ = true;
    state_ = f_ == ToolFormat::kLlama3 ? State::kAfter : State::kText;
    return true;
  }
  if (r == Parse::kBad) {
    state_ = calls_ == 0 ? State::kWhole : State::kAfter;
    return true;
  }
  pieces->push_back({calls_++, name, ""});
  buf_.erase(0, args_at);
  depth_ = 0;
  in_string_ = escape_ = false;
  state_ = State::kArgs;
  return true;
}

// The arguments, as they come, up to the object's closing brace.
bool ToolCallStream::StepArgs(bool done, std::vector<ToolCallPiece>* pieces) {
  size_t end = 0;
  bool closed = false;
  for (; end < buf_.size() && !closed; ++end) {
    const char ch = buf_[end];
    if (in_string_) {
      if (escape_)
        escape_ = false;
      else if (ch == '\\')
        escape_ = true;
      else if (ch == '"')
        in_string_ = false;
    } else if (ch == '"') {
      in_string_ = true;
    } else if (ch == '{' || ch == '[') {
      ++depth_;
    } else if (ch == '}' || ch == ']') {
      closed = --depth_ == 0;
    }
  }
  if (end > 0) {
    pieces->push_back({calls_ - 1, "", buf_.substr(0, end)});
    buf_.erase(0, end);
  }
  if (!closed) {
    if (!done) return false;
    state_ = State::kAfter;  // cut off (max_tokens): the call ends as written
    return true;
  }
  state_ = State::kTail;
  return true;
}

// The call's end marker.
bool ToolCallStream::StepTail(bool done) {
  size_t len = 0;
  const Parse r = Tail(&len);
  if (r == Parse::kMore) {
    if (!done) return false;
    buf_.clear();  // a closing marker cut off: nothing to show
    return false;
  }
  if (r == Parse::kBad) {
    state_ = State::kAfter;
    return true;
  }
  buf_.erase(0, len);
  state_ = State::kBetween;
  return true;
}

// Between calls: another call, or the end of the calls.
bool ToolCallStream::StepBetween(bool done) {
  size_t skip = 0;
  bool more_calls = false;
  const Parse r = Between(&skip, &more_calls);
  if (r == Parse::kMore) {
    if (done) buf_.clear();  // whitespace, or a marker cut off
    return false;
  }
  if (r == Parse::kBad) {
    state_ = State::kAfter;  // text after the calls
    return true;
  }
  buf_.erase(0, skip);
  state_ = more_calls ? State::kHeader : State::kAfter;
  return true;
}

// A format whose calls only parse whole: at the end, all at once.
bool ToolCallStream::StepWhole(bool done, std::string* content,
                               std::vector<ToolCallPiece>* pieces) {
  if (!done) return false;
  ParsedOutput p = ParseToolCalls(f_, buf_, names_);
  buf_.clear();
  content->append(p.content);
  for (auto& c : p.calls) {
    pieces->push_back({calls_, c.name, ""});
    pieces->push_back({calls_++, "", c.arguments});
  }
  state_ = State::kAfter;
  return false;
}

void ToolCallStream::Feed(const std::string& text, bool done, std::string* content,
                          std::vector<ToolCallPiece>* pieces) {
  buf_ += text;
  for (bool more = true; more;) {
    switch (state_) {
      case State::kText:
        more = StepText(done, content);
        break;
      case State::kHeader:
        more = StepHeader(done, content, pieces);
        break;
      case State::kArgs:
        more = StepArgs(done, pieces);
        break;
      case State::kTail:
        more = StepTail(done);
        break;
      case State::kBetween:
        more = StepBetween(done);
        break;
      case State::kWhole:
        more = StepWhole(done, content, pieces);
        break;
      case State::kAfter:
        return Emit(content);
    }
  }
}

namespace {
// The pieces joined in one allocation (operator+ chains make a temporary per step).
std::string Concat(std::initializer_list<std::string_view> parts) {
  size_t n = 0;
  for (std::string_view p : parts) n += p.size();
  std::string out;
  out.reserve(n);
  for (std::string_view p : parts) out.append(p);
  return out;
}
}  // namespace

std::string ToolCallGbnf(ToolFormat f, const std::vector<ToolSpec>& tools) {
  ES_CHECK(f != ToolFormat::kNone, "this model's chat template has no tool call format");
  ES_CHECK(!tools.empty(), "no tools to call");
  std::string root = "root ::= ", rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string prefix = "t" + std::to_string(i) + "-";
    rules += grammar::SchemaToGbnf(grammar::SchemaModel::Parse(tools[i].parameters), prefix,
                                   /*with_basics=*/false);
    const std::string name = tools[i].name, args = prefix + "root";
    std::string call;
    if (f == ToolFormat::kHermes)
      call = Concat({grammar::GbnfLiteral(
                         Concat({"<tool_call>\n{\"name\": \"", name, "\", \"arguments\": "})),
                     " ", args, " ", grammar::GbnfLiteral("}\n</tool_call>")});
    else if (f == ToolFormat::kDeepSeek)
      call = Concat(
          {grammar::GbnfLiteral(
               Concat({kDsCallsBegin, kDsCallBegin, "function", kDsSep, name, "\n```json\n"})),
           " ", args, " ", grammar::GbnfLiteral(Concat({"\n```", kDsCallEnd, kDsCallsEnd}))});
    else
      call = Concat({grammar::GbnfLiteral(Concat({"{\"name\": \"", name, "\", \"parameters\": "})),
                     " ", args, " \"}\""});
    root += i ? " | " : "";
    root += call;
  }
  return root + "\n" + rules + grammar::JsonBasicsGbnf();
}

}  // namespace es::server
