// OpenAI request parsing and validation, stop strings, the reasoning splitter, the Prometheus
// text format and the JSON Schema validator / server config loader.
#include "server/protocol.h"

#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/runtime/text_stream.h"
#include "edgeseek/internal/server/server.h"
#include "server/metrics.h"
#include "test_util.h"

namespace es::server {
namespace {

ProtocolLimits Lim() { return ProtocolLimits{}; }

ApiError ChatError(const std::string& body) {
  try {
    ParseChatRequest(ParseBody(body), Lim());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(Protocol, ParsesAFullChatRequest) {
  auto r = ParseChatRequest(ParseBody(R"({
    "model": "m", "messages": [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
    "max_completion_tokens": 12, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "seed": -3, "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "stream": true, "stream_options": {"include_usage": true}, "priority": "high", "n": 1,
    "logprobs": false, "user": "u1"})"),
                            Lim());
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "hi there");
  EXPECT_EQ(*r.gen.max_tokens, 12);
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_EQ(r.gen.sampling.seed, uint64_t(int64_t(-3)));
  EXPECT_EQ(r.gen.stop.size(), 2u);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_EQ(*r.gen.priority, "high");
}

TEST(Protocol, DefaultsAndNulls) {
  auto r = ParseChatRequest(
      ParseBody(
          R"({"messages":[{"role":"user","content":"x"}],"temperature":null,"max_tokens":null})"),
      Lim());
  EXPECT_FALSE(r.gen.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.gen.stream);
}

TEST(Protocol, RejectsBadFieldsNamingThem) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages":[]})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1e30})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999999})",
       "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"12"})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5000})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":2.5})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"seed":1.5})", "seed"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":""})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
       "stream_options"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"priority":[1]})", "priority"},
      {R"({"messages":[{"role":"user","content":"x"}],"model":7})", "model"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content"},
  };
  for (auto& c : cases) {
    ApiError e = ChatError(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(Protocol, MalformedBodies) {
  for (std::string body : {std::string("{"), std::string("[1,2]"), std::string("nul"),
                           std::string("{\"messages\":\"\xff\xfe\"}"), std::string("")}) {
    try {
      ParseBody(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.type, "invalid_request_error");
    }
  }
  json err = ErrorBody(BadRequest("bad", "x", "c"));
  EXPECT_EQ(err.dump(),
            R"({"error":{"code":"c","message":"bad","param":"x","type":"invalid_request_error"}})");
  EXPECT_TRUE(ErrorBody(BadRequest("bad"))["error"]["param"].is_null());
}

// Issue 23: 30,000 nested '[' in "tools" (also tool_calls, chat_template_kwargs) crashed the
// server when the template conversion recursed; the depth is refused before parsing.
TEST(Protocol, DeepNestingIsRefusedBeforeParsing) {
  std::string deep = std::string(30000, '[') + std::string(30000, ']');
  for (std::string body :
       {R"({"messages":[{"role":"user","content":"x"}],"tools":[)" + deep + "]}",
        R"({"messages":[{"role":"assistant","content":null,"tool_calls":[)" + deep + "]}]}",
        R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":)" + deep +
            "}}"}) {
    ApiError e = ChatError(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "json_too_deep");
    EXPECT_NE(e.message.find("levels deep; at most 64 are allowed"), std::string::npos)
        << e.message;
  }
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  std::string text = "\\\"" + std::string(1000, '[');
  EXPECT_EQ(JsonDepth(R"({"a":")" + text + R"("})"), 1u);
  std::string ok = R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":)" +
                   std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']') + "}}";
  EXPECT_EQ(JsonDepth(ok), kMaxJsonDepth);
  EXPECT_NO_THROW(ParseChatRequest(ParseBody(ok), Lim()));
  EXPECT_EQ(
      ChatError(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":[)" +
                std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']') + "]}}")
          .code,
      "json_too_deep");
}

