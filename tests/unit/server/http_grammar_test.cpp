// Constrained decoding through the HTTP API with the fake model (hash-of-history logits: an
// adversarial generator): response_format json_object / json_schema and GBNF 'grammar' on both
// endpoints; every output is valid; bad schemas and grammars are 400s naming the fault.
#include <gtest/gtest.h>
#include <httplib.h>

#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/server/server.h"
#include "fake_model.h"

namespace es {
namespace {

using json = nlohmann::json;

// The tiny server with room for 200-token JSON replies.
ServerConfig GrammarConfig() {
  ServerConfig c = test::TinyServerConfig();
  c.limits.max_tokens = 200;
  c.models[0].instances[0].context = 512;
  return c;
}
struct Running : test::LoadedServer {
  Running() : LoadedServer(GrammarConfig()) {}
};

json Chat(const json& extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "give me json"}}})},
            {"max_tokens", 200}};
  b.update(extra);
  return b;
}

const char* kSchema = R"({"type":"object","properties":{
    "name":{"type":"string","minLength":1,"maxLength":6},
    "age":{"type":"integer","minimum":0,"maximum":120},
    "pets":{"type":"array","items":{"enum":["cat","dog"]},"maxItems":2},
    "nick":{"type":["string","null"],"maxLength":3}},
  "required":["name","age","pets"],"additionalProperties":false})";

TEST(HttpGrammar, JsonSchemaOutputsAreAlwaysValid) {
  Running r;
  const auto model = grammar::SchemaModel::Parse(json::parse(kSchema));
  const json rf = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "person"}, {"schema", json::parse(kSchema)}, {"strict", true}}}};
  int valid = 0;
  for (int seed = 0; seed < 24; ++seed) {
    int st;
    json out = r.Post("/v1/chat/completions",
                      Chat({{"response_format", rf}, {"seed", seed}, {"temperature", 1.0}}), &st);
    ASSERT_EQ(st, 200) << out.dump();
    ASSERT_EQ(out["choices"][0]["finish_reason"], "stop") << out.dump();
    const std::string text = out["choices"][0]["message"]["content"];
    json doc = json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    const auto errors = model.Validate(doc);
    ASSERT_TRUE(errors.empty()) << text << ": " << errors.front();
    ++valid;
  }
  EXPECT_EQ(valid, 24);
}

TEST(HttpGrammar, JsonObjectGreedyAndCompletions) {
  Running r;
  int st;
  json out = r.Post("/v1/chat/completions",
                    Chat({{"response_format", {{"type", "json_object"}}},
                          {"temperature", 0},
                          {"max_tokens", 200}}),
                    &st);
  ASSERT_EQ(st, 200) << out.dump();
  const std::string text = out["choices"][0]["message"]["content"];
  if (out["choices"][0]["finish_reason"] == "stop")
    EXPECT_TRUE(json::parse(text).is_object()) << text;
  else
    EXPECT_EQ(text.substr(0, 1), "{");
  // Completions, with GBNF as llama.cpp's server takes it.
  out = r.Post("/v1/completions",
               {{"prompt", "answer:"},
                {"max_tokens", 50},
                {"seed", 3},
                {"grammar", "root ::= (\"yes\" | \"no\") \" \" [0-9]{2}"}},
               &st);
  ASSERT_EQ(st, 200) << out.dump();
  const std::string t = out["choices"][0]["text"];
  EXPECT_TRUE(t.size() == 6 || t.size() == 5) << t;
  EXPECT_TRUE(t.rfind("yes ", 0) == 0 || t.rfind("no ", 0) == 0) << t;
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
}

TEST(HttpGrammar, MaxTokensCuttingAValueIsLength) {
  Running r;
  int st;
  json out = r.Post("/v1/chat/completions",
                    Chat({{"response_format",
                           {{"type", "json_schema"},
                            {"json_schema", {{"name", "p"}, {"schema", json::parse(kSchema)}}}}},
                          {"max_tokens", 5}}),
                    &st);
  ASSERT_EQ(st, 200) << out.dump();
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(out["choices"][0]["message"]["content"].get<std::string>().substr(0, 1), "{");
}

