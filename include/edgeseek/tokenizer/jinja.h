// Jinja2 template engine for chat templates: a lexer, parser and interpreter that render the
// Jinja subset real chat templates use exactly as jinja2 does inside transformers'
// apply_chat_template (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
// loopcontrols extension; tojson = json.dumps(ensure_ascii=False); raise_exception and
// strftime_now globals). Values follow Python semantics; the context is JSON, insertion order kept.
//
// Errors: a malformed template or an unsupported construct fails at construction with an
// es::Error "<name>:<line>:<col>: <what>"; a failure while rendering (undefined attribute access,
// type errors) names the position of the expression at fault. raise_exception(msg) throws a
// RaisedError whose message is exactly msg.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "edgeseek/core/error.h"

namespace es::jinja {


// Thrown by the template's raise_exception(message): what() is the message, verbatim.
class RaisedError : public es::Error {
 public:
  using es::Error::Error;
};

class Template {
 public:
  // Parses `source`; `name` prefixes error positions.
  explicit Template(const std::string& source, std::string name = "template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the members of `context` (a JSON object) as variables. Thread-safe: rendering
  // does not modify the template.
  std::string Render(const nlohmann::ordered_json& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace es::jinja
