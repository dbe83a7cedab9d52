// Plugins (edgeseek.h's es_plugin, runtime/plugin_host.h) with the example plugins of
// examples/plugins: loading and its errors, the tenant constraint (admit / reject / route), the
// shortest-first policy's order in the queue, the probes' lines, and plugins that misbehave
// (error codes, garbage results, C++ exceptions, rejecting everything) — reported, counted, and
// the server keeps serving with OpenAI-style errors.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/plugin_host.h"
#include "edgeseek/internal/server/server.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;

std::string PluginPath(const std::string& name) {
  return test::BinaryDir() + "/examples/plugins/libes_" + name + ".so";
}

std::shared_ptr<SeqRequest> Req(const std::string& id, int prompt, int max_tokens,
                                std::vector<std::pair<std::string, std::string>> metadata = {}) {
  auto r = std::make_shared<SeqRequest>();
  r->id = id;
  r->prompt.assign(size_t(prompt), 1);
  r->max_tokens = max_tokens;
  r->metadata = std::move(metadata);
  return r;
}

const PluginRequestContext kCtx{"tiny", "normal", 2};

TEST(Plugins, LoadErrorsNameThePlugin) {
  PluginHost h;
  try {
    h.Load("/nonexistent/libnothing.so");
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnothing.so"), std::string::npos)
        << e.what();
  }
  // A shared object without es_plugin_init (the C library's libm).
  try {
    h.Load("libm.so.6");
    FAIL() << "loaded a library without es_plugin_init";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("es_plugin_init"), std::string::npos) << e.what();
  }
  // init refuses its config (step_log needs a file; misbehaving a mode).
  EXPECT_THROW(h.Load(PluginPath("step_log")), Error);
  EXPECT_THROW(h.Load(PluginPath("misbehaving") + ":no-such-mode"), Error);
  // One policy per server.
  h.Load(PluginPath("shortest_first"));
  try {
    h.Load(PluginPath("misbehaving") + ":error");
    FAIL() << "a second policy was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("policy"), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.names(), std::vector<std::string>{"shortest_first"});
}

TEST(Plugins, TenantConstraintAdmitsRejectsRoutes) {
  PluginHost h;
  h.Load(PluginPath("tenant_route") + ":tenants=acme,globex;instance=1;deny=mallory");
  PluginDecision d = h.Check(*Req("a", 4, 4, {{"tenant", "acme"}}), kCtx);
  EXPECT_EQ(d.kind, PluginDecision::Kind::kRoute);
  EXPECT_EQ(d.instance, 1);
  d = h.Check(*Req("b", 4, 4, {{"team", "x"}, {"tenant", "globex"}}), kCtx);
  EXPECT_EQ(d.kind, PluginDecision::Kind::kRoute);
  d = h.Check(*Req("c", 4, 4, {{"tenant", "mallory"}}), kCtx);
  EXPECT_EQ(d.kind, PluginDecision::Kind::kReject);
  EXPECT_EQ(d.plugin, "tenant_route");
  EXPECT_EQ(d.message, "tenant 'mallory' may not use model 'tiny'");
  EXPECT_EQ(h.Check(*Req("d", 4, 4, {{"tenant", "acm"}}), kCtx).kind, PluginDecision::Kind::kAdmit);
  EXPECT_EQ(h.Check(*Req("e", 4, 4), kCtx).kind, PluginDecision::Kind::kAdmit);
  EXPECT_EQ(h.errors(), 0);
}

TEST(Plugins, MisbehavingPluginsAreContained) {
  for (const char* mode : {"error", "garbage", "nowhere", "throw"}) {
    SCOPED_TRACE(mode);
    PluginHost h;
    std::vector<std::string> reports;
    h.set_error_sink([&](const std::string& plugin, const std::string& msg) {
      reports.push_back(plugin + ": " + msg);
    });
    h.Load(PluginPath("misbehaving") + ":" + mode);
    const PluginDecision d = h.Check(*Req("a", 4, 4), kCtx);
    EXPECT_EQ(d.kind, PluginDecision::Kind::kError);
    EXPECT_EQ(d.plugin, "misbehaving");
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].rfind("misbehaving: constraint", 0), 0u) << reports[0];
    if (h.has_policy()) {
      EXPECT_EQ(h.Score(*Req("a", 4, 4), kCtx, 1.0), 0.0);  // NaN, an error or a throw: 0
      EXPECT_EQ(reports.size(), 2u);
    }
    StepInfo s;
    h.OnStep("tiny", 0, s);  // probes that throw or fail are skipped
    EXPECT_EQ(h.errors(), int64_t(reports.size()));
  }
  PluginHost h;
  std::string last;
  h.set_error_sink([&](const std::string&, const std::string& msg) { last = msg; });
  h.Load(PluginPath("misbehaving") + ":error");
  h.Check(*Req("a", 4, 4), kCtx);
  EXPECT_EQ(last, "constraint failed (status 5): misbehaving on purpose in constraint");
  h.Load(PluginPath("misbehaving") + ":reject_all");  // reject_all has no policy: loads beside
}

