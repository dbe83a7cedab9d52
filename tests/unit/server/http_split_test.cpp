// A served model over a layer split of two CPU stages (`devices: "cpu,cpu"`), whose decode
// steps keep groups of requests in flight (Engine's pipelined steps): closed-loop clients get
// the greedy completions the same model gives on one device, request by request.
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edgeseek/internal/server/server.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using json = nlohmann::json;

// The tiny synthetic model (2 layers) twice: "one" on one CPU device, "split" over two stages.
ServerConfig SplitConfig() {
  ServerConfig c = test::TinyServerConfig();
  c.models.clear();
  for (const char* name : {"one", "split"}) {
    ModelEntry m;
    m.name = name;
    m.synthetic = test::SourceDir() + "/tests/server/tiny_config.json";
    m.tokenizer = test::SourceDir() + "/tests/data/tiny_tokenizer";
    m.seed = 7;
    InstanceConfig ic;
    ic.slots = 4;
    ic.context = 256;
    ic.threads = 1;
    if (name[0] == 's') ic.devices = "cpu,cpu";
    m.instances = {ic};
    c.models.push_back(m);
  }
  return c;
}

TEST(HttpSplit, ClosedLoopClientsOverTwoCpuStagesGetTheOneDeviceCompletions) {
  Server srv(SplitConfig(), DefaultModelBuilder());
  srv.Listen();
  srv.LoadModels();
  // Three clients, three requests each, one after another (a closed loop): prompts and lengths
  // differ, so requests join and leave the running groups at different steps.
  auto body = [](const std::string& model, int client, int i) {
    return json{{"model", model},
                {"prompt", "client " + std::to_string(client) + " asks question " +
                               std::to_string(i) + std::string(size_t(client * 3 + i), '!')},
                {"max_tokens", 6 + 5 * ((client + i) % 3)},
                {"temperature", 0},
                {"ignore_eos", true}}
        .dump();
  };
  std::mutex mu;
  std::map<std::string, std::string> split_text;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c)
    clients.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", srv.port());
      cli.set_read_timeout(60, 0);
      for (int i = 0; i < 3; ++i) {
        auto res = cli.Post("/v1/completions", body("split", c, i), "application/json");
        std::lock_guard<std::mutex> lock(mu);
        if (!res || res->status != 200) {
          ADD_FAILURE() << "client " << c << " request " << i << ": "
                        << (res ? res->body : std::string("no response"));
          continue;
        }
        split_text[std::to_string(c) + "/" + std::to_string(i)] =
            json::parse(res->body)["choices"][0]["text"].get<std::string>();
      }
    });
  for (auto& t : clients) t.join();
  ASSERT_EQ(split_text.size(), 9u);
  // The same requests on one device, one at a time.
  httplib::Client cli("127.0.0.1", srv.port());
  cli.set_read_timeout(60, 0);
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 3; ++i) {
      auto res = cli.Post("/v1/completions", body("one", c, i), "application/json");
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no response");
      EXPECT_EQ(split_text[std::to_string(c) + "/" + std::to_string(i)],
                json::parse(res->body)["choices"][0]["text"].get<std::string>())
          << "client " << c << " request " << i;
    }
  srv.Shutdown();
}

}  // namespace
}  // namespace es
