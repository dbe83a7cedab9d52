// `edgeseek template --tokenizer DIR --messages FILE [--add-generation-prompt]`: renders a
// conversation with the model's chat template and prints the prompt exactly (no newline added).
// DIR holds tokenizer_config.json (or is that file; a chat_template.jinja beside it takes
// precedence, as in transformers). FILE holds a JSON array of messages, or an object
// {"messages": [...], "tools": [...], <other template variables>...}.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/chat_template.h"
#include "verb.h"

namespace es::tools {
namespace {

std::string ReadText(const std::filesystem::path& p, const char* what) {
  std::ifstream f(p, std::ios::binary);
  ES_CHECK(f, what, " '", p.string(), "': cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::ordered_json ReadJson(const std::filesystem::path& p, const char* what) {
  const std::string text = ReadText(p, what);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(what, " '", p.string(), "': invalid JSON: ", e.what());
  }
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

int RunTemplate(const std::string& tokenizer, const std::string& messages_path, bool add_gen) {
  const TemplateConfig cfg = LoadTemplateConfig(tokenizer);
  const std::string& source = cfg.chat_template;
  ES_CHECK(!source.empty(), "'", tokenizer,
           "' has no chat_template (tokenizer_config.json or chat_template.jinja)");

  ChatTemplateInputs in;
  in.add_generation_prompt = add_gen;
  in.bos_token = cfg.bos_token;
  in.eos_token = cfg.eos_token;
  nlohmann::ordered_json doc = ReadJson(messages_path, "messages file");
  if (doc.is_object()) {
    ES_CHECK(doc.contains("messages"), "messages file '", messages_path,
             "': an object must have a \"messages\" array");
    in.extra = nlohmann::ordered_json::object();
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() == "messages")
        in.messages = it.value();
      else if (it.key() == "tools")
        in.tools = it.value();
      else
        in.extra[it.key()] = it.value();
    }
  } else {
    in.messages = doc;
  }
  ES_CHECK(in.messages.is_array(), "messages file '", messages_path,
           "': expected a JSON array of messages or {\"messages\": [...]}");
  std::string out;
  try {
    out = ChatTemplate(source).Render(in);
  } catch (const jinja::RaisedError& e) {
    Fail("chat template raised an error: ", OneLine(e.what()));
  } catch (const Error& e) {
    Fail(OneLine(e.what()));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto tokenizer = std::make_shared<std::string>();
  auto messages = std::make_shared<std::string>();
  auto add_gen = std::make_shared<bool>(false);
  sub.add_option("--tokenizer", *tokenizer, "folder with tokenizer_config.json, or that file")
      ->required();
  sub.add_option("--messages", *messages,
                 "JSON file: an array of {role, content} messages, or {\"messages\": [...], "
                 "\"tools\": [...], other template variables}")
      ->required();
  sub.add_flag("--add-generation-prompt", *add_gen, "end with the assistant turn header");
  return [=] { return RunTemplate(*tokenizer, *messages, *add_gen); };
}

VerbRegistrar registrar("template", "render a conversation with the model's chat template", Setup);

}  // namespace
}  // namespace es::tools
