// OpenAI request parsing and validation (protocol.h). Ranges follow the OpenAI API reference:
// temperature [0, 2], top_p (0, 1], presence/frequency penalties [-2, 2], stop up to a few
// strings; extensions as vLLM names them (top_k, min_p, repetition_penalty, ignore_eos,
// priority, chat_template_kwargs).
#include "protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/grammar/json_schema.h"

namespace es::server {

json ErrorBody(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError BadRequest(const std::string& message, const std::string& param, const std::string& code) {
  ApiError e;
  e.status = 400;
  e.message = message;
  e.param = param;
  e.code = code;
  return e;
}

size_t JsonDepth(const std::string& text) { return json_field::Depth(text); }

json ParseBody(const std::string& body) {
  // Counted on the text, before anything builds or walks the tree: copying, dumping and the
  // chat template's value conversion all recurse once per level (issue 23: 30,000 nested '['
  // in "tools" overflowed a worker's stack).
  size_t depth = JsonDepth(body);
  if (depth > kMaxJsonDepth)
    throw BadRequest("request body nests " + std::to_string(depth) + " levels deep; at most " +
                         std::to_string(kMaxJsonDepth) + " are allowed",
                     {}, "json_too_deep");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for numbers like 1e999; ill-formed UTF-8 is a parse_error.
    throw BadRequest(std::string("request body is not valid JSON: ") + e.what(), {},
                     "invalid_json");
  }
  if (!j.is_object()) throw BadRequest("request body must be a JSON object", {}, "invalid_json");
  return j;
}

namespace {

bool Present(const json& b, const char* key) { return b.contains(key) && !b.at(key).is_null(); }

double Number(const json& b, const char* key, double lo, double hi, bool lo_open = false) {
  const json& v = b.at(key);
  if (!v.is_number()) throw BadRequest(std::string("'") + key + "' must be a number", key);
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    std::string range =
        std::string(lo_open ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() + "]";
    throw BadRequest(std::string("'") + key + "' must be in " + range + ", got " + v.dump(), key);
  }
  return x;
}

int64_t Integer(const json& b, const char* key, int64_t lo, int64_t hi) {
  const json& v = b.at(key);
  if (!v.is_number_integer())
    throw BadRequest(std::string("'") + key + "' must be an integer, got " + v.dump(), key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw BadRequest(std::string("'") + key + "' is out of range: " + v.dump(), key);
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw BadRequest(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + std::to_string(x),
                     key);
  return x;
}

bool Bool(const json& b, const char* key) {
  const json& v = b.at(key);
  if (!v.is_boolean()) throw BadRequest(std::string("'") + key + "' must be a boolean", key);
  return v.get<bool>();
}

std::string String(const json& b, const char* key) {
  const json& v = b.at(key);
  if (!v.is_string()) throw BadRequest(std::string("'") + key + "' must be a string", key);
  return v.get<std::string>();
}

void Unsupported(const json& b, const char* key, const char* why) {
  throw BadRequest(std::string("'") + key + "' " + why + " is not supported", key, "unsupported");
}

// response_format / grammar → the grammar the output must follow (null: none). Compiled here,
// per request, so that a bad schema or grammar is a 400 naming the fault before anything runs.
std::shared_ptr<const grammar::Grammar> ParseConstraint(const json& b,
                                                        const std::string& body_text) {
  std::string gbnf;
  const char* param = "response_format";
  if (Present(b, "response_format")) {
    const json& rf = b.at("response_format");
    if (!rf.is_object() || !rf.contains("type") || !rf.at("type").is_string())
      throw BadRequest("'response_format' must be an object with a 'type'", param);
    const std::string type = rf.at("type").get<std::string>();
    if (type == "json_object") {
      gbnf = grammar::JsonObjectGbnf();
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf.at("json_schema").is_object())
        throw BadRequest("'response_format.json_schema' must be an object with 'name' and 'schema'",
                         param);
      const json& js = rf.at("json_schema");
      if (!js.contains("name") || !js.at("name").is_string() ||
          js.at("name").get<std::string>().empty() || js.at("name").get<std::string>().size() > 64)
        throw BadRequest(
            "'response_format.json_schema.name' must be a string of 1 to 64 characters", param);
      if (js.contains("strict") && !js.at("strict").is_null() && !js.at("strict").is_boolean())
        throw BadRequest("'response_format.json_schema.strict' must be a boolean", param);
      // OpenAI makes 'schema' optional (any JSON then); a missing one is an open schema.
      // From the body text again, in key order (properties are generated in schema order).
      nlohmann::ordered_json schema = nlohmann::ordered_json::object();
      if (js.contains("schema")) {
        const auto ordered = nlohmann::ordered_json::parse(body_text, nullptr, false);
        schema = !ordered.is_discarded() && ordered.contains("response_format")
                     ? ordered.at("response_format").at("json_schema").at("schema")
                     : nlohmann::ordered_json::parse(js.at("schema").dump());
      }
      try {
        gbnf = grammar::SchemaToGbnf(grammar::SchemaModel::Parse(schema));
      } catch (const Error& e) {
        throw BadRequest(std::string("'response_format.json_schema.schema': ") + e.what(), param,
                         "invalid_schema");
      }
    } else if (type != "text") {
      throw BadRequest(
          "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '" + type +
              "'",
          param);
    }
  }
  if (Present(b, "grammar")) {
    if (!gbnf.empty())
      throw BadRequest("'grammar' and a JSON 'response_format' cannot be used together", "grammar");
    gbnf = String(b, "grammar");
    param = "grammar";
    if (gbnf.empty()) throw BadRequest("'grammar' is empty", param);
  }
  if (gbnf.empty()) return nullptr;
  try {
    return std::make_shared<const grammar::Grammar>(grammar::Grammar::ParseGbnf(gbnf));
  } catch (const Error& e) {
    // A schema's grammar fails here only when no value can satisfy the schema.
    throw BadRequest(std::string("'") + param + "': " + e.what(), param,
                     param == std::string("grammar") ? "invalid_grammar" : "invalid_schema");
  }
}

GenParams ParseGen(const json& b, const ProtocolLimits& lim, bool chat,
                   const std::string& body_text) {
  GenParams g;
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    if (!Present(b, key)) continue;
    g.max_tokens = int(Integer(b, key, 1, lim.max_tokens));
    break;
  }
  g.sampling.temperature = 1.0f;
  if (Present(b, "temperature")) g.sampling.temperature = float(Number(b, "temperature", 0, 2));
  if (Present(b, "top_p")) g.sampling.top_p = float(Number(b, "top_p", 0, 1, /*lo_open=*/true));
  if (Present(b, "top_k")) {
    int64_t k = Integer(b, "top_k", -1, 1 << 20);
    g.sampling.top_k = k < 0 ? 0 : int(k);
  }
  if (Present(b, "min_p")) g.sampling.min_p = float(Number(b, "min_p", 0, 1));
  if (Present(b, "presence_penalty"))
    g.sampling.presence_penalty = float(Number(b, "presence_penalty", -2, 2));
  if (Present(b, "frequency_penalty"))
    g.sampling.frequency_penalty = float(Number(b, "frequency_penalty", -2, 2));
  if (Present(b, "repetition_penalty"))
    g.sampling.repeat_penalty = float(Number(b, "repetition_penalty", 0, 10, /*lo_open=*/true));
  if (Present(b, "seed")) {
    g.sampling.seed = uint64_t(Integer(b, "seed", std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max()));
    g.seed_given = true;
  }
  if (Present(b, "stop")) {
    const json& s = b.at("stop");
    std::vector<std::string> stops;
    if (s.is_string()) {
      stops.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (int(s.size()) > lim.max_stop)
        throw BadRequest("'stop' has " + std::to_string(s.size()) + " entries, at most " +
                             std::to_string(lim.max_stop) + " are allowed",
                         "stop");
      for (auto& x : s) {
        if (!x.is_string()) throw BadRequest("'stop' entries must be strings", "stop");
        stops.push_back(x.get<std::string>());
      }
    } else {
      throw BadRequest("'stop' must be a string or an array of strings", "stop");
    }
    for (auto& x : stops) {
      if (x.empty()) throw BadRequest("'stop' strings must not be empty", "stop");
      if (x.size() > lim.max_stop_len) throw BadRequest("'stop' string too long", "stop");
      g.stop.push_back(x);
    }
  }
  if (Present(b, "stream")) g.stream = Bool(b, "stream");
  if (Present(b, "stream_options")) {
    const json& so = b.at("stream_options");
    if (!so.is_object()) throw BadRequest("'stream_options' must be an object", "stream_options");
    if (!g.stream)
      throw BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (Present(so, "include_usage")) {
      if (!so.at("include_usage").is_boolean())
        throw BadRequest("'stream_options.include_usage' must be a boolean",
                         "stream_options.include_usage");
      g.include_usage = so.at("include_usage").get<bool>();
    }
  }
  if (Present(b, "n") && Integer(b, "n", 1, 128) != 1) Unsupported(b, "n", "other than 1");
  if (Present(b, "priority")) {
    const json& p = b.at("priority");
    if (!p.is_string() && !p.is_number_integer())
      throw BadRequest("'priority' must be a class name or an integer", "priority");
    g.priority = p;
  }
  if (Present(b, "ignore_eos")) g.ignore_eos = Bool(b, "ignore_eos");
  // The sampler has no per-token bias; refused rather than ignored, so a client that relies on
  // it (banning a token, forcing a choice) learns that it had no effect. An empty map asks for
  // nothing and is accepted.
  if (Present(b, "logit_bias")) {
    const json& lb = b.at("logit_bias");
    if (!lb.is_object())
      throw BadRequest("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    if (!lb.empty()) Unsupported(b, "logit_bias", "with entries");
  }
  if (Present(b, "user")) String(b, "user");
  if (Present(b, "metadata")) {
    const json& md = b.at("metadata");
    if (!md.is_object()) throw BadRequest("'metadata' must be an object of strings", "metadata");
    if (md.size() > 16) throw BadRequest("'metadata' has more than 16 keys", "metadata");
    for (auto it = md.begin(); it != md.end(); ++it) {
      if (it.key().size() > 64)
        throw BadRequest("'metadata' key longer than 64 characters", "metadata");
      if (!it.value().is_string() || it.value().get_ref<const std::string&>().size() > 512)
        throw BadRequest("'metadata." + it.key() + "' must be a string of at most 512 characters",
                         "metadata");
      g.metadata.emplace_back(it.key(), it.value().get<std::string>());
    }
  }
  g.grammar = ParseConstraint(b, body_text);
  if (chat) {
    const bool lp = Present(b, "logprobs") && Bool(b, "logprobs");
    if (Present(b, "top_logprobs")) {
      const int top = int(Integer(b, "top_logprobs", 0, kMaxTopLogprobs));
      if (!lp) throw BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      g.logprobs = top;
    } else if (lp) {
      g.logprobs = 0;
    }
  } else {
    if (Present(b, "logprobs")) g.logprobs = int(Integer(b, "logprobs", 0, kMaxTopLogprobs));
    if (Present(b, "echo") && Bool(b, "echo")) Unsupported(b, "echo", "true");
    if (Present(b, "suffix")) Unsupported(b, "suffix", "");
    if (Present(b, "best_of") && Integer(b, "best_of", 1, 128) != 1)
      Unsupported(b, "best_of", "other than 1");
  }
  return g;
}

std::string ModelField(const json& b) {
  if (!Present(b, "model")) return {};
  return String(b, "model");
}

// Content as a string: a string, or an array of {"type":"text","text":...} parts.
std::string ContentText(const json& c, const std::string& param) {
  if (c.is_null()) return {};
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    throw BadRequest("'" + param + "' must be a string or an array of parts", param);
  std::string text;
  for (auto& part : c) {
    if (!part.is_object() || !part.contains("type") || !part.at("type").is_string())
      throw BadRequest("'" + param + "' parts must be objects with a 'type'", param);
    if (part.at("type") != "text")
      throw BadRequest("'" + param + "' part type " + part.at("type").dump() + " is not supported",
                       param, "unsupported");
    if (!part.contains("text") || !part.at("text").is_string())
      throw BadRequest("'" + param + "' text part needs a string 'text'", param);
    text += part.at("text").get<std::string>();
  }
  return text;
}

// Each tool a function with a name and (optionally) a parameters schema the grammar compiler
// takes: a tool whose schema could not constrain a call is refused here, not at call time.
std::vector<ToolSpec> ParseTools(const json& tools, const std::string& body_text) {
  const auto ordered = body_text.empty() ? nlohmann::ordered_json()
                                         : nlohmann::ordered_json::parse(body_text, nullptr, false);
  std::vector<ToolSpec> specs;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("type") || t.at("type") != "function" ||
        !t.contains("function") || !t.at("function").is_object())
      throw BadRequest("'" + p + "' must be {\"type\": \"function\", \"function\": {...}}",
                       "tools");
    const json& f = t.at("function");
    const std::string name =
        f.contains("name") && f.at("name").is_string() ? f.at("name").get<std::string>() : "";
    bool ok = !name.empty() && name.size() <= 64;
    for (char c : name)
      ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    if (!ok)
      throw BadRequest("'" + p + ".function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                       "tools");
    for (const auto& s : specs)
      if (s.name == name)
        throw BadRequest("'" + p + ".function.name' '" + name + "' is used twice", "tools");
    ToolSpec spec{name, nlohmann::ordered_json{{"type", "object"}}};
    if (f.contains("parameters") && !f.at("parameters").is_null()) {
      spec.parameters =
          !ordered.is_discarded() && ordered.contains("tools") && ordered.at("tools").size() > i
              ? ordered.at("tools").at(i).at("function").at("parameters")
              : nlohmann::ordered_json::parse(f.at("parameters").dump());
      try {
        grammar::Grammar::ParseGbnf(
            grammar::SchemaToGbnf(grammar::SchemaModel::Parse(spec.parameters)));
      } catch (const Error& e) {
        throw BadRequest("'" + p + ".function.parameters': " + e.what(), "tools", "invalid_schema");
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

void ParseToolChoice(const json& b, ChatRequest* r) {
  if (!Present(b, "tool_choice")) return;
  const json& c = b.at("tool_choice");
  if (c.is_string()) {
    const std::string v = c.get<std::string>();
    if (v == "none")
      r->tool_choice = ToolChoice::kNone;
    else if (v == "auto")
      r->tool_choice = ToolChoice::kAuto;
    else if (v == "required")
      r->tool_choice = ToolChoice::kRequired;
    else
      throw BadRequest("'tool_choice' must be 'none', 'auto', 'required' or a named function",
                       "tool_choice");
  } else if (c.is_object() && c.contains("type") && c.at("type") == "function" &&
             c.contains("function") && c.at("function").is_object() &&
             c.at("function").contains("name") && c.at("function").at("name").is_string()) {
    r->tool_choice = ToolChoice::kNamed;
    r->tool_name = c.at("function").at("name").get<std::string>();
    bool known = false;
    for (const auto& s : r->tool_specs) known = known || s.name == r->tool_name;
    if (!known)
      throw BadRequest("'tool_choice' names '" + r->tool_name + "', which is not in 'tools'",
                       "tool_choice");
  } else {
    throw BadRequest(
        "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
        "\"function\": {\"name\": ...}}",
        "tool_choice");
  }
  if (r->tool_choice == ToolChoice::kRequired && r->tool_specs.empty())
    throw BadRequest("'tool_choice' is 'required' but there are no 'tools'", "tool_choice");
}

}  // namespace

ChatRequest ParseChatRequest(const json& b, const ProtocolLimits& lim,
                             const std::string& body_text) {
  ChatRequest r;
  r.model = ModelField(b);
  if (!Present(b, "messages")) throw BadRequest("'messages' is required", "messages");
  const json& msgs = b.at("messages");
  if (!msgs.is_array() || msgs.empty())
    throw BadRequest("'messages' must be a non-empty array", "messages");
  if (msgs.size() > lim.max_messages)
    throw BadRequest("'messages' has " + std::to_string(msgs.size()) + " entries; at most " +
                         std::to_string(lim.max_messages) + " are allowed",
                     "messages");
  r.messages = json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw BadRequest("'" + p + "' must be an object", p);
    if (!m.contains("role") || !m.at("role").is_string())
      throw BadRequest("'" + p + ".role' must be a string", p + ".role");
    std::string role = m.at("role").get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" &&
        role != "developer")
      throw BadRequest("'" + p +
                           ".role' must be one of system, developer, user, assistant, tool; got '" +
                           role + "'",
                       p + ".role");
    json out = {{"role", role == "developer" ? "system" : role}};
    bool has_tool_calls = m.contains("tool_calls") && m.at("tool_calls").is_array();
    if (!m.contains("content") || m.at("content").is_null()) {
      if (!(role == "assistant" && has_tool_calls))
        throw BadRequest("'" + p + ".content' is required", p + ".content");
      out["content"] = "";
    } else {
      out["content"] = ContentText(m.at("content"), p + ".content");
    }
    if (has_tool_calls) out["tool_calls"] = m.at("tool_calls");
    for (const char* k : {"name", "tool_call_id", "reasoning_content"})
      if (m.contains(k) && m.at(k).is_string()) out[k] = m.at(k);
    r.messages.push_back(std::move(out));
  }
  if (Present(b, "tools")) {
    if (!b.at("tools").is_array()) throw BadRequest("'tools' must be an array", "tools");
    if (b.at("tools").size() > lim.max_tools)
      throw BadRequest("'tools' has " + std::to_string(b.at("tools").size()) +
                           " entries; at most " + std::to_string(lim.max_tools) + " are allowed",
                       "tools");
    r.tools = b.at("tools");
    r.tool_specs = ParseTools(r.tools, body_text);
  }
  ParseToolChoice(b, &r);
  if (Present(b, "chat_template_kwargs")) {
    if (!b.at("chat_template_kwargs").is_object())
      throw BadRequest("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = b.at("chat_template_kwargs");
  }
  r.gen = ParseGen(b, lim, /*chat=*/true, body_text);
  return r;
}

CompletionRequest ParseCompletionRequest(const json& b, const ProtocolLimits& lim,
                                         const std::string& body_text) {
  CompletionRequest r;
  r.model = ModelField(b);
  if (!Present(b, "prompt")) throw BadRequest("'prompt' is required", "prompt");
  const json& p = b.at("prompt");
  auto ids_from = [&](const json& arr) {
    for (auto& x : arr) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int32_t>::max())
        throw BadRequest("'prompt' token ids must be non-negative integers", "prompt");
      r.prompt_ids.push_back(int32_t(x.get<int64_t>()));
    }
    r.prompt_is_ids = true;
  };
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    ids_from(p);
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_array() && !p[0].empty()) {
    ids_from(p[0]);
  } else if (p.is_array() && p.size() > 1) {
    throw BadRequest("'prompt' batches (several prompts) are not supported; send one per request",
                     "prompt", "unsupported");
  } else {
    throw BadRequest("'prompt' must be a string or a non-empty array of token ids", "prompt");
  }
  if (!r.prompt_is_ids && r.prompt_text.empty())
    throw BadRequest("'prompt' must not be empty", "prompt");
  r.gen = ParseGen(b, lim, /*chat=*/false, body_text);
  return r;
}

