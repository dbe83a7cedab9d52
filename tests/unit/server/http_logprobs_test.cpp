// logprobs through the HTTP API with the fake model: OpenAI's shapes on chat (logprobs +
// top_logprobs) and completions (logprobs: n), streamed too; values are the log-softmax after
// the grammar mask (a constrained request's alternatives are only allowed tokens).
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>

#include "edgeseek/internal/server/server.h"
#include "fake_model.h"

namespace es {
namespace {

using json = nlohmann::json;

using Running = test::LoadedServer;

json Chat(const json& extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 8}};
  b.update(extra);
  return b;
}

TEST(HttpLogprobs, ChatShapeAndGreedyConsistency) {
  Running r;
  int st;
  json out = r.Post("/v1/chat/completions",
                    Chat({{"logprobs", true}, {"top_logprobs", 3}, {"temperature", 0}}), &st);
  ASSERT_EQ(st, 200) << out.dump();
  const json& content = out["choices"][0]["logprobs"]["content"];
  const std::string text = out["choices"][0]["message"]["content"];
  ASSERT_EQ(content.size(), text.size());  // one byte per token
  std::string joined;
  for (const json& e : content) {
    joined += e["token"].get<std::string>();
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy picks the most likely token: it heads its own alternatives.
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(),
              e["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_EQ(e["bytes"],
              json::array({int(static_cast<unsigned char>(e["token"].get<std::string>()[0]))}));
  }
  EXPECT_EQ(joined, text);
  // Without logprobs the field stays null.
  out = r.Post("/v1/chat/completions", Chat({{"temperature", 0}}), &st);
  EXPECT_TRUE(out["choices"][0]["logprobs"].is_null());
}

TEST(HttpLogprobs, AfterTheGrammarMaskOnlyAllowedTokensRemain) {
  Running r;
  int st;
  json out = r.Post(
      "/v1/chat/completions",
      Chat({{"logprobs", true}, {"top_logprobs", 5}, {"grammar", "root ::= [ab] [ab] [ab]"}}), &st);
  ASSERT_EQ(st, 200) << out.dump();
  const json& content = out["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  for (const json& e : content) {
    ASSERT_EQ(e["top_logprobs"].size(), 2u);  // only 'a' and 'b' have probability
    double mass = 0;
    for (const json& t : e["top_logprobs"]) mass += std::exp(t["logprob"].get<double>());
    EXPECT_NEAR(mass, 1.0, 1e-5);
  }
}

TEST(HttpLogprobs, CompletionsShapeAndStreaming) {
  Running r;
  int st;
  json out =
      r.Post("/v1/completions",
             {{"prompt", "abc"}, {"max_tokens", 6}, {"logprobs", 2}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200) << out.dump();
  const json& lp = out["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2, 3, 4, 5}));
  // Streamed: the chunks' entries add up to the same tokens and values.
  json body = Chat({{"logprobs", true}, {"temperature", 0}, {"stream", true}});
  auto res = r.cli->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200);
  json whole = r.Post("/v1/chat/completions", Chat({{"logprobs", true}, {"temperature", 0}}), &st);
  std::vector<double> streamed;
  size_t at = 0;
  while ((at = res->body.find("data: {", at)) != std::string::npos) {
    const size_t end = res->body.find("\n\n", at);
    json c = json::parse(res->body.substr(at + 6, end - at - 6));
    if (!c["choices"].empty() && c["choices"][0]["logprobs"].is_object())
      for (const json& e : c["choices"][0]["logprobs"]["content"])
        streamed.push_back(e["logprob"].get<double>());
    at = end;
  }
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(streamed.size(), content.size());
  for (size_t i = 0; i < streamed.size(); ++i)
    EXPECT_DOUBLE_EQ(streamed[i], content[i]["logprob"].get<double>());
}

TEST(HttpLogprobs, BadValuesAre400s) {
  Running r;
  int st;
  r.Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 21}}), &st);
  EXPECT_EQ(st, 400);
  json out = r.Post("/v1/chat/completions", Chat({{"top_logprobs", 2}}), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(out["error"]["param"], "top_logprobs");
  r.Post("/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}, &st);
  EXPECT_EQ(st, 400);
  r.Post("/v1/completions", {{"prompt", "x"}, {"logprobs", true}}, &st);
  EXPECT_EQ(st, 400);
}

}  // namespace
}  // namespace es
