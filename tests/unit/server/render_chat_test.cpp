// The default model builder's chat rendering (model_loader.cpp) bounds the depth of the JSON it
// converts for the template by itself (issue 23): nlohmann's json -> ordered_json conversion
// recurses once per level, and RenderChat relied on the request parser's depth limit alone. A
// caller without that limit (the library used directly) overflowed the stack.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/server/server.h"
#include "test_util.h"

namespace es {
namespace {

using nlohmann::json;

// [[[...]]] `depth` levels deep, built without recursion.
json Nested(int depth) {
  json v = json::array();
  for (int i = 1; i < depth; ++i) {
    json outer = json::array();
    outer.push_back(std::move(v));
    v = std::move(outer);
  }
  return v;
}

std::shared_ptr<const TextModel> TinyText() {
  ModelEntry e;
  e.name = "tiny";
  e.synthetic = test::SourceDir() + "/tests/server/tiny_config.json";
  e.tokenizer = test::SourceDir() + "/tests/data/tiny_tokenizer";
  e.instances.clear();  // the text side only
  return DefaultModelBuilder()(e).text;
}

std::string RenderError(const TextModel& t, const json& messages, const json& tools,
                        const json& kwargs) {
  try {
    t.RenderChat(messages, tools, kwargs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RenderChat, DeepJsonIsOneErrorNotAStackOverflow) {
  const auto text = TinyText();
  const json messages = json::parse(R"([{"role":"user","content":"hi"}])");
  EXPECT_FALSE(text->RenderChat(messages, nullptr, nullptr).empty());
  // (Each deep value is moved into place: copying one would recurse too.)
  constexpr int kDeep = 300000;
  EXPECT_NE(RenderError(*text, messages, Nested(kDeep), nullptr)
                .find("chat template: tools nested deeper than 128 levels"),
            std::string::npos);
  json msg = messages;
  msg[0]["tool_calls"] = Nested(kDeep);
  EXPECT_NE(RenderError(*text, msg, nullptr, nullptr).find("messages nested deeper than 128"),
            std::string::npos);
  json kwargs = json::object();
  kwargs["x"] = Nested(kDeep);
  EXPECT_NE(RenderError(*text, messages, nullptr, kwargs)
                .find("chat_template_kwargs) nested deeper than 128"),
            std::string::npos);
  // Within the limit it renders.
  EXPECT_EQ(RenderError(*text, messages, Nested(100), nullptr), "");
}

}  // namespace
}  // namespace es
