// OpenTelemetry export (src/server/otlp.h): W3C traceparent parsing, and the server's traces
// arriving at a loopback OTLP/HTTP receiver (cpp-httplib) in the OTLP JSON encoding — hex ids,
// string nanoseconds, a SERVER span per request with INTERNAL children, the caller's trace
// joined; a collector that is down costs nothing but the counted failures.
#include "server/otlp.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;

TEST(Otlp, Traceparent) {
  const auto c =
      server::ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(c.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c.parent_span_id, "00f067aa0ba902b7");
  EXPECT_TRUE(
      server::ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
          .valid());
  for (const char* bad :
       {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        // version ff
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",        // zero parent
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",        // upper case
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",        // not hex
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // v00 with more
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
    EXPECT_FALSE(server::ParseTraceparent(bad).valid()) << bad;
  const std::string id = server::RandomHexId(16);
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(id, server::RandomHexId(16));
}

// An OTLP/HTTP receiver on a loopback port: keeps every body POSTed to /v1/traces.
struct Receiver {
  httplib::Server http;
  std::thread thread;
  std::mutex mu;
  std::vector<json> bodies;
  std::vector<std::string> content_types;
  int port = 0;
  Receiver() {
    http.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      bodies.push_back(json::parse(req.body, nullptr, false));
      content_types.push_back(req.get_header_value("Content-Type"));
      res.set_content("{}", "application/json");
    });
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    // stop() before the thread listens would not stop it (the destructor would wait for ever).
    while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    http.stop();
    thread.join();
  }
  // Every span received so far.
  std::vector<json> Spans() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<json> v;
    for (const json& b : bodies)
      for (const json& rs : b["resourceSpans"])
        for (const json& ss : rs["scopeSpans"])
          for (const json& s : ss["spans"]) v.push_back(s);
    return v;
  }
};

std::string Attr(const json& span, const std::string& key) {
  for (const json& a : span["attributes"])
    if (a["key"] == key) {
      const json& v = a["value"];
      if (v.contains("stringValue")) return v["stringValue"];
      if (v.contains("intValue")) return v["intValue"];
      return v.dump();
    }
  return "<none>";
}

bool IsHex(const json& v, size_t n) {
  if (!v.is_string()) return false;
  const std::string s = v;
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(Otlp, RequestsArriveAtTheCollector) {
  Receiver rx;
  ServerConfig c = test::TinyServerConfig();
  c.otlp.endpoint = "http://127.0.0.1:" + std::to_string(rx.port) + "/v1/traces";
  c.otlp.service_name = "edgeseek-test";
  test::LoadedServer s(c);
  int status = 0;
  json r1 = s.Post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 5}}, &status);
  ASSERT_EQ(status, 200) << r1.dump();
  httplib::Headers h = {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
  auto res = s.cli->Post(
      "/v1/chat/completions", h,
      json({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}}).dump(),
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string id2 = json::parse(res->body)["id"];
  // Both requests' root spans arrive (the exporter sends in the background).
  std::vector<json> spans;
  std::map<std::string, json> roots;  // request id -> SERVER span
  for (int i = 0; i < 300 && roots.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    spans = rx.Spans();
    roots.clear();
    for (const json& sp : spans)
      if (sp["kind"] == 2) roots[Attr(sp, "edgeseek.request_id")] = sp;
  }
  ASSERT_EQ(roots.size(), 2u) << json(spans).dump().substr(0, 2000);
  {
    std::lock_guard<std::mutex> lock(rx.mu);
    for (const std::string& ct : rx.content_types) EXPECT_EQ(ct, "application/json");
    const json& resource = rx.bodies[0]["resourceSpans"][0]["resource"];
    EXPECT_EQ(resource["attributes"][0]["key"], "service.name");
    EXPECT_EQ(resource["attributes"][0]["value"]["stringValue"], "edgeseek-test");
  }
  const json& a = roots[r1["id"].get<std::string>()];
  EXPECT_EQ(a["name"], "POST /v1/completions");
  EXPECT_TRUE(IsHex(a["traceId"], 32)) << a.dump();
  EXPECT_TRUE(IsHex(a["spanId"], 16)) << a.dump();
  EXPECT_FALSE(a.contains("parentSpanId"));
  EXPECT_EQ(a["status"]["code"], 1);
  EXPECT_EQ(Attr(a, "gen_ai.usage.output_tokens"), "5");
  EXPECT_EQ(Attr(a, "gen_ai.response.finish_reason"), "length");
  EXPECT_EQ(Attr(a, "gen_ai.request.model"), "tiny");
  // Times are Unix nanoseconds as strings, start <= end, within a minute of now.
  const int64_t t0 = std::stoll(a["startTimeUnixNano"].get<std::string>()),
                t1 = std::stoll(a["endTimeUnixNano"].get<std::string>());
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  EXPECT_LE(t0, t1);
  EXPECT_LT(std::llabs(now - t1), int64_t(60e9));
  // Its children: same trace, parent = the root, inside the root's time, and the engine's spans.
  std::map<std::string, int> names;
  for (const json& sp : spans) {
    if (sp["traceId"] != a["traceId"] || sp["kind"] != 1) continue;
    EXPECT_EQ(sp["parentSpanId"], a["spanId"]);
    EXPECT_TRUE(IsHex(sp["spanId"], 16));
    EXPECT_GE(std::stoll(sp["startTimeUnixNano"].get<std::string>()), t0 - 1000);
    EXPECT_LE(std::stoll(sp["endTimeUnixNano"].get<std::string>()), t1 + 1000);
    ++names[sp["name"]];
  }
  EXPECT_EQ(names["receive+tokenize"], 1);
  EXPECT_EQ(names["queue"], 1);
  EXPECT_GE(names["prefill"], 1);
  EXPECT_GE(names["decode"], 4);
  // The second joined the caller's trace under its span.
  const json& b = roots[id2];
  EXPECT_EQ(b["name"], "POST /v1/chat/completions");
  EXPECT_EQ(b["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(b["parentSpanId"], "00f067aa0ba902b7");
  auto metrics = s.cli->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("edgeseek_otlp_spans_total{outcome=\"ok\"}"), std::string::npos);
}

TEST(Otlp, ACollectorThatIsDownCostsNothingButCountedFailures) {
  int dead_port;
  {
    Receiver rx;  // a port that was just free, now closed again
    dead_port = rx.port;
  }
  ServerConfig c = test::TinyServerConfig();
  c.otlp.endpoint = "http://127.0.0.1:" + std::to_string(dead_port) + "/v1/traces";
  c.otlp.timeout_s = 0.5;
  test::LoadedServer s(c);
  int status = 0;
  for (int i = 0; i < 3; ++i) {
    json r = s.Post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
  }
  std::string body;
  for (int i = 0;
       i < 300 && body.find("edgeseek_otlp_spans_total{outcome=\"error\"}") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    body = s.cli->Get("/metrics")->body;
  }
  EXPECT_NE(body.find("edgeseek_otlp_spans_total{outcome=\"error\"}"), std::string::npos);
  // A bad endpoint is refused when the server is made, naming it.
  c.otlp.endpoint = "grpc://127.0.0.1:4317";
  try {
    Server bad(c, test::FakeLoader(0));
    FAIL() << "accepted a grpc:// endpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grpc://127.0.0.1:4317"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace es