// ---- logprobs ----------------------------------------------------------------------------------
namespace {
double Finite(float lp) { return lp > -9999.0f ? double(lp) : -9999.0; }
json ByteList(const std::string& b) {
  json a = json::array();
  for (unsigned char c : b) a.push_back(int(c));
  return a;
}
// Token text as JSON can carry it (a token may end inside a UTF-8 character).
std::string Text(const std::string& b) {
  return json(b).dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string Unquote(const std::string& dumped) { return json::parse(dumped).get<std::string>(); }
}  // namespace

json ChatLogprobs(const std::vector<std::pair<int32_t, const TokenLogprobs*>>& tokens,
                  const std::function<std::string(int32_t)>& bytes_of) {
  json content = json::array();
  for (const auto& [id, lp] : tokens) {
    const std::string b = bytes_of(id);
    if (b.empty()) continue;
    json top = json::array();
    for (const auto& [alt, alp] : lp->top) {
      const std::string ab = bytes_of(alt);
      top.push_back(
          {{"token", Unquote(Text(ab))}, {"logprob", Finite(alp)}, {"bytes", ByteList(ab)}});
    }
    content.push_back({{"token", Unquote(Text(b))},
                       {"logprob", Finite(lp->logprob)},
                       {"bytes", ByteList(b)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json CompletionLogprobs(const std::vector<std::pair<int32_t, const TokenLogprobs*>>& tokens,
                        const std::function<std::string(int32_t)>& bytes_of, size_t offset0) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = offset0;
  for (const auto& [id, lp] : tokens) {
    const std::string b = bytes_of(id);
    if (b.empty()) continue;
    toks.push_back(Unquote(Text(b)));
    lps.push_back(Finite(lp->logprob));
    json top = json::object();
    for (const auto& [alt, alp] : lp->top) top[Unquote(Text(bytes_of(alt)))] = Finite(alp);
    tops.push_back(top);
    offs.push_back(off);
    off += b.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace es::server
