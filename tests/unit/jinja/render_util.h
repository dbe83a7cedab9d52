// Helpers for the Jinja tests: render a template string with a JSON context, capture errors.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/tokenizer/jinja.h"

namespace es::test {

inline std::string Render(const std::string& tpl, const std::string& ctx_json = "{}") {
  return jinja::Template(tpl).Render(nlohmann::ordered_json::parse(ctx_json));
}

// The es::Error message rendering (or parsing) produces; "" if it succeeded.
inline std::string RenderError(const std::string& tpl, const std::string& ctx_json = "{}") {
  try {
    Render(tpl, ctx_json);
  } catch (const es::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace es::test
