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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/core/error.h"

namespace es::jinja {

// Thrown by the template's raise_exception(message): what() is the message, verbatim.
class RaisedError : public es::Error {
 public:
  using es::Error::Error;
};

// The render budget: a render that goes past any of these ends with an es::Error naming the
// limit ("render budget exceeded: ... max_steps ..."), so that a hostile template (from a model
// file) cannot hang, exhaust memory or overflow the stack of the process rendering it. The
// defaults are far above what real chat templates need (a DeepSeek/Qwen template renders a
// 100-message chat in ~10^4 steps and a few times the conversation's bytes; the server's request
// body is 4 MiB at most) and keep the worst case near a second and a few hundred MB: 20M steps
// take ~0.8 s on one core; a value is checked before it is allocated.
// Arrays/objects nested deeper than this in a render context (messages, tools, extra variables)
// are rejected before conversion; real tool schemas nest a few levels.
inline constexpr int kMaxContextDepth = 128;

struct RenderLimits {
  uint64_t max_steps = 20'000'000;             // statements + expressions + elements visited
  size_t max_output_bytes = size_t(32) << 20;  // the rendered text (and any rendered block)
  size_t max_value_bytes = size_t(16) << 20;   // one string or container the template builds
  size_t max_alloc_bytes = size_t(256) << 20;  // all the strings and containers it builds
  int max_depth = 1000;  // nested statements + expressions + macro calls being evaluated
};

class Template {
 public:
  // Parses `source`; `name` prefixes error positions.
  explicit Template(const std::string& source, std::string name = "template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the members of `context` (a JSON object) as variables. Thread-safe: rendering
  // does not modify the template. JSON nested deeper than kMaxContextDepth is an es::Error.
  std::string Render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace es::jinja