TEST(Protocol, CountsAndLogitBias) {
  json many = json::array();
  for (int i = 0; i < 129; ++i)
    many.push_back({{"type", "function"}, {"function", {{"name", "f"}}}});
  json b = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", many}};
  ApiError e = ChatError(b.dump());
  EXPECT_EQ(e.param, "tools");
  json msgs = json::array();
  for (int i = 0; i < 4097; ++i) msgs.push_back({{"role", "user"}, {"content", "x"}});
  EXPECT_EQ(ChatError(json{{"messages", msgs}}.dump()).param, "messages");
  // logit_bias: the sampler cannot apply it, so it is refused by name rather than ignored.
  e = ChatError(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"50256":-100}})");
  EXPECT_EQ(e.param, "logit_bias");
  EXPECT_EQ(e.code, "unsupported");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":[1]})").param,
            "logit_bias");
  EXPECT_NO_THROW(ParseChatRequest(
      ParseBody(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{}})"), Lim()));
  try {
    ParseCompletionRequest(ParseBody(R"({"prompt":"x","logit_bias":{"1":5}})"), Lim());
    ADD_FAILURE() << "completion logit_bias accepted";
  } catch (const ApiError& err) {
    EXPECT_EQ(err.param, "logit_bias");
  }
}

TEST(Protocol, CompletionPrompts) {
  auto a = ParseCompletionRequest(ParseBody(R"({"prompt":"hello","max_tokens":3})"), Lim());
  EXPECT_EQ(a.prompt_text, "hello");
  EXPECT_FALSE(a.prompt_is_ids);
  auto b = ParseCompletionRequest(ParseBody(R"({"prompt":[1,2,3]})"), Lim());
  EXPECT_TRUE(b.prompt_is_ids);
  EXPECT_EQ(b.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  auto c = ParseCompletionRequest(ParseBody(R"({"prompt":[[4,5]]})"), Lim());
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{4, 5}));
  for (const char* bad :
       {R"({"prompt":[-1]})", R"({"prompt":["a","b"]})", R"({"prompt":""})", R"({"prompt":{}})",
        R"({"prompt":"x","echo":true})", R"({})", R"({"prompt":[1, 2.5]})"}) {
    EXPECT_THROW(ParseCompletionRequest(ParseBody(bad), Lim()), ApiError) << bad;
  }
}

// ---- stop strings and reasoning ----------------------------------------------------------
std::string FeedAll(StopMatcher& m, const std::vector<std::string>& pieces, bool* stopped) {
  std::string out;
  *stopped = false;
  for (auto& p : pieces)
    if (m.Feed(p, &out)) {
      *stopped = true;
      return out;
    }
  m.Flush(&out);
  return out;
}

TEST(TextStream, StopStringsAcrossPieces) {
  bool stopped;
  StopMatcher a({"END"});
  EXPECT_EQ(FeedAll(a, {"hello E", "N", "D and more"}, &stopped), "hello ");
  EXPECT_TRUE(stopped);
  StopMatcher b({"END"});
  EXPECT_EQ(FeedAll(b, {"hello E", "N", "d"}, &stopped), "hello ENd");
  EXPECT_FALSE(stopped);
  StopMatcher c({"ab", "b"});  // the earliest match wins
  EXPECT_EQ(FeedAll(c, {"xxa", "b"}, &stopped), "xx");
  StopMatcher d({});
  EXPECT_EQ(FeedAll(d, {"a", "b"}, &stopped), "ab");
  // Held-back text is only the possible prefix.
  StopMatcher e({"\n\n"});
  std::string out;
  e.Feed("line\n", &out);
  EXPECT_EQ(out, "line");
  EXPECT_EQ(PartialSuffix("abc</thi", "</think>"), 5u);
  EXPECT_EQ(PartialSuffix("abc", "</think>"), 0u);
}

std::pair<std::string, std::string> Split(bool start_in, const std::vector<std::string>& pieces) {
  ReasoningSplitter s(true, start_in);
  std::string r, c;
  for (auto& p : pieces) s.Feed(p, &r, &c);
  s.Flush(&r, &c);
  return {r, c};
}

TEST(TextStream, ReasoningSplitter) {
  EXPECT_EQ(Split(false, {"<think>", "plan", "</think>", "\n\nanswer"}),
            std::make_pair(std::string("plan"), std::string("answer")));
  EXPECT_EQ(Split(false, {"<th", "ink>a b</th", "ink>c"}),
            std::make_pair(std::string("a b"), std::string("c")));
  EXPECT_EQ(Split(false, {"\n<think>x</think>y"}),
            std::make_pair(std::string("x"), std::string("y")));
  // Template already opened <think>: the model emits only the closing tag.
  EXPECT_EQ(Split(true, {"step 1, ", "step 2</", "think>\n\nThe answer is 4."}),
            std::make_pair(std::string("step 1, step 2"), std::string("The answer is 4.")));
  // No tags at all: plain content; an unfinished reasoning block stays reasoning.
  EXPECT_EQ(Split(false, {"just ", "text <think> later"}),
            std::make_pair(std::string(), std::string("just text <think> later")));
  EXPECT_EQ(Split(true, {"never closed"}),
            std::make_pair(std::string("never closed"), std::string()));
  EXPECT_EQ(Split(false, {"<thi"}), std::make_pair(std::string(), std::string("<thi")));
  ReasoningSplitter off(false, true);
  std::string r, c;
  off.Feed("<think>x</think>", &r, &c);
  EXPECT_EQ(c, "<think>x</think>");
  EXPECT_TRUE(r.empty());
}

