// ChatTemplate and ReadTemplateConfig (see chat_template.h).
#include "edgeseek/internal/tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"

namespace es {

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), template_(source_, "chat template") {}

namespace {

// Fails when `j` nests arrays/objects deeper than jinja::kMaxContextDepth, without recursing
// (copying or converting such JSON recursively is what would overflow the stack).
template <class Json>
void CheckDepth(const Json& j, const char* what) {
  std::vector<std::pair<const Json*, int>> todo{{&j, 1}};
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    ES_CHECK(depth < jinja::kMaxContextDepth, "chat template: ", what, " nested deeper than ",
             jinja::kMaxContextDepth, " levels");
    for (const auto& x : *v) todo.emplace_back(&x, depth + 1);
  }
}

}  // namespace

nlohmann::ordered_json ToTemplateInput(const nlohmann::json& j, const char* what) {
  CheckDepth(j, what);
  return nlohmann::ordered_json(j);  // recursion now bounded by kMaxContextDepth
}

std::string ChatTemplate::Render(const ChatTemplateInputs& in) const {
  ES_CHECK(in.messages.is_array(), "chat template: messages must be a JSON array");
  CheckDepth(in.messages, "messages");
  CheckDepth(in.tools, "tools");
  CheckDepth(in.extra, "extra variables (chat_template_kwargs)");
  ES_CHECK(in.tools.is_null() || in.tools.is_array(),
           "chat template: tools must be null or an array");
  ES_CHECK(in.extra.is_null() || in.extra.is_object(),
           "chat template: extra variables must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (!in.bos_token.empty()) ctx["bos_token"] = in.bos_token;
  if (!in.eos_token.empty()) ctx["eos_token"] = in.eos_token;
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  if (in.extra.is_object())
    for (auto it = in.extra.begin(); it != in.extra.end(); ++it) ctx[it.key()] = it.value();
  return template_.Render(ctx, in.limits);
}

namespace {

std::string TokenContent(const nlohmann::ordered_json& cfg, const char* field) {
  auto it = cfg.find(field);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    ES_CHECK(c != it->end() && c->is_string(), "tokenizer_config.json: field '", field,
             "' is an object without a string 'content'");
    return c->get<std::string>();
  }
  Fail("tokenizer_config.json: field '", field, "' must be a string or {\"content\": ...}, got ",
       it->type_name());
}

}  // namespace

TemplateConfig ReadTemplateConfig(const nlohmann::ordered_json& cfg) {
  ES_CHECK(cfg.is_object(), "tokenizer_config.json: expected a JSON object at the top level");
  TemplateConfig out;
  out.bos_token = TokenContent(cfg, "bos_token");
  out.eos_token = TokenContent(cfg, "eos_token");
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return out;
  if (it->is_string()) {
    out.chat_template = it->get<std::string>();
    return out;
  }
  ES_CHECK(it->is_array(),
           "tokenizer_config.json: field 'chat_template' must be a string or a list "
           "of {\"name\", \"template\"}, got ",
           it->type_name());
  std::string names;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& e = (*it)[i];
    ES_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() &&
                 e.contains("template") && e["template"].is_string(),
             "tokenizer_config.json: chat_template[", i,
             "] must be {\"name\": str, \"template\": str}");
    const std::string name = e["name"].get<std::string>();
    if (name == "default") {
      out.chat_template = e["template"].get<std::string>();
      return out;
    }
    names += (names.empty() ? "" : ", ") + name;
  }
  Fail("tokenizer_config.json: chat_template lists several templates (", names,
       ") but none is named 'default'");
}

static std::string ReadWholeFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  ES_CHECK(f, "'", p.string(), "': cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TemplateConfig LoadTemplateConfig(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path cfg_path = path;
  if (fs::is_directory(cfg_path)) cfg_path /= "tokenizer_config.json";
  ES_CHECK(fs::exists(cfg_path), "tokenizer config '", cfg_path.string(), "' does not exist");
  nlohmann::ordered_json cfg;
  const std::string text = ReadWholeFile(cfg_path);
  json_field::CheckDepth(text, "'" + cfg_path.string() + "'");
  try {
    cfg = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail("'", cfg_path.string(), "': invalid JSON: ", e.what());
  }
  TemplateConfig out;
  try {
    out = ReadTemplateConfig(cfg);
  } catch (const Error& e) {
    Fail(cfg_path.string(), ": ", e.what());
  }
  const fs::path jinja_path = cfg_path.parent_path() / "chat_template.jinja";
  if (fs::exists(jinja_path)) out.chat_template = ReadWholeFile(jinja_path);
  return out;
}

TemplateConfig ReadTemplateConfig(const nlohmann::json& cfg) {
  return ReadTemplateConfig(nlohmann::ordered_json(cfg));
}

}  // namespace es
