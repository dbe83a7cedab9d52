// es::jinja::Template: source -> tokens -> tree once, then Render per context.
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/pystr.h"

namespace es::jinja {

struct Template::Impl {
  std::string name;
  Body body;
  DictData globals;
};

Template::Template(const std::string& source, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  if (size_t bad = FindInvalidUtf8(source); bad != std::string::npos) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < bad; ++i) {
      if (source[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    Fail(Where(impl_->name, int(line), int(col)), ": invalid UTF-8 in template source");
  }
  impl_->body = Parse(Lex(source, impl_->name), impl_->name);
  AddGlobals(impl_->globals);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::Render(const nlohmann::ordered_json& context,
                             const RenderLimits& limits) const {
  ES_CHECK(context.is_object() || context.is_null(), impl_->name,
           ": render context must be a JSON object");
  try {
    DictData ctx;
    if (context.is_object())
      for (auto it = context.begin(); it != context.end(); ++it)
        ctx.items.emplace_back(Value::String(it.key()), FromJson(it.value(), 1));
    Interpreter interp(impl_->name, limits);
    return interp.Render(impl_->body, ctx, impl_->globals);
  } catch (const OpError& e) {
    Fail(impl_->name, ": ", e.what());
  }
}

}  // namespace es::jinja