// ---- metrics ---------------------------------------------------------------------------------
TEST(Metrics, PrometheusTextFormat) {
  Metrics m;
  m.Define("t_requests_total", Metrics::Type::kCounter, "Requests.");
  m.Define("t_queue", Metrics::Type::kGauge, "Queue \\ length.");
  m.Define("t_lat_seconds", Metrics::Type::kHistogram, "Latency.", {0.1, 1});
  m.Add("t_requests_total", {{"status", "200"}}, 2);
  m.Add("t_requests_total", {{"status", "200"}});
  m.Set("t_queue", {{"p", "a\"b\\c\nd"}}, 1.5);
  m.Observe("t_lat_seconds", {}, 0.05);
  m.Observe("t_lat_seconds", {}, 0.1);
  m.Observe("t_lat_seconds", {}, 5);
  EXPECT_EQ(m.Render(),
            "# HELP t_lat_seconds Latency.\n# TYPE t_lat_seconds histogram\n"
            "t_lat_seconds_bucket{le=\"0.1\"} 2\nt_lat_seconds_bucket{le=\"1\"} 2\n"
            "t_lat_seconds_bucket{le=\"+Inf\"} 3\nt_lat_seconds_sum 5.15\nt_lat_seconds_count 3\n"
            "# HELP t_queue Queue \\\\ length.\n# TYPE t_queue "
            "gauge\nt_queue{p=\"a\\\"b\\\\c\\nd\"} 1.5\n"
            "# HELP t_requests_total Requests.\n# TYPE t_requests_total counter\n"
            "t_requests_total{status=\"200\"} 3\n");
  EXPECT_EQ(m.Value("t_requests_total", {{"status", "200"}}), 3);
  EXPECT_THROW(m.Add("t_queue", {}, 1), Error);  // wrong type
}

// ---- schema and config -------------------------------------------------------------------
std::string SchemaPath() { return test::SourceDir() + "/configs/server.schema.json"; }

TEST(Config, ExampleConfigIsValid) {
  ServerConfig c =
      LoadServerConfig(test::SourceDir() + "/configs/server.example.json", SchemaPath());
  ASSERT_EQ(c.qos.classes.size(), 3u);
  EXPECT_EQ(c.qos.classes[0].name, "interactive");
  EXPECT_DOUBLE_EQ(c.qos.classes[0].preempt_after_s, 2.0);
  EXPECT_FALSE(c.qos.classes[0].preemptible);
  ASSERT_EQ(c.clients.size(), 2u);
  EXPECT_EQ(c.clients[0].weight, 3);
  ASSERT_EQ(c.models.size(), 1u);
  ASSERT_EQ(c.models[0].instances.size(), 2u);
  EXPECT_EQ(c.models[0].instances[0].backend, "vulkan");
  EXPECT_DOUBLE_EQ(c.models[0].instances[1].kv_memory_mb, 512);
  EXPECT_TRUE(c.models[0].balance.migrate);
  EXPECT_DOUBLE_EQ(c.models[0].balance.overload, 0.75);
  EXPECT_EQ(c.models[0].balance.min_tokens_left, 16);
  EXPECT_EQ(c.limits.max_concurrent_per_client, 32);
  EXPECT_DOUBLE_EQ(c.limits.idle_timeout_s, 1.5);
  EXPECT_EQ(c.limits.max_connections_per_ip, 256);
  EXPECT_EQ(c.metrics_keys, std::vector<std::string>{"sk-prometheus"});
  EXPECT_FALSE(c.metrics_public);
}

