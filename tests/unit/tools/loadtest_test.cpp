// `edgeseek loadtest` against a stub server that records the request bodies: the requests carry
// --response-format as OpenAI's response_format, the results count the stub's tokens, and a bad
// --response-format is one clear error.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;

// Answers every chat request with a stream of three one-token chunks and the usage chunk.
struct StubServer {
  httplib::Server http;
  std::thread thread;
  std::mutex mu;
  std::vector<json> bodies;
  int port = 0;
  StubServer() {
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu);
        bodies.push_back(json::parse(req.body, nullptr, false));
      }
      std::string sse;
      for (const char* t : {"{\"a\"", ":", "1}"})
        sse += "data: " + json{{"choices", {{{"delta", {{"content", t}}}}}}}.dump() + "\n\n";
      sse += "data: " +
             json{{"choices", json::array()},
                  {"usage", {{"prompt_tokens", 5}, {"completion_tokens", 3}}}}
                 .dump() +
             "\n\ndata: [DONE]\n\n";
      res.set_content(sse, "text/event-stream");
    });
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StubServer() {
    http.stop();
    thread.join();
  }
  std::vector<json> Bodies() {
    std::lock_guard<std::mutex> lock(mu);
    return bodies;
  }
};

std::string Loadtest(const StubServer& s, const std::string& args) {
  return test::CliPath() + " loadtest --port " + std::to_string(s.port) + " -c 2 -n 4 " + args;
}

TEST(Loadtest, SendsTheResponseFormatAndCountsTheTokens) {
  StubServer s;
  const std::string out = test::TempDir() + "/loadtest.json";
  std::string stdout_text, err;
  ASSERT_EQ(test::RunCommand(Loadtest(s, "--response-format json_object --json " + out),
                             &stdout_text, &err),
            0)
      << err;
  std::vector<json> bodies = s.Bodies();
  ASSERT_EQ(bodies.size(), 4u);
  for (const json& b : bodies) {
    EXPECT_EQ(b["response_format"], json({{"type", "json_object"}})) << b.dump();
    EXPECT_TRUE(b["stream"].get<bool>());
  }
  EXPECT_NE(stdout_text.find("response_format json_object"), std::string::npos) << stdout_text;
  const json r = json::parse(test::ReadFile(out));
  EXPECT_EQ(r["ok"], 4);
  EXPECT_EQ(r["output_tokens"], 12);  // the usage chunks' 3 a request
  EXPECT_EQ(r["response_format"]["type"], "json_object");

  // A schema file: sent as json_schema with the file's schema.
  const std::string schema_path = test::TempDir() + "/loadtest_schema.json";
  const json schema = {
      {"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  std::ofstream(schema_path) << schema.dump();
  const size_t before = s.Bodies().size();
  ASSERT_EQ(test::RunCommand(Loadtest(s, "--response-format " + schema_path), nullptr, &err), 0)
      << err;
  bodies = s.Bodies();
  ASSERT_EQ(bodies.size(), before + 4);
  const json& f = bodies.back()["response_format"];
  EXPECT_EQ(f["type"], "json_schema");
  EXPECT_EQ(f["json_schema"]["schema"], schema);

  // Without the option: no response_format.
  ASSERT_EQ(test::RunCommand(Loadtest(s, ""), nullptr, &err), 0) << err;
  EXPECT_FALSE(s.Bodies().back().contains("response_format"));
}

TEST(Loadtest, BadResponseFormatIsOneClearError) {
  StubServer s;
  std::string err;
  EXPECT_NE(
      test::RunCommand(Loadtest(s, "--response-format /nonexistent/schema.json"), nullptr, &err),
      0);
  EXPECT_NE(err.find("cannot read '/nonexistent/schema.json'"), std::string::npos) << err;
  const std::string bad = test::TempDir() + "/loadtest_bad_schema.json";
  std::ofstream(bad) << "[1, 2";
  EXPECT_NE(test::RunCommand(Loadtest(s, "--response-format " + bad), nullptr, &err), 0);
  EXPECT_NE(err.find("is not a JSON object"), std::string::npos) << err;
  EXPECT_TRUE(s.Bodies().empty()) << "no request is sent before the option is understood";
}

}  // namespace
}  // namespace es