TEST(Plugins, PolicyOrdersTheQueueAndPinsRoute) {
  PluginHost h;
  h.Load(PluginPath("shortest_first") + ":aging=0");
  RequestQueue q(QosPolicy{});
  q.set_priority_fn(
      [&](const SeqRequest& r, double now) { return h.Score(r, kCtx, now - r.submit_time); });
  auto big = Req("big", 40, 20), small = Req("small", 3, 2), mid = Req("mid", 10, 5);
  big->client = "a", small->client = "a", mid->client = "b";
  q.Push(big);
  q.Push(small);
  q.Push(mid);
  EXPECT_EQ(q.PopNext(1 << 20, 0)->id, "small");  // behind big in its client's FIFO, first anyway
  EXPECT_EQ(q.PopNext(1 << 20, 0)->id, "mid");
  EXPECT_EQ(q.PopNext(1 << 20, 0)->id, "big");
  // A request pinned to instance 1 (a constraint's route) is not given to instance 0.
  RequestQueue q2(QosPolicy{});
  auto pinned = Req("pinned", 4, 4);
  pinned->pinned_instance = 1;
  q2.Push(pinned);
  EXPECT_EQ(q2.PopNext(1 << 20, 0, 0), nullptr);
  EXPECT_EQ(q2.PopNext(1 << 20, 0, 1)->id, "pinned");
}

ServerConfig TwoInstances() {
  ServerConfig c = test::TinyServerConfig();
  c.models[0].instances.push_back(c.models[0].instances[0]);
  return c;
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> v;
  for (std::string l; std::getline(f, l);) v.push_back(l);
  return v;
}

TEST(Plugins, ServerRoutesRejectsAndProbes) {
  const std::string log = test::TempDir() + "/steps.log";
  ServerConfig c = TwoInstances();
  c.plugins = {PluginPath("tenant_route") + ":tenants=acme;instance=1;deny=mallory",
               PluginPath("step_log") + ":" + log, PluginPath("shortest_first")};
  test::LoadedServer s(c);
  int status = 0;
  json body = {{"prompt", "hello"}, {"max_tokens", 6}, {"metadata", {{"tenant", "acme"}}}};
  for (int i = 0; i < 3; ++i) {
    json r = s.Post("/v1/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
  }
  // Every step of acme's requests ran on instance 1; each request started and finished.
  int steps = 0, starts = 0, finishes = 0;
  for (const std::string& l : Lines(log)) {
    std::istringstream is(l);
    std::string kind, model;
    int instance;
    is >> kind;
    if (kind == "step") {
      is >> model >> instance;
      EXPECT_EQ(model, "tiny");
      EXPECT_EQ(instance, 1) << l;
      ++steps;
    }
    starts += kind == "start";
    finishes += kind == "finish";
  }
  EXPECT_GE(steps, 3);
  EXPECT_EQ(starts, 3);
  EXPECT_EQ(finishes, 3);
  // A denied tenant: 403 with an OpenAI error object, and the server goes on.
  body["metadata"]["tenant"] = "mallory";
  json r = s.Post(
      "/v1/chat/completions",
      {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"metadata", body["metadata"]}},
      &status);
  EXPECT_EQ(status, 403);
  EXPECT_EQ(r["error"]["code"], "rejected_by_plugin") << r.dump();
  EXPECT_NE(
      r["error"]["message"].get<std::string>().find("tenant 'mallory' may not use model 'tiny'"),
      std::string::npos);
  // Bad metadata is the request's fault.
  r = s.Post("/v1/completions", {{"prompt", "x"}, {"metadata", {{"tenant", 5}}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["param"], "metadata") << r.dump();
  r = s.Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

TEST(Plugins, ServerKeepsServingThroughMisbehavingPlugins) {
  for (const char* mode : {"error", "garbage", "throw", "reject_all"}) {
    SCOPED_TRACE(mode);
    ServerConfig c = TwoInstances();
    c.plugins = {PluginPath("misbehaving") + ":" + mode};
    test::LoadedServer s(c);
    int status = 0;
    for (int i = 0; i < 3; ++i) {
      json r = s.Post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 4}}, &status);
      if (std::string(mode) == "reject_all") {
        EXPECT_EQ(status, 403);
        EXPECT_EQ(r["error"]["code"], "rejected_by_plugin") << r.dump();
      } else {
        EXPECT_EQ(status, 500);
        EXPECT_EQ(r["error"]["code"], "plugin_error") << r.dump();
        EXPECT_NE(r["error"]["message"].get<std::string>().find("misbehaving"), std::string::npos);
      }
    }
    auto health = s.cli->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto models = s.cli->Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    auto metrics = s.cli->Get("/metrics");
    ASSERT_TRUE(metrics);
    if (std::string(mode) != "reject_all") {
      EXPECT_NE(metrics->body.find("edgeseek_plugin_errors_total{plugin=\"misbehaving\"} 3"),
                std::string::npos)
          << metrics->body.substr(0, 2000);
    }
  }
}

}  // namespace
}  // namespace es