std::string ConfigError(const std::string& text) {
  try {
    ServerConfigFromJson(json::parse(text), SchemaPath(), "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Config, ErrorsNameTheField) {
  EXPECT_EQ(ConfigError(R"({"port": 70000})"),
            "cfg.json: /port: 70000 is greater than the maximum 65535");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","instances":[{"slots":0}]}]})"),
            "cfg.json: /models/0/instances/0/slots: 0 is less than the minimum 1");
  EXPECT_EQ(ConfigError(R"({"limits":{"max_tokens":"many"}})"),
            "cfg.json: /limits/max_tokens: expected integer, got string \"many\"");
  EXPECT_EQ(ConfigError(R"({"prt": 1})"), "cfg.json: /prt: unknown property 'prt'");
  EXPECT_EQ(ConfigError(R"({"priorities":[{"weight":1}]})"),
            "cfg.json: /priorities/0: required property 'name' is missing");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","instances":[{"backend":"tpu"}]}]})"),
            "cfg.json: /models/0/instances/0/backend: \"tpu\" is not one of [\"cpu\",\"vulkan\"]");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","instances":[{"kv_type":"int4"}]}]})"),
            "cfg.json: /models/0/instances/0/kv_type: \"int4\" is not one of "
            "[\"f32\",\"f16\",\"q8_0\",\"q4_0\"]");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","instances":[{"kv_type":"q8_0"}]}]})"),
            "accepted");
  EXPECT_EQ(ConfigError(R"({"priorities":[{"name":"a"}],"default_priority":"b"})"),
            "cfg.json: /default_priority: no priority class is named 'b'");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","balance":{"overload":0}}]})"),
            "cfg.json: /models/0/balance/overload: 0 must be greater than 0");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","balance":{"overload":1.5}}]})"),
            "cfg.json: /models/0/balance/overload: 1.5 is greater than the maximum 1");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","balance":{"min_tokens_left":0}}]})"),
            "cfg.json: /models/0/balance/min_tokens_left: 0 is less than the minimum 1");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","balance":{"migrate":"yes"}}]})"),
            "cfg.json: /models/0/balance/migrate: expected boolean, got string \"yes\"");
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m","path":"p","balance":{"moves":1}}]})"),
            "cfg.json: /models/0/balance/moves: unknown property 'moves'");
  {
    const ServerConfig c = ServerConfigFromJson(
        json::parse(
            R"({"models":[{"name":"m","path":"p","balance":{"migrate":false,"overload":1}}]})"),
        SchemaPath(), "cfg.json");
    EXPECT_FALSE(c.models[0].balance.migrate);
    EXPECT_DOUBLE_EQ(c.models[0].balance.overload, 1.0);
    EXPECT_EQ(c.models[0].balance.min_tokens_left, 16);
  }
  EXPECT_EQ(ConfigError(R"({"models":[{"name":"m"}]})"),
            "cfg.json: /models/0: one of 'path' or 'synthetic' is required");
  EXPECT_EQ(
      ConfigError(R"({"priorities":[{"name":"bad name"}]})"),
      "cfg.json: /priorities/0/name: \"bad name\" does not match the pattern \"^[A-Za-z0-9_-]+$\"");
}

// The config validator is the shared schema model (src/grammar, json_schema.h).
TEST(JsonSchema, RefusesUnsupportedKeywordsAndChecksTheRest) {
  using grammar::SchemaModel;
  EXPECT_THROW(SchemaModel::Parse(json::parse(R"({"allOf":[{"type":"string"}]})")), Error);
  EXPECT_THROW(SchemaModel::Parse(json::parse(R"({"$ref":"#/$defs/missing"})")), Error);
  const SchemaModel s = SchemaModel::Parse(
      json::parse(R"({"type":["string","null"],"anyOf":[{"minLength":2},{"type":"null"}]})"));
  EXPECT_TRUE(s.Validate(json("ab")).empty());
  EXPECT_TRUE(s.Validate(json(nullptr)).empty());
  EXPECT_EQ(s.Validate(json("a")).size(), 1u);
  EXPECT_EQ(s.Validate(json(3)).front(), "/: expected string or null, got number 3");
  const SchemaModel arr = SchemaModel::Parse(json::parse(
      R"({"type":"array","items":{"type":"integer"},"uniqueItems":true,"maxItems":3})"));
  EXPECT_TRUE(arr.Validate(json::parse("[1,2]")).empty());
  EXPECT_EQ(arr.Validate(json::parse("[1,1]")).front(), "/: items 0 and 1 are equal");
  EXPECT_EQ(arr.Validate(json::parse("[1,\"x\"]")).front(),
            "/1: expected integer, got string \"x\"");
  EXPECT_EQ(arr.Validate(json::parse("[1,2,3,4]")).front(), "/: array has more than 3 items");
}

}  // namespace
}  // namespace es::server