TEST(HttpGrammar, StreamedConstrainedOutput) {
  Running r;
  json body = Chat({{"grammar", "root ::= \"[\" [a-c]{3} \"]\""}, {"stream", true}});
  auto res = r.cli->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::string text;
  size_t at = 0;
  while ((at = res->body.find("data: {", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    json c = json::parse(res->body.substr(at + 6, end - at - 6));
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    at = end;
  }
  ASSERT_EQ(text.size(), 5u) << text;
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.back(), ']');
}

TEST(HttpGrammar, BadSchemasAndGrammarsAre400s) {
  Running r;
  auto schema_error = [&](const json& schema) {
    int st;
    json out = r.Post(
        "/v1/chat/completions",
        Chat({{"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}),
        &st);
    EXPECT_EQ(st, 400) << out.dump();
    EXPECT_EQ(out["error"]["param"], "response_format");
    return out["error"]["message"].get<std::string>();
  };
  EXPECT_NE(schema_error(json::parse(R"({"type":"string","format":"email"})")).find("'format'"),
            std::string::npos);
  EXPECT_NE(schema_error(json::parse(R"({"type":"string","pattern":"a+"})")).find("'pattern'"),
            std::string::npos);
  EXPECT_NE(schema_error(json::parse(R"({"type":"integer","minimum":5,"maximum":1})"))
                .find("can never be satisfied"),
            std::string::npos);
  EXPECT_NE(schema_error(json::parse(R"({"$ref":"#/$defs/nope"})")).find("points nowhere"),
            std::string::npos);
  int st;
  json out = r.Post("/v1/chat/completions", Chat({{"grammar", "root ::= undefined"}}), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(out["error"]["param"], "grammar");
  EXPECT_NE(out["error"]["message"].get<std::string>().find("never defined"), std::string::npos);
  out = r.Post("/v1/chat/completions", Chat({{"grammar", "root ::= root \"x\""}}), &st);
  EXPECT_EQ(st, 400);
  out = r.Post("/v1/completions",
               {{"prompt", "x"},
                {"grammar", "root ::= \"a\""},
                {"response_format", {{"type", "json_object"}}}},
               &st);
  EXPECT_EQ(st, 400);
  out = r.Post("/v1/chat/completions", Chat({{"response_format", {{"type", "xml"}}}}), &st);
  EXPECT_EQ(st, 400);
  out = r.Post("/v1/chat/completions",
               Chat({{"response_format",
                      {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}}}}),
               &st);
  EXPECT_EQ(st, 400);  // no name
  // The server still serves.
  out = r.Post("/v1/chat/completions", Chat({{"max_tokens", 3}}), &st);
  EXPECT_EQ(st, 200);
}

}  // namespace
}  // namespace es

namespace es {
namespace {

json Tools() {
  return json::parse(
      R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["c","f"]}},
      "required":["city","unit"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer",
      "minimum":0,"maximum":99},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"]}}}])");
}

TEST(HttpTools, RequiredAndNamedCallsAreValid) {
  Running r;
  for (int seed = 0; seed < 8; ++seed) {
    int st;
    json out = r.Post("/v1/chat/completions",
                      Chat({{"tools", Tools()}, {"tool_choice", "required"}, {"seed", seed}}), &st);
    ASSERT_EQ(st, 200) << out.dump();
    const json& choice = out["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << out.dump();
    const json& call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    if (call["function"]["name"] == "add") {
      EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << args;
    } else {
      ASSERT_EQ(call["function"]["name"], "get_weather");
      EXPECT_TRUE(args["city"].is_string() && (args["unit"] == "c" || args["unit"] == "f")) << args;
    }
  }
  int st;
  json out =
      r.Post("/v1/chat/completions",
             Chat({{"tools", Tools()},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}}),
             &st);
  ASSERT_EQ(st, 200) << out.dump();
  EXPECT_EQ(out["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "add");
}

TEST(HttpTools, StreamedCallDeltasAndRoundTrip) {
  Running r;
  json body =
      Chat({{"tools", Tools()}, {"tool_choice", "required"}, {"stream", true}, {"seed", 1}});
  auto res = r.cli->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  std::string name, args, id, finish;
  size_t at = 0;
  while ((at = res->body.find("data: {", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    json c = json::parse(res->body.substr(at + 6, end - at - 6));
    at = end;
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    const json& tc = ch["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) id = tc["id"];
    if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
    args += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_FALSE(id.empty());
  EXPECT_TRUE(name == "add" || name == "get_weather") << name;
  EXPECT_TRUE(json::parse(args).is_object()) << args;
  // The result goes back as a tool message through the template.
  json msgs = json::array(
      {{{"role", "user"}, {"content", "weather?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls", json::array({{{"id", id},
                                     {"type", "function"},
                                     {"function", {{"name", name}, {"arguments", args}}}}})}},
       {{"role", "tool"}, {"tool_call_id", id}, {"content", "{\"temp\": 3}"}}});
  int st;
  json out = r.Post("/v1/chat/completions",
                    {{"messages", msgs}, {"tools", Tools()}, {"max_tokens", 5}}, &st);
  EXPECT_EQ(st, 200) << out.dump();
}

TEST(HttpTools, AutoLeavesTextAndBadToolsAre400s) {
  Running r;
  int st;
  // auto with the fake model's text: no valid call, so content and "length"/"stop", never a 500.
  json out = r.Post("/v1/chat/completions", Chat({{"tools", Tools()}, {"max_tokens", 12}}), &st);
  ASSERT_EQ(st, 200) << out.dump();
  EXPECT_TRUE(out["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(out["choices"][0]["message"].contains("tool_calls"));
  // none: never parsed.
  out = r.Post("/v1/chat/completions",
               Chat({{"tools", Tools()}, {"tool_choice", "none"}, {"max_tokens", 4}}), &st);
  EXPECT_EQ(st, 200);
  auto bad = [&](const json& extra, const char* param) {
    json o = r.Post("/v1/chat/completions", Chat(extra), &st);
    EXPECT_EQ(st, 400) << extra.dump();
    EXPECT_EQ(o["error"]["param"], param) << o.dump();
    return o["error"]["message"].get<std::string>();
  };
  json broken = Tools();
  broken[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]";
  EXPECT_NE(bad({{"tools", broken}}, "tools").find("'pattern'"), std::string::npos);
  broken = Tools();
  broken[1]["function"]["parameters"] =
      json::parse(R"({"type":"object","properties":{"a":false},"required":["a"]})");
  EXPECT_NE(bad({{"tools", broken}}, "tools").find("can never be satisfied"), std::string::npos);
  broken = Tools();
  broken[1]["function"]["name"] = "bad name!";
  bad({{"tools", broken}}, "tools");
  bad({{"tools", Tools()},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
      "tool_choice");
  bad({{"tool_choice", "required"}}, "tool_choice");
  bad({{"tools", Tools()}, {"tool_choice", "sometimes"}}, "tool_choice");
  bad({{"tools", Tools()},
       {"tool_choice", "required"},
       {"response_format", {{"type", "json_object"}}}},
      "tool_choice");
}

}  // namespace
}  // namespace es
