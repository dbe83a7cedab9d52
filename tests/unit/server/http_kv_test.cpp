// The server over a paged KV pool (fake models): a pool too small for the load answers 429
// (queue full) or waits, never crashes, and its blocks return to free; /metrics by blocks and
// prefix-cache hits; usage.prompt_tokens_details.cached_tokens; prefix scopes per client.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <map>
#include <thread>

#include "edgeseek/internal/server/server.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;

std::string Metric(Server& srv, const std::string& needle_prefix) {
  httplib::Client cli("127.0.0.1", srv.port());
  const std::string m = cli.Get("/metrics")->body;
  const size_t at = m.find(needle_prefix);
  if (at == std::string::npos) return "<missing>";
  const size_t end = m.find('\n', at);
  return m.substr(at + needle_prefix.size(), end - at - needle_prefix.size());
}

TEST(HttpKv, PoolTooSmallForTheLoadAnswers429AndKeepsServing) {
  ServerConfig c = test::TinyServerConfig();
  c.models[0].instances[0].slots = 8;
  // 6 blocks of 16 tokens at the fake's 1 KiB a token: 96 tokens for 8 slots of 256.
  c.models[0].instances[0].kv_memory_mb = 6.0 * 16 * 1024 / 1048576.0;
  c.limits.max_queue = 2;
  Server srv(c, test::FakeLoader(0.01));
  srv.Listen();
  srv.LoadModels();
  std::map<int, int> statuses;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      httplib::Client cli("127.0.0.1", srv.port());
      cli.set_read_timeout(30, 0);
      const std::string body =
          R"({"prompt":"request number )" + std::to_string(100 + i) + R"(","max_tokens":30})";
      auto res = cli.Post("/v1/completions", body, "application/json");
      std::lock_guard<std::mutex> lock(mu);
      ++statuses[res ? res->status : -1];
      if (res && res->status != 200 && res->status != 429) {
        ADD_FAILURE() << res->status << " " << res->body;
      }
      if (res && res->status == 429) {
        EXPECT_NE(res->body.find("\"error\""), std::string::npos);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(statuses[-1], 0) << "a connection failed";
  EXPECT_GT(statuses[200], 0);
  EXPECT_GT(statuses[429], 0) << "16 requests against 6 blocks and a queue of 2 were all served";
  // Still serving, and every block is back.
  httplib::Client cli("127.0.0.1", srv.port());
  auto res =
      cli.Post("/v1/completions", R"({"prompt":"after","max_tokens":3})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  std::string used;
  for (int i = 0; i < 200 && used != "0"; ++i) {
    used = Metric(srv, "edgeseek_kv_blocks{model=\"tiny\",instance=\"0\",state=\"used\"} ");
    if (used != "0") std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(used, "0");
  EXPECT_EQ(Metric(srv, "edgeseek_kv_cache_capacity_tokens{model=\"tiny\",instance=\"0\"} "), "96");
  // The pool's bytes at the instance's KV type: 6 blocks x 16 tokens x 1 KiB.
  EXPECT_EQ(Metric(srv, "edgeseek_kv_bytes_per_token{model=\"tiny\",instance=\"0\"} "), "1024");
  EXPECT_EQ(Metric(srv, "edgeseek_kv_block_pool_bytes{model=\"tiny\",instance=\"0\"} "), "98304");
  // A request the pool can never hold is refused up front, naming max_tokens.
  res = cli.Post("/v1/completions",
                 R"({"prompt":"a prompt of forty bytes, with 60 to come","max_tokens":60})",
                 "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("context_length_exceeded"), std::string::npos) << res->body;
  srv.Shutdown();
}

TEST(HttpKv, PrefixCacheHitsAreReportedAndScopedPerClient) {
  ServerConfig c = test::TinyServerConfig();
  for (const char* name : {"alice", "bob", "carol", "dave"}) {
    ClientConfig cl;
    cl.api_key = std::string("sk-") + name[0];
    cl.name = name;
    // alice and bob keep their own scope (the default), carol and dave share one.
    if (name[0] == 'c' || name[0] == 'd') cl.prefix_scope = "shared";
    c.clients.push_back(cl);
  }
  c.metrics_public = true;
  Server srv(c, test::FakeLoader(0.001));
  srv.Listen();
  srv.LoadModels();
  httplib::Client cli("127.0.0.1", srv.port());
  const std::string body =
      R"({"prompt":"a system prompt that is longer than two blocks of sixteen","max_tokens":3})";
  auto cached = [&](const std::string& key) {
    auto res =
        cli.Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body, "application/json");
    EXPECT_TRUE(res && res->status == 200);
    return res ? json::parse(res->body)["usage"]["prompt_tokens_details"]["cached_tokens"]
                     .get<int>()
               : -1;
  };
  EXPECT_EQ(cached("sk-a"), 0);
  EXPECT_EQ(cached("sk-a"), 48);  // 55 prompt tokens: 3 whole blocks, the last token recomputed
  EXPECT_EQ(cached("sk-b"), 0) << "alice's cached prompt was served to bob";
  EXPECT_EQ(cached("sk-c"), 0) << "alice's cached prompt reached the shared scope";
  EXPECT_EQ(cached("sk-d"), 48);  // carol's, shared
  EXPECT_EQ(Metric(srv, "edgeseek_prefix_cache_hit_tokens_total{model=\"tiny\",instance=\"0\"} "),
            "96");
  srv.Shutdown();
}

TEST(HttpKv, PrefixScopeMustBeClientOrShared) {
  const std::string dir = test::TempDir();
  test::WriteFile(dir + "/s.json", R"({"clients":[{"api_key":"k","prefix_scope":"everyone"}]})");
  try {
    LoadServerConfig(dir + "/s.json", test::SourceDir() + "/configs/server.schema.json");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("prefix_scope"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace es
