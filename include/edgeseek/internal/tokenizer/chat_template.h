// Chat templates: renders a conversation into the exact prompt text the model was trained on,
// by running the model's own Jinja chat_template (from tokenizer_config.json) the way
// transformers' apply_chat_template does: variables messages, tools (None when absent),
// documents (None), add_generation_prompt, bos_token/eos_token (when the config has them) and
// any extra variables (enable_thinking, date_string...), which override the others.
//
// JSON inputs are nlohmann::ordered_json so that tojson renders dict keys in the caller's order,
// as Python does; a plain nlohmann::json converts implicitly (its keys arrive sorted).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/tokenizer/jinja.h"

namespace es {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role","content",...}]
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;      // null or an array of tool schemas
  nlohmann::ordered_json extra;      // null or an object of extra template variables
  std::string bos_token, eos_token;  // "" = not defined for the template
  // The render budget (jinja.h): the defaults bound a hostile template for a server; the fuzz
  // target renders under a smaller one, so its executions stay short.
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // Parses the template; throws es::Error "chat template:<line>:<col>: ..." when malformed or
  // when it uses a construct the engine does not support.
  explicit ChatTemplate(std::string source);
  // Throws es::Error on render failures; jinja::RaisedError (an es::Error) carrying the
  // template's own message when the template calls raise_exception.
  std::string Render(const ChatTemplateInputs& in) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
};

// The template facts of a tokenizer_config.json: chat_template (a string, or a list of
// {"name","template"} from which "default" is taken), bos_token/eos_token (a string or an
// AddedToken object {"content": ...}; null or absent gives ""). chat_template is "" when absent.
struct TemplateConfig {
  std::string chat_template, bos_token, eos_token;
};
TemplateConfig ReadTemplateConfig(const nlohmann::json& tokenizer_config);

// `j` as a template input (ordered_json), for callers holding a plain nlohmann::json (the server's
// parsed request). nlohmann's conversion recurses once per nesting level, so the depth is checked
// first, without recursing: deeper than jinja::kMaxContextDepth is es::Error "chat template:
// <what> nested deeper than N levels" whatever limit the caller's parser had.
nlohmann::ordered_json ToTemplateInput(const nlohmann::json& j, const char* what);
TemplateConfig ReadTemplateConfig(const nlohmann::ordered_json& tokenizer_config);

// Reads the template facts of a model folder the way transformers loads them: `path` is a folder
// holding tokenizer_config.json, or that file itself; a chat_template.jinja beside it replaces the
// config's chat_template. Throws es::Error naming the file at fault (missing, invalid JSON).
TemplateConfig LoadTemplateConfig(const std::string& path);

}  // namespace es
